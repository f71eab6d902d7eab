#include "billing/metering.h"

#include <algorithm>

#include "common/check.h"
#include "common/unix_time.h"

namespace lg::billing {

int64_t maxCost(const Rates& r, int64_t prompt_tokens, int64_t max_tokens) {
  return prompt_tokens * std::max(r.input_cache_hit, r.input_cache_miss) + max_tokens * r.output;
}

// ------------------------------------------------------------- idempotency

bool validIdempotencyKey(std::string_view key) {
  return !key.empty() && key.size() <= 255 &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

std::string IdempotencyDecision::message() const {
  switch (kind) {
    case Kind::kInvalidKey:
      return "The Idempotency-Key header must be 1 to 255 printable ASCII characters.";
    case Kind::kInFlight:
      return "A request with this Idempotency-Key is still in progress; retry once it has finished.";
    case Kind::kReused:
      return "This Idempotency-Key was used by another request (" + record->request_id +
             ") with a different endpoint or body.";
    case Kind::kSpent:
      return "The request with this Idempotency-Key (" + record->request_id + ") ended " +
             std::string(entryStatusName(record->status)) +
             " and was billed once; its response was not kept. Send a new Idempotency-Key to run it again.";
    case Kind::kClaimed:
    case Kind::kReplay:
      break;
  }
  return "";
}

// ----------------------------------------------------------------- budgets

std::string quotaMessage(const BudgetRefusal& refused, const Principal& who) {
  const BudgetStatus& b = refused.budget;
  const std::string whose = b.scope == "key" ? "this API key's" : "team " + who.team + "'s";
  const std::string period = b.period == "total" ? "total" : b.period == "day" ? "daily" : "monthly";
  return "You exceeded your current quota: " + whose + " " + period + " budget of $" + usd(b.limit) + " has $" +
         usd(std::max<Int128>(b.remaining(), 0)) + " left ($" + usd(b.spent) + " spent, $" + usd(b.reserved) +
         " reserved by requests in flight), and this request may cost up to $" + usd(refused.amount) +
         " (its prompt at the cache-miss price and max_tokens at the output price). Lower max_tokens, wait for "
         "the budget to renew, or ask an admin to raise it.";
}

// ----------------------------------------------------------- entry status

std::string_view earlyEndName(EarlyEnd why) {
  switch (why) {
    case EarlyEnd::kNone: return "none";
    case EarlyEnd::kClientLeft: return "client_left";
    case EarlyEnd::kServerStopped: return "server_stopped";
    case EarlyEnd::kPartRefused: return "part_refused";
    case EarlyEnd::kRevoked: return "revoked";
  }
  return "none";
}

EntryStatus choiceStatus(const ChoiceResult& c, EarlyEnd why) {
  switch (c.end) {
    case ChoiceEnd::kCompleted: return EntryStatus::kCompleted;
    case ChoiceEnd::kRefused: return EntryStatus::kRefused;
    case ChoiceEnd::kFailed: return EntryStatus::kFailed;
    case ChoiceEnd::kCancelled:
      // Only what the client did, a refusal of part of its request, or a
      // revocation of its key is billed; anything else that cancels (the
      // server's request timeout, a shutdown, a deadline) is the server's
      // failure.
      return why == EarlyEnd::kClientLeft || why == EarlyEnd::kPartRefused || why == EarlyEnd::kRevoked
                 ? EntryStatus::kCancelled
                 : EntryStatus::kFailed;
  }
  return EntryStatus::kFailed;
}

EntryStatus entryStatus(const std::vector<ChoiceResult>& choices, EarlyEnd why) {
  bool any_ran = false, any_refused = false, all_refused = true, all_completed = true;
  for (const ChoiceResult& c : choices) {
    const EntryStatus s = choiceStatus(c, why);
    if (s == EntryStatus::kFailed) return EntryStatus::kFailed;
    any_ran = any_ran || c.usage.ran();
    any_refused = any_refused || s == EntryStatus::kRefused;
    all_refused = all_refused && s == EntryStatus::kRefused;
    all_completed = all_completed && s == EntryStatus::kCompleted;
  }
  if (all_refused || (!any_ran && any_refused)) return EntryStatus::kRefused;
  if (all_completed) return EntryStatus::kCompleted;
  return EntryStatus::kCancelled;
}

// -------------------------------------------------------- a metered request

MeteredRequest::MeteredRequest(Ledger& ledger, Info info, AppliedRates rates, size_t choices,
                               std::optional<IdempotencyClaim> claim, BudgetReservation reservation)
    : ledger_(ledger),
      info_(std::move(info)),
      rates_(std::move(rates)),
      claim_(std::move(claim)),
      reservation_(std::move(reservation)),
      choices_(choices),
      ended_(choices, false) {}

MeteredRequest::~MeteredRequest() {
  // No lock: nothing else can hold a request being destroyed.
  if (committed_) return;
  if (claim_) ledger_.release(info_.who.key_id, claim_->key_hash);
  reservation_.release();
}

Cost MeteredRequest::costOf(int64_t hit_tokens, int64_t miss_tokens, int64_t output_tokens) const {
  return billing::costOf(rates_.rates, hit_tokens, miss_tokens, output_tokens);
}

void MeteredRequest::endedEarly(EarlyEnd why) {
  std::lock_guard lock(mu_);
  if (early_ == EarlyEnd::kNone) early_ = why;
}

bool MeteredRequest::choiceEnded(size_t index, ChoiceResult result) {
  std::lock_guard lock(mu_);
  // A choice reports once; an index out of range is the caller's bug and
  // would mis-bill, so it stops the process in release builds too.
  LG_CHECK(index < choices_.size() && !ended_[index], "choice ", index, " of ", choices_.size(), " ended again");
  ended_[index] = true;
  choices_[index] = std::move(result);
  ++ended_count_;
  return ended_count_ == choices_.size();
}

void MeteredRequest::keep(std::string_view bytes) {
  if (!claim_ || !info_.stream) return;
  std::lock_guard lock(mu_);
  if (transcript_overflow_) return;
  if (transcript_.size() + bytes.size() > ledger_.options().max_replay_bytes) {
    transcript_overflow_ = true;
    transcript_.clear();
    transcript_.shrink_to_fit();
    return;
  }
  transcript_ += bytes;
}

void MeteredRequest::abandon() {
  BudgetReservation held;
  {
    std::lock_guard lock(mu_);
    LG_CHECK(!committed_, "a metered request abandoned after its commit");
    committed_ = true;
    held = std::move(reservation_);
  }
  if (claim_) ledger_.release(info_.who.key_id, claim_->key_hash);
  held.release();
}

std::vector<EntryStatus> MeteredRequest::choiceStatuses() const {
  std::lock_guard lock(mu_);
  std::vector<EntryStatus> out;
  for (const ChoiceResult& c : choices_) out.push_back(choiceStatus(c, early_));
  return out;
}

LedgerEntry MeteredRequest::entry() const {
  std::lock_guard lock(mu_);
  return entryLocked();
}

LedgerEntry MeteredRequest::entryLocked() const {
  LedgerEntry e;
  e.request_id = info_.request_id;
  e.response_id = info_.response_id;
  e.key_id = info_.who.key_id;
  e.team = info_.who.team;
  e.model = info_.model;
  e.requested_model = info_.requested_model;
  e.endpoint = info_.endpoint;
  e.system_prompt = info_.system_prompt;
  e.start_us = info_.start_us;
  e.end_us = std::max(unixMicros(), info_.start_us);
  e.choices = static_cast<int32_t>(choices_.size());
  e.prices = rates_;
  double ttft_s = -1;
  for (const ChoiceResult& c : choices_) {
    e.prompt_tokens += c.usage.prompt_tokens;
    e.hit_tokens_tier0 += c.usage.hit_tokens_tier0;
    e.hit_tokens_disk += c.usage.hit_tokens_disk;
    e.miss_tokens += c.usage.miss_tokens;
    e.output_tokens += c.usage.output_tokens;
    if (c.usage.output_tokens > 0 && c.ttft_s >= 0 && (ttft_s < 0 || c.ttft_s < ttft_s)) ttft_s = c.ttft_s;
  }
  e.ttft_us = ttft_s < 0 ? -1 : static_cast<int64_t>(ttft_s * 1e6);
  // The anatomy: every choice's miss tokens by cause; where the first miss
  // lies and why, from the first choice that computed anything.
  for (const ChoiceResult& c : choices_) {
    if (!c.miss.recorded()) continue;
    if (!e.miss.recorded()) {
      const auto by_cause = e.miss.tokens_by_cause;
      e.miss = c.miss;
      e.miss.tokens_by_cause = by_cause;
    }
    for (size_t i = 0; i < kMissCauses; ++i) e.miss.tokens_by_cause[i] += c.miss.tokens_by_cause[i];
  }
  e.status = entryStatus(choices_, early_);
  // The finish reason that explains the status: the refusal that ended the
  // response early, else the first choice billed as the request is.
  for (const ChoiceResult& c : choices_) {
    const bool ended_by_refusal = early_ == EarlyEnd::kPartRefused && e.status == EntryStatus::kCancelled;
    const bool explains = ended_by_refusal ? c.end == ChoiceEnd::kRefused : choiceStatus(c, early_) == e.status;
    if (explains) {
      e.finish_reason = c.finish_reason;
      break;
    }
  }
  if (claim_) e.idempotency_key = claim_->key_hash;
  e.price();
  return e;
}

void MeteredRequest::commit(std::string_view final_body, std::string content_type, std::function<void(Status)> then) {
  LedgerEntry e;
  std::optional<IdempotencyCommit> idem;
  auto reservation = std::make_shared<BudgetReservation>();
  {
    std::lock_guard lock(mu_);
    LG_CHECK(!committed_, "a metered request committed twice");
    committed_ = true;
    *reservation = std::move(reservation_);
    e = entryLocked();
    if (claim_) {
      idem = IdempotencyCommit{info_.who.key_id, claim_->key_hash, std::nullopt};
      // Completed and cancelled requests were billed: their key is spent.
      // Refused and failed ones cost nothing and leave it free for a retry.
      if (billable(e.status)) {
        IdempotencyRecord r;
        r.request_id = info_.request_id;
        r.request_digest = claim_->digest;
        r.status = e.status;
        r.created_us = e.end_us;
        r.stream = info_.stream;
        r.content_type = std::move(content_type);
        if (e.status == EntryStatus::kCompleted && !transcript_overflow_) {
          std::string body = info_.stream ? transcript_ + std::string(final_body) : std::string(final_body);
          if (body.size() <= ledger_.options().max_replay_bytes) {
            r.body = std::move(body);
            r.body_kept = true;
          }
        }
        idem->record = std::move(r);
      }
    }
  }
  // The ledger told the budgets of the committed cost before this runs; a
  // failed commit spent nothing. Either way the reservation ends here.
  ledger_.commit(std::move(e), std::move(idem), [then = std::move(then), reservation](Status s) {
    reservation->release();
    if (then) then(std::move(s));
  });
}

// ---------------------------------------------------------------- metering

AppliedRates Metering::ratesFor(std::string_view model, int64_t start_us) const {
  return services_.prices != nullptr ? services_.prices->at(model, start_us) : PriceTable{}.at(model, start_us);
}

std::string Metering::systemPromptFingerprint(
    std::string_view team, const std::vector<std::pair<std::string_view, std::string_view>>& messages) const {
  if (services_.fingerprints == nullptr || services_.ledger == nullptr) return "";
  return services_.fingerprints->fingerprint(team, messages);
}

Result<IdempotencyDecision> Metering::claimIdempotencyKey(const Principal& who, std::string_view header,
                                                          std::string_view endpoint, std::string_view body) const {
  IdempotencyDecision d;
  if (!validIdempotencyKey(header)) {
    d.kind = IdempotencyDecision::Kind::kInvalidKey;
    return d;
  }
  d.claim = IdempotencyClaim{idempotencyKeyHash(header), requestDigest(endpoint, body)};
  LG_ASSIGN_OR_RETURN(Ledger::Claim claimed, services_.ledger->claim(who.key_id, d.claim.key_hash));
  switch (claimed.state) {
    case Ledger::ClaimState::kClaimed:
      d.kind = IdempotencyDecision::Kind::kClaimed;
      return d;
    case Ledger::ClaimState::kInFlight:
      d.kind = IdempotencyDecision::Kind::kInFlight;
      return d;
    case Ledger::ClaimState::kDone:
      break;
  }
  d.record = std::move(claimed.record);
  if (d.record->request_digest != d.claim.digest) {
    d.kind = IdempotencyDecision::Kind::kReused;
  } else if (d.record->body_kept) {
    // The same response again, billed once: the first request's entry.
    d.kind = IdempotencyDecision::Kind::kReplay;
  } else {
    d.kind = IdempotencyDecision::Kind::kSpent;
  }
  return d;
}

void Metering::releaseIdempotencyKey(const Principal& who, const IdempotencyClaim& claim) const {
  services_.ledger->release(who.key_id, claim.key_hash);
}

std::variant<BudgetReservation, QuotaRefusal> Metering::reserve(const Principal& who, int64_t amount,
                                                                 int64_t now_s) const {
  if (services_.budgets == nullptr) return BudgetReservation{};
  auto held = services_.budgets->reserve(who, amount, now_s);
  if (auto* r = std::get_if<BudgetReservation>(&held)) return std::move(*r);
  BudgetRefusal refused = std::get<BudgetRefusal>(std::move(held));
  std::string message = quotaMessage(refused, who);
  return QuotaRefusal{std::move(refused), std::move(message)};
}

std::shared_ptr<MeteredRequest> Metering::start(MeteredRequest::Info info, AppliedRates rates, size_t choices,
                                                std::optional<IdempotencyClaim> claim,
                                                BudgetReservation reservation) const {
  if (services_.ledger == nullptr) return nullptr;
  return std::make_shared<MeteredRequest>(*services_.ledger, std::move(info), std::move(rates), choices,
                                          std::move(claim), std::move(reservation));
}

}  // namespace lg::billing

#include "proxy/request_billing.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/unix_time.h"
#include "proxy/gateway.h"
#include "proxy/proxy_log.h"

namespace lg::proxy {

namespace {

std::string_view roleName(openai::Role role) { return role == openai::Role::kSystem ? "system" : "developer"; }

// What an Idempotency-Key may be: 1..255 printable ASCII characters.
bool validIdempotencyKey(std::string_view key) {
  return !key.empty() && key.size() <= 255 &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

openai::ApiError idempotencyError(int status, std::string code, std::string message) {
  openai::ApiError e = openai::invalidRequest("", std::move(code), std::move(message));
  e.http_status = status;
  return e;
}

}  // namespace

nlohmann::json costJson(const billing::Cost& c) {
  return nlohmann::json{{"currency", "USD"},
                        {"input_cache_hit", billing::usd(c.input_cache_hit)},
                        {"input_cache_miss", billing::usd(c.input_cache_miss)},
                        {"output", billing::usd(c.output)},
                        {"total", billing::usd(c.total())}};
}

std::string systemPromptOf(const BillingServices& services, const openai::ChatPrompt& prompt) {
  if (services.fingerprints == nullptr) return "";
  std::vector<std::pair<std::string_view, std::string_view>> parts;
  for (const openai::ChatMessage& m : prompt.messages) {
    if (m.role != openai::Role::kSystem && m.role != openai::Role::kDeveloper) break;
    parts.emplace_back(roleName(m.role), m.content ? std::string_view(*m.content) : std::string_view());
  }
  return services.fingerprints->fingerprint(parts);
}

std::shared_ptr<RequestBilling> RequestBilling::start(const BillingServices& services, Exchange& exchange,
                                                     const billing::Principal& who, std::string_view served_model,
                                                     Info info, size_t choices, bool* answered) {
  *answered = false;
  if (services.ledger == nullptr) return nullptr;
  const HttpRequest& request = exchange.request();
  info.request_id = request.id;
  info.who = who;
  info.model = std::string(served_model);
  info.endpoint = request.path;
  if (auto key = request.headers.get("idempotency-key")) {
    *answered = true;
    if (!validIdempotencyKey(*key)) {
      respondWithApiError(exchange, idempotencyError(400, "invalid_idempotency_key",
                                                     "The Idempotency-Key header must be 1 to 255 printable ASCII characters."));
      return nullptr;
    }
    IdempotencyClaim claim{billing::idempotencyKeyHash(*key), billing::requestDigest(request.path, request.body)};
    auto claimed = services.ledger->claim(who.key_id, claim.key_hash);
    if (!claimed.isOk()) {
      proxyLog()->error("request {}: reading an idempotency record failed: {}", request.id, claimed.status().toString());
      respondWithApiError(exchange, openai::internalError());
      return nullptr;
    }
    if (claimed->state == billing::Ledger::ClaimState::kInFlight) {
      openai::ApiError e = idempotencyError(409, "idempotency_key_in_use",
                                            "A request with this Idempotency-Key is still in progress; retry once it has finished.");
      e.retry_after_s = 1;
      respondWithApiError(exchange, e);
      return nullptr;
    }
    if (claimed->state == billing::Ledger::ClaimState::kDone) {
      const billing::IdempotencyRecord& r = *claimed->record;
      if (r.request_digest != claim.digest) {
        respondWithApiError(exchange, idempotencyError(400, "idempotency_key_reused",
                                                       "This Idempotency-Key was used by another request (" +
                                                           r.request_id + ") with a different endpoint or body."));
      } else if (r.body_kept) {
        // The same response again, billed once: the first request's entry.
        HttpHeaders h{{"content-type", r.content_type}};
        h.add("x-latentgate-idempotent-replay", r.request_id);
        exchange.respond(200, std::move(h), r.body);
      } else {
        respondWithApiError(exchange, idempotencyError(409, "idempotency_key_used",
                                                       "The request with this Idempotency-Key (" + r.request_id + ") ended " +
                                                           std::string(billing::entryStatusName(r.status)) +
                                                           " and was billed once; its response was not kept. Send a new "
                                                           "Idempotency-Key to run it again."));
      }
      return nullptr;
    }
    *answered = false;
    info.idempotency = std::move(claim);
  }
  return std::make_shared<RequestBilling>(services, std::move(info), choices, unixMicros());
}

RequestBilling::RequestBilling(const BillingServices& services, Info info, size_t choices, int64_t start_us)
    : ledger_(*services.ledger),
      budgets_(services.budgets),
      info_(std::move(info)),
      start_us_(start_us),
      rates_(services.prices != nullptr ? services.prices->at(info_.model, start_us)
                                        : billing::PriceTable{}.at(info_.model, start_us)),
      expected_(choices) {}

openai::UsageCostHook RequestBilling::costHook() const {
  return [rates = rates_.rates](const openai::UsageCounts& u) -> std::optional<nlohmann::json> {
    return costJson(billing::costOf(rates, u.hit_tokens, u.miss_tokens, u.completion_tokens));
  };
}

int64_t RequestBilling::maxCost(int64_t prompt_tokens, int64_t max_tokens) const {
  const billing::Rates& r = rates_.rates;
  return prompt_tokens * std::max(r.input_cache_hit, r.input_cache_miss) + max_tokens * r.output;
}

bool RequestBilling::reserveBudget(Exchange& exchange, int64_t amount) {
  if (budgets_ == nullptr) return true;
  auto held = budgets_->reserve(info_.who, amount, start_us_ / 1'000'000);
  if (auto* r = std::get_if<billing::BudgetReservation>(&held)) {
    reservation_ = std::move(*r);
    return true;
  }
  const billing::BudgetRefusal& refused = std::get<billing::BudgetRefusal>(held);
  const billing::BudgetStatus& b = refused.budget;
  openai::ApiError e;
  e.http_status = 429;
  e.type = "insufficient_quota";
  e.code = "insufficient_quota";
  const std::string whose = b.scope == "key" ? "this API key's" : "team " + info_.who.team + "'s";
  const std::string period = b.period == "total" ? "total" : b.period == "day" ? "daily" : "monthly";
  e.message = "You exceeded your current quota: " + whose + " " + period + " budget of $" + billing::usd(b.limit) +
              " has $" + billing::usd(std::max<Int128>(b.remaining(), 0)) + " left ($" + billing::usd(b.spent) +
              " spent, $" + billing::usd(b.reserved) + " reserved by requests in flight), and this request may cost up "
              "to $" + billing::usd(refused.amount) + " (its prompt at the cache-miss price and max_tokens at the "
              "output price). Lower max_tokens, wait for the budget to renew, or ask an admin to raise it.";
  proxyLog()->info("request {}: refused by the {} budget of {} ({} period)", info_.request_id, b.scope,
                   b.scope == "key" ? info_.who.key_id : info_.who.team, b.period);
  // Retrying cannot help until the budget changes: the openai SDKs honour this.
  respondWithApiError(exchange, e, HttpHeaders{{"x-should-retry", "false"}});
  return false;
}

void RequestBilling::clientGone() {
  std::lock_guard lock(mu_);
  client_gone_ = true;
}

bool RequestBilling::submitted(size_t n, serving::Refusal refusal) {
  std::lock_guard lock(mu_);
  expected_ = n;
  refused_at_submit_ = true;
  refusal_ = refusal;
  return finals_ == expected_;
}

void RequestBilling::abandon() {
  if (info_.idempotency) ledger_.release(info_.who.key_id, info_.idempotency->key_hash);
  reservation_.release();
}

bool RequestBilling::addFinal(const serving::StreamEvent& e) {
  std::lock_guard lock(mu_);
  ++finals_;
  usage_.prompt_tokens += e.usage.prompt_tokens;
  usage_.hit_tokens_tier0 += e.usage.hit_tokens_tier0;
  usage_.hit_tokens_disk += e.usage.hit_tokens_disk;
  usage_.miss_tokens += e.usage.miss_tokens;
  usage_.completion_tokens += e.usage.completion_tokens;
  if (e.usage.completion_tokens > 0 && (ttft_s_ < 0 || e.timing.first_token < ttft_s_)) ttft_s_ = e.timing.first_token;
  switch (e.finish_reason) {
    case serving::FinishReason::kError: ++failed_; finish_reason_ = "error"; break;
    case serving::FinishReason::kRefused:
      ++refused_;
      finish_reason_ = "refused:" + std::string(serving::refusalName(e.refusal));
      break;
    case serving::FinishReason::kCancelled:
      ++cancelled_;
      if (failed_ == 0 && refused_ == 0) finish_reason_ = "cancelled";
      break;
    default:
      if (finish_reason_.empty()) finish_reason_ = std::string(serving::finishReasonName(e.finish_reason));
  }
  return finals_ == expected_;
}

void RequestBilling::keep(std::string_view bytes) {
  if (!info_.idempotency || !info_.stream) return;
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

void RequestBilling::commit(std::string_view final_body, std::string content_type, std::function<void(Status)> then) {
  billing::LedgerEntry e;
  std::optional<billing::IdempotencyCommit> idem;
  auto reservation = std::make_shared<billing::BudgetReservation>();
  {
    std::lock_guard lock(mu_);
    *reservation = std::move(reservation_);
    e.request_id = info_.request_id;
    e.response_id = info_.response_id;
    e.key_id = info_.who.key_id;
    e.team = info_.who.team;
    e.model = info_.model;
    e.requested_model = info_.requested_model;
    e.endpoint = info_.endpoint;
    e.system_prompt = info_.system_prompt;
    e.start_us = start_us_;
    e.end_us = std::max(unixMicros(), start_us_);
    e.ttft_us = ttft_s_ < 0 ? -1 : static_cast<int64_t>(ttft_s_ * 1e6);
    e.prompt_tokens = usage_.prompt_tokens;
    e.hit_tokens_tier0 = usage_.hit_tokens_tier0;
    e.hit_tokens_disk = usage_.hit_tokens_disk;
    e.miss_tokens = usage_.miss_tokens;
    e.output_tokens = usage_.completion_tokens;
    e.choices = static_cast<int32_t>(expected_);
    e.prices = rates_;
    if (failed_ > 0) {
      e.status = billing::EntryStatus::kFailed;
    } else if (refused_ > 0 || refused_at_submit_) {
      e.status = billing::EntryStatus::kRefused;
      if (refused_at_submit_ && refused_ == 0) finish_reason_ = "refused:" + std::string(serving::refusalName(refusal_));
    } else if (cancelled_ > 0) {
      // The client leaving cancels; anything else that cancels (the
      // deadline, a shutdown) is the server's failure, not billed.
      e.status = client_gone_ ? billing::EntryStatus::kCancelled : billing::EntryStatus::kFailed;
    } else {
      e.status = billing::EntryStatus::kCompleted;
    }
    e.finish_reason = finish_reason_;
    e.price();
    if (info_.idempotency) {
      e.idempotency_key = info_.idempotency->key_hash;
      idem = billing::IdempotencyCommit{info_.who.key_id, info_.idempotency->key_hash, std::nullopt};
      // Completed and cancelled requests were billed: their key is spent.
      // Refused and failed ones cost nothing and leave it free for a retry.
      if (billing::billable(e.status)) {
        billing::IdempotencyRecord r;
        r.request_id = info_.request_id;
        r.request_digest = info_.idempotency->digest;
        r.status = e.status;
        r.created_us = e.end_us;
        r.stream = info_.stream;
        r.content_type = std::move(content_type);
        if (e.status == billing::EntryStatus::kCompleted && !transcript_overflow_) {
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

}  // namespace lg::proxy

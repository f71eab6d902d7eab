#include "billing/ledger.h"

#include <openssl/sha.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "common/logging.h"
#include "common/unix_time.h"

namespace lg::billing {

namespace {

using nlohmann::json;

constexpr std::string_view kEntryPrefix = "led/e/";
constexpr std::string_view kIdPrefix = "led/id/";
constexpr std::string_view kIdempotencyPrefix = "led/idem/";
constexpr std::string_view kIdempotencyTimePrefix = "led/idemt/";
constexpr std::string_view kIdempotencyIndexed = "led/idem-indexed";
constexpr std::string_view kOutboxPrefix = "led/outbox/";
constexpr std::string_view kOutboxOn = "led/outbox-on";
constexpr std::string_view kOutboxRejectedPrefix = "led/outbox-rejected/";
// Markers written per batch when an existing ledger is given its outbox.
constexpr size_t kOutboxBackfillBatch = 10'000;
// Expired idempotency records deleted per sweep, and how often the committer sweeps.
constexpr size_t kSweepBatch = 256;
constexpr auto kSweepInterval = std::chrono::seconds(60);
constexpr std::string_view kAggPrefix = "agg/";
constexpr int64_t kHourUs = int64_t{3600} * 1'000'000;

std::string padded(int64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*" PRId64, digits, v);
  return buf;
}

std::string entryKey(int64_t start_us, std::string_view request_id) {
  return std::string(kEntryPrefix) + padded(std::max<int64_t>(start_us, 0), 16) + "/" + std::string(request_id);
}

// led/outbox/<start>/<id>: the same suffix as the entry's key.
std::string outboxKey(int64_t start_us, std::string_view request_id) {
  return std::string(kOutboxPrefix) + padded(std::max<int64_t>(start_us, 0), 16) + "/" + std::string(request_id);
}

std::string idempotencyKey(std::string_view key_id, std::string_view key_hash) {
  return std::string(kIdempotencyPrefix) + std::string(key_id) + "/" + std::string(key_hash);
}

std::string idempotencyTimeKey(int64_t created_us, std::string_view key_id, std::string_view key_hash) {
  return std::string(kIdempotencyTimePrefix) + padded(std::max<int64_t>(created_us, 0), 16) + "/" +
         std::string(key_id) + "/" + std::string(key_hash);
}

// The record key that a led/idemt/ key names: led/idemt/<created>/<key id>/<hash>.
std::optional<std::string> recordKeyOfTimeKey(std::string_view time_key) {
  if (!time_key.starts_with(kIdempotencyTimePrefix)) return std::nullopt;
  std::string_view rest = time_key.substr(kIdempotencyTimePrefix.size());
  const size_t slash = rest.find('/');
  if (slash != 16) return std::nullopt;
  rest.remove_prefix(slash + 1);
  const size_t last = rest.rfind('/');
  if (last == std::string_view::npos || last == 0 || last + 1 == rest.size()) return std::nullopt;
  return idempotencyKey(rest.substr(0, last), rest.substr(last + 1));
}

spdlog::logger* ledgerLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

int64_t hourOf(int64_t unix_us) { return std::max<int64_t>(unix_us, 0) / kHourUs; }

std::string_view dimensionName(GroupBy g) {
  switch (g) {
    case GroupBy::kKey: return "key";
    case GroupBy::kTeam: return "team";
    case GroupBy::kModel: return "model";
    case GroupBy::kSystemPrompt: return "sp";
    case GroupBy::kNone: break;
  }
  return "team";
}

std::string aggKey(GroupBy g, int64_t hour, std::string_view value) {
  return std::string(kAggPrefix) + std::string(dimensionName(g)) + "/" + padded(hour, 10) + "/" + std::string(value);
}

std::string sha256Hex(std::string_view data, size_t bytes = SHA256_DIGEST_LENGTH) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return hexLower(digest, bytes);
}

json ratesJson(const Rates& r) {
  return json{{"input_cache_hit", r.input_cache_hit}, {"input_cache_miss", r.input_cache_miss}, {"output", r.output}};
}

json missToJson(const MissAnatomy& m) {
  if (!m.recorded()) return nullptr;
  json causes = json::object();
  for (size_t i = 0; i < kMissCauses; ++i) {
    if (m.tokens_by_cause[i] != 0) causes[std::string(missCauseName(static_cast<MissCause>(i)))] = m.tokens_by_cause[i];
  }
  json j{{"tokens_by_cause", std::move(causes)},
         {"first_miss_token", m.first_miss_token},
         {"first_miss_message", m.first_miss_message},
         {"first_miss_region", promptRegionName(m.first_miss_region)},
         {"first_miss_cause", missCauseName(m.first_miss_cause)}};
  if (m.first_miss_cause == MissCause::kEvicted) {
    j["evicted_tier"] = m.evicted_tier;
    j["evicted_ago_ms"] = m.evicted_ago_ms;
  }
  return j;
}

// The anatomy of a stored entry; null (entries written before it) is none.
bool missFromJson(const json& j, MissAnatomy& m) {
  if (j.is_null()) return true;
  if (!j.is_object() || !j.contains("tokens_by_cause") || !j["tokens_by_cause"].is_object()) return false;
  for (const auto& [name, tokens] : j["tokens_by_cause"].items()) {
    const auto cause = parseMissCause(name);
    if (!cause || !tokens.is_number_integer()) return false;
    m.tokens_by_cause[static_cast<size_t>(*cause)] = tokens.get<int64_t>();
  }
  std::string region, cause;
  int64_t message = -1;
  if (!j.contains("first_miss_token") || !j["first_miss_token"].is_number_integer() ||
      !j.contains("first_miss_message") || !j["first_miss_message"].is_number_integer() ||
      !j.contains("first_miss_region") || !j["first_miss_region"].is_string() ||
      !j.contains("first_miss_cause") || !j["first_miss_cause"].is_string()) {
    return false;
  }
  m.first_miss_token = j["first_miss_token"].get<int64_t>();
  message = j["first_miss_message"].get<int64_t>();
  const auto r = parsePromptRegion(j["first_miss_region"].get<std::string>());
  const auto c = parseMissCause(j["first_miss_cause"].get<std::string>());
  if (!r || !c || message < -1 || message > INT32_MAX) return false;
  m.first_miss_message = static_cast<int32_t>(message);
  m.first_miss_region = *r;
  m.first_miss_cause = *c;
  if (m.first_miss_cause == MissCause::kEvicted) {
    if (!j.contains("evicted_tier") || !j["evicted_tier"].is_string() || !j.contains("evicted_ago_ms") ||
        !j["evicted_ago_ms"].is_number_integer()) {
      return false;
    }
    m.evicted_tier = j["evicted_tier"].get<std::string>();
    m.evicted_ago_ms = j["evicted_ago_ms"].get<int64_t>();
  }
  return true;
}

json entryToJson(const LedgerEntry& e) {
  return json{{"request_id", e.request_id},
              {"response_id", e.response_id},
              {"key_id", e.key_id},
              {"team", e.team},
              {"model", e.model},
              {"requested_model", e.requested_model},
              {"endpoint", e.endpoint},
              {"system_prompt", e.system_prompt},
              {"idempotency_key", e.idempotency_key},
              {"start_us", e.start_us},
              {"end_us", e.end_us},
              {"ttft_us", e.ttft_us},
              {"prompt_tokens", e.prompt_tokens},
              {"hit_tokens_tier0", e.hit_tokens_tier0},
              {"hit_tokens_disk", e.hit_tokens_disk},
              {"miss_tokens", e.miss_tokens},
              {"output_tokens", e.output_tokens},
              {"choices", e.choices},
              // Pico-dollars per token: integers, exact.
              {"rates", ratesJson(e.prices.rates)},
              {"price_version", e.prices.version},
              {"priced_as", e.prices.priced_as},
              {"price_window", e.prices.window},
              {"cost", json{{"input_cache_hit", e.cost.input_cache_hit},
                            {"input_cache_miss", e.cost.input_cache_miss},
                            {"output", e.cost.output}}},
              {"status", entryStatusName(e.status)},
              {"finish_reason", e.finish_reason}};
}

template <class T>
bool take(const json& j, const char* field, T& out) {
  if (!j.contains(field)) return false;
  const json& v = j[field];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return false;
  } else {
    if (!v.is_number_integer()) return false;
  }
  out = v.get<T>();
  return true;
}

json recordToJson(const IdempotencyRecord& r) {
  return json{{"request_id", r.request_id}, {"request_digest", r.request_digest},
              {"status", entryStatusName(r.status)}, {"created_us", r.created_us},
              {"stream", r.stream}, {"content_type", r.content_type},
              {"body", r.body}, {"body_kept", r.body_kept}};
}

Result<IdempotencyRecord> recordFromJson(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  IdempotencyRecord r;
  std::string status;
  if (j.is_discarded() || !j.is_object() || !take(j, "request_id", r.request_id) ||
      !take(j, "request_digest", r.request_digest) || !take(j, "status", status) ||
      !take(j, "created_us", r.created_us) || !take(j, "content_type", r.content_type) || !take(j, "body", r.body) ||
      !j.contains("stream") || !j["stream"].is_boolean() || !j.contains("body_kept") || !j["body_kept"].is_boolean() ||
      !parseEntryStatus(status)) {
    return dataLoss("billing store: an idempotency record is corrupt");
  }
  r.status = *parseEntryStatus(status);
  r.stream = j["stream"].get<bool>();
  r.body_kept = j["body_kept"].get<bool>();
  return r;
}

}  // namespace

// ---------------------------------------------------------------- entries

std::string_view entryStatusName(EntryStatus s) {
  switch (s) {
    case EntryStatus::kCompleted: return "completed";
    case EntryStatus::kCancelled: return "cancelled";
    case EntryStatus::kFailed: return "failed";
    case EntryStatus::kRefused: return "refused";
  }
  return "?";
}

std::optional<EntryStatus> parseEntryStatus(std::string_view name) {
  for (EntryStatus s : {EntryStatus::kCompleted, EntryStatus::kCancelled, EntryStatus::kFailed, EntryStatus::kRefused}) {
    if (entryStatusName(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view missCauseName(MissCause c) {
  switch (c) {
    case MissCause::kNew: return "new";
    case MissCause::kEvicted: return "evicted";
    case MissCause::kModelChanged: return "model_changed";
    case MissCause::kInFlight: return "in_flight";
    case MissCause::kRecomputed: return "recomputed";
    case MissCause::kPartialBlock: return "partial_block";
    case MissCause::kUncached: return "uncached";
    case MissCause::kCount: break;
  }
  return "?";
}

std::optional<MissCause> parseMissCause(std::string_view name) {
  for (size_t i = 0; i < kMissCauses; ++i) {
    if (missCauseName(static_cast<MissCause>(i)) == name) return static_cast<MissCause>(i);
  }
  return std::nullopt;
}

std::string_view promptRegionName(PromptRegion r) {
  switch (r) {
    case PromptRegion::kNone: return "";
    case PromptRegion::kSystem: return "system";
    case PromptRegion::kTools: return "tools";
    case PromptRegion::kHistory: return "history";
    case PromptRegion::kInput: return "input";
  }
  return "?";
}

std::optional<PromptRegion> parsePromptRegion(std::string_view name) {
  for (size_t i = 0; i < kPromptRegions; ++i) {
    if (promptRegionName(static_cast<PromptRegion>(i)) == name) return static_cast<PromptRegion>(i);
  }
  return std::nullopt;
}

void LedgerEntry::price() {
  cost = billable(status) ? costOf(prices.rates, hitTokens(), miss_tokens, output_tokens) : Cost{};
}

std::string encodeEntry(const LedgerEntry& e) {
  json j = entryToJson(e);
  if (e.miss.recorded()) j["miss"] = missToJson(e.miss);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string encodeMissAnatomy(const MissAnatomy& m) {
  return missToJson(m).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<MissAnatomy> decodeMissAnatomy(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  MissAnatomy m;
  if (j.is_discarded() || !missFromJson(j, m)) return dataLoss("a ledger entry's miss anatomy is corrupt");
  return m;
}

Result<LedgerEntry> decodeEntry(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  LedgerEntry e;
  std::string status;
  const auto bad = [] { return dataLoss("billing store: a ledger entry is corrupt"); };
  if (j.is_discarded() || !j.is_object()) return bad();
  bool ok = take(j, "request_id", e.request_id) && take(j, "response_id", e.response_id) &&
            take(j, "key_id", e.key_id) && take(j, "team", e.team) && take(j, "model", e.model) &&
            take(j, "requested_model", e.requested_model) && take(j, "endpoint", e.endpoint) &&
            take(j, "system_prompt", e.system_prompt) && take(j, "idempotency_key", e.idempotency_key) &&
            take(j, "start_us", e.start_us) && take(j, "end_us", e.end_us) && take(j, "ttft_us", e.ttft_us) &&
            take(j, "prompt_tokens", e.prompt_tokens) && take(j, "hit_tokens_tier0", e.hit_tokens_tier0) &&
            take(j, "hit_tokens_disk", e.hit_tokens_disk) && take(j, "miss_tokens", e.miss_tokens) &&
            take(j, "output_tokens", e.output_tokens) && take(j, "choices", e.choices) &&
            take(j, "price_version", e.prices.version) && take(j, "priced_as", e.prices.priced_as) &&
            take(j, "price_window", e.prices.window) && take(j, "status", status) &&
            take(j, "finish_reason", e.finish_reason);
  if (!ok || !j.contains("rates") || !j["rates"].is_object() || !j.contains("cost") || !j["cost"].is_object()) return bad();
  const json& r = j["rates"];
  const json& c = j["cost"];
  ok = take(r, "input_cache_hit", e.prices.rates.input_cache_hit) &&
       take(r, "input_cache_miss", e.prices.rates.input_cache_miss) && take(r, "output", e.prices.rates.output) &&
       take(c, "input_cache_hit", e.cost.input_cache_hit) && take(c, "input_cache_miss", e.cost.input_cache_miss) &&
       take(c, "output", e.cost.output);
  const auto parsed = parseEntryStatus(status);
  if (!ok || !parsed) return bad();
  e.status = *parsed;
  if (j.contains("miss") && !missFromJson(j["miss"], e.miss)) return bad();
  return e;
}

Counters countersOf(const LedgerEntry& e) {
  Counters c{};
  c[kRequests] = 1;
  c[kCompleted] = e.status == EntryStatus::kCompleted;
  c[kCancelled] = e.status == EntryStatus::kCancelled;
  c[kFailed] = e.status == EntryStatus::kFailed;
  c[kRefused] = e.status == EntryStatus::kRefused;
  c[kPromptTokens] = static_cast<uint64_t>(e.prompt_tokens);
  c[kHitTokensTier0] = static_cast<uint64_t>(e.hit_tokens_tier0);
  c[kHitTokensDisk] = static_cast<uint64_t>(e.hit_tokens_disk);
  c[kMissTokens] = static_cast<uint64_t>(e.miss_tokens);
  c[kOutputTokens] = static_cast<uint64_t>(e.output_tokens);
  c[kCostHit] = static_cast<uint64_t>(e.cost.input_cache_hit);
  c[kCostMiss] = static_cast<uint64_t>(e.cost.input_cache_miss);
  c[kCostOutput] = static_cast<uint64_t>(e.cost.output);
  c[kHitAtMissPrice] = billable(e.status) ? static_cast<uint64_t>(e.hitTokens() * e.prices.rates.input_cache_miss) : 0;
  for (size_t i = 0; i < kMissCauses; ++i) {
    c[missCauseSlot(static_cast<MissCause>(i))] = static_cast<uint64_t>(std::max<int64_t>(0, e.miss.tokens_by_cause[i]));
  }
  if (e.miss.first_miss_region != PromptRegion::kNone) {
    c[firstMissSlot(e.miss.first_miss_region)] = static_cast<uint64_t>(e.miss_tokens);
  }
  return c;
}

void addCounters(Counters& into, const Counters& more) {
  for (size_t i = 0; i < kCounterSlots; ++i) into[i] += more[i];
}

std::vector<std::string> aggregateKeys(const LedgerEntry& e) {
  const int64_t hour = hourOf(e.start_us);
  return {aggKey(GroupBy::kKey, hour, e.team + "/" + e.key_id), aggKey(GroupBy::kTeam, hour, e.team),
          aggKey(GroupBy::kModel, hour, e.model),
          aggKey(GroupBy::kSystemPrompt, hour, e.team + "/" + (e.system_prompt.empty() ? "-" : e.system_prompt))};
}

std::optional<GroupBy> parseGroupBy(std::string_view name) {
  if (name == "key") return GroupBy::kKey;
  if (name == "team") return GroupBy::kTeam;
  if (name == "model") return GroupBy::kModel;
  if (name == "system_prompt") return GroupBy::kSystemPrompt;
  return std::nullopt;
}

std::string_view groupByName(GroupBy g) {
  switch (g) {
    case GroupBy::kKey: return "key";
    case GroupBy::kTeam: return "team";
    case GroupBy::kModel: return "model";
    case GroupBy::kSystemPrompt: return "system_prompt";
    case GroupBy::kNone: break;
  }
  return "";
}

std::string idempotencyKeyHash(std::string_view key) { return sha256Hex(key); }

std::string requestDigest(std::string_view endpoint, std::string_view body) {
  std::string data(endpoint);
  data += '\0';
  data += body;
  return sha256Hex(data);
}

// ------------------------------------------------------------------ Ledger

Ledger::Ledger(BillingDb& db, LedgerOptions options)
    : db_(db), options_(options) {
  stats_.commit_ms = Histogram::exponential(0.05, 2, 18);
  stats_.batch_size = Histogram::exponential(1.5, 2, 14);
}

Result<std::unique_ptr<Ledger>> Ledger::open(BillingDb& db, LedgerOptions options) {
  if (options.max_batch == 0) return invalidArgument("ledger: max_batch must be at least 1");
  if (options.idempotency_ttl_s < 1) return invalidArgument("ledger: idempotency_ttl_s must be at least 1");
  std::unique_ptr<Ledger> ledger(new Ledger(db, options));
  LG_RETURN_IF_ERROR(ledger->indexIdempotencyRecords());
  LG_RETURN_IF_ERROR(ledger->openOutbox());
  ledger->committer_ = std::thread([l = ledger.get()] { l->run(); });
  return ledger;
}

Ledger::~Ledger() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

void Ledger::commit(LedgerEntry entry, std::optional<IdempotencyCommit> idempotency, Callback done) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Pending{std::move(entry), std::move(idempotency), std::move(done), std::chrono::steady_clock::now()});
    ++queued_;
  }
  cv_.notify_one();
}

void Ledger::flush() {
  std::unique_lock lock(mu_);
  // Commits are taken in queue order, so those queued before now are the
  // first `target` to finish.
  const uint64_t target = queued_;
  flushed_cv_.wait(lock, [&] { return finished_ >= target; });
}

void Ledger::run() {
  // The first sweep at once: what expired while the server was down.
  auto next_sweep = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_until(lock, next_sweep, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_ && queue_.empty()) return;  // everything committed
    if (!queue_.empty()) {
      // Everything that queued while the last write synced goes into this one.
      std::vector<Pending> batch;
      const size_t n = std::min(queue_.size(), options_.max_batch);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      commitBatch(batch);
      lock.lock();
      finished_ += batch.size();
      flushed_cv_.notify_all();
    }
    if (!stopping_ && std::chrono::steady_clock::now() >= next_sweep) {
      // Between batches, so a backlog of expired records never holds up a
      // commit by more than one bounded sweep.
      lock.unlock();
      auto deleted = expireIdempotencyRecords(kSweepBatch);
      if (!deleted.isOk()) ledgerLog()->error("ledger: expiring idempotency records failed: {}", deleted.status().toString());
      const bool more = deleted.isOk() && *deleted == kSweepBatch;
      next_sweep = std::chrono::steady_clock::now() + (more ? std::chrono::steady_clock::duration::zero() : kSweepInterval);
      lock.lock();
    }
  }
}

void Ledger::commitBatch(std::vector<Pending>& batch) {
  std::lock_guard write_lock(write_mu_);
  std::vector<Status> results(batch.size());
  WriteOps ops;
  std::map<std::string, Counters> sums;  // one merge per aggregate key per batch
  std::set<std::string> ids;
  const int64_t commit_us = options_.outbox ? (options_.now_us ? options_.now_us() : unixMicros()) : 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const LedgerEntry& e = batch[i].entry;
    const std::string id_key = std::string(kIdPrefix) + e.request_id;
    if (e.request_id.empty()) {
      results[i] = invalidArgument("ledger: an entry without a request id");
      continue;
    }
    if (!ids.insert(e.request_id).second) {
      results[i] = Status(StatusCode::kAlreadyExists, "ledger: request " + e.request_id + " already has an entry");
      continue;
    }
    auto existing = db_.get(id_key);
    if (!existing.isOk()) {
      results[i] = existing.status();
      continue;
    }
    if (existing->has_value()) {
      results[i] = Status(StatusCode::kAlreadyExists, "ledger: request " + e.request_id + " already has an entry");
      continue;
    }
    ops.puts.emplace_back(entryKey(e.start_us, e.request_id), encodeEntry(e));
    ops.puts.emplace_back(id_key, std::to_string(e.start_us));
    // In the same synced batch: the entry is durable exactly when its marker is.
    if (options_.outbox) ops.puts.emplace_back(outboxKey(e.start_us, e.request_id), std::to_string(commit_us));
    const Counters c = countersOf(e);
    for (const std::string& k : aggregateKeys(e)) {
      auto [it, inserted] = sums.try_emplace(k, Counters{});
      addCounters(it->second, c);
    }
    if (batch[i].idempotency && batch[i].idempotency->record) {
      const IdempotencyCommit& ic = *batch[i].idempotency;
      ops.puts.emplace_back(idempotencyKey(ic.key_id, ic.key_hash),
                            recordToJson(*ic.record).dump(-1, ' ', false, json::error_handler_t::replace));
      ops.puts.emplace_back(idempotencyTimeKey(ic.record->created_us, ic.key_id, ic.key_hash), "");
      // An expired record this one replaces takes its time key along.
      int64_t replaced_us = -1;
      {
        std::lock_guard lock(claims_mu_);
        if (auto it = claims_.find({ic.key_id, ic.key_hash}); it != claims_.end()) replaced_us = it->second;
      }
      if (replaced_us >= 0 && replaced_us != ic.record->created_us) {
        ops.deletes.push_back(idempotencyTimeKey(replaced_us, ic.key_id, ic.key_hash));
      }
    }
  }
  for (const auto& [k, c] : sums) ops.merges.emplace_back(k, encodeCounters(std::vector<uint64_t>(c.begin(), c.end())));
  Status written = ops.puts.empty() ? Status::ok() : db_.apply(ops, /*sync=*/true);
  {
    // After the write: a retry arriving now finds the record.
    std::lock_guard lock(claims_mu_);
    for (const Pending& p : batch) {
      if (p.idempotency) claims_.erase({p.idempotency->key_id, p.idempotency->key_hash});
    }
  }
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.batches;
    stats_.batch_size.observe(static_cast<double>(batch.size()));
    for (size_t i = 0; i < batch.size(); ++i) {
      if (results[i].isOk() && written.isOk()) {
        ++stats_.entries;
        stats_.commit_ms.observe(std::chrono::duration<double, std::milli>(now - batch[i].queued).count());
      } else {
        ++stats_.failed;
      }
    }
  }
  if (options_.outbox && written.isOk()) {
    uint64_t added = 0;
    for (const Status& r : results) added += r.isOk() ? 1 : 0;
    outbox_depth_.fetch_add(added, std::memory_order_relaxed);
  }
  if (options_.metrics != nullptr && written.isOk()) {
    // The batch's oldest entry waited longest: the latency a client saw at worst.
    options_.metrics->observeCommit(std::chrono::duration<double>(now - batch.front().queued).count());
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t cost = batch[i].entry.cost.total();
      if (results[i].isOk() && cost > 0) options_.metrics->addCost(batch[i].entry.team, static_cast<uint64_t>(cost));
    }
  }
  if (written.isOk()) {
    std::lock_guard lock(observers_mu_);
    for (CommitObserver* o : observers_) {
      for (size_t i = 0; i < batch.size(); ++i) {
        if (results[i].isOk()) o->committed(batch[i].entry);
      }
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].done) batch[i].done(results[i].isOk() ? written : results[i]);
  }
}

void Ledger::addObserver(CommitObserver* observer) {
  std::lock_guard lock(observers_mu_);
  observers_.push_back(observer);
}

LedgerStats Ledger::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

// ----------------------------------------------------------- idempotency

int64_t Ledger::expiryCutoffUs() const {
  const int64_t now_us = options_.now_us ? options_.now_us() : unixMicros();
  return now_us - options_.idempotency_ttl_s * 1'000'000;
}

Result<Ledger::Claim> Ledger::claim(const std::string& key_id, const std::string& key_hash) {
  {
    std::lock_guard lock(claims_mu_);
    if (!claims_.try_emplace({key_id, key_hash}, -1).second) return Claim{ClaimState::kInFlight, std::nullopt};
  }
  // Claimed: no commit for this key can be under way, so the store's answer
  // is final until we release it.
  auto stored = db_.get(idempotencyKey(key_id, key_hash));
  if (!stored.isOk()) {
    release(key_id, key_hash);
    return stored.status();
  }
  if (stored->has_value()) {
    auto record = recordFromJson(**stored);
    if (!record.isOk() || !expired(*record)) {
      release(key_id, key_hash);
      if (!record.isOk()) return record.status();
      return Claim{ClaimState::kDone, std::move(*record)};
    }
    // Expired: the key is free again; the commit replaces the record.
    std::lock_guard lock(claims_mu_);
    claims_[{key_id, key_hash}] = record->created_us;
  }
  return Claim{ClaimState::kClaimed, std::nullopt};
}

void Ledger::release(const std::string& key_id, const std::string& key_hash) {
  std::lock_guard lock(claims_mu_);
  claims_.erase({key_id, key_hash});
}

Result<size_t> Ledger::expireIdempotencyRecords(size_t max_records) {
  std::lock_guard write_lock(write_mu_);
  const int64_t cutoff_us = expiryCutoffUs();
  if (cutoff_us < 0) return size_t{0};
  // Time keys up to and including the cutoff: [prefix, prefix + (cutoff + 1)).
  const std::string end = std::string(kIdempotencyTimePrefix) + padded(cutoff_us + 1, 16);
  std::vector<std::string> deletes;  // pairs: the record, its time key
  LG_RETURN_IF_ERROR(db_.scanRange(kIdempotencyTimePrefix, end, [&](std::string_view key, std::string_view) {
    if (deletes.size() >= 2 * max_records) return false;
    std::optional<std::string> record_key = recordKeyOfTimeKey(key);
    if (!record_key) {
      // Names no record: dropped, so that it cannot stop every later sweep.
      ledgerLog()->warn("ledger: idempotency time key {} is damaged; deleted", key);
      deletes.emplace_back(key);
      deletes.emplace_back(key);
      return true;
    }
    // One time key per record, both written and replaced in one batch, and
    // no batch runs meanwhile: the record is this key's, and expired.
    deletes.push_back(std::move(*record_key));
    deletes.emplace_back(key);
    return true;
  }));
  if (deletes.empty()) return size_t{0};
  // Not synced: a deletion lost to a power failure is swept again.
  LG_RETURN_IF_ERROR(db_.apply(WriteOps{{}, {}, deletes}, /*sync=*/false));
  return deletes.size() / 2;
}

Status Ledger::indexIdempotencyRecords() {
  LG_ASSIGN_OR_RETURN(std::optional<std::string> done, db_.get(kIdempotencyIndexed));
  if (done) return Status::ok();
  WriteOps ops;
  LG_RETURN_IF_ERROR(db_.scan(kIdempotencyPrefix, [&](std::string_view key, std::string_view value) {
    std::string_view rest = key.substr(kIdempotencyPrefix.size());
    const size_t last = rest.rfind('/');
    auto record = recordFromJson(value);
    if (last == std::string_view::npos || !record.isOk()) {
      // Never served (a claim refuses it); expired at once so the sweep removes it.
      ledgerLog()->warn("ledger: idempotency record {} is damaged; it will be deleted", key);
      if (last == std::string_view::npos) {
        ops.deletes.emplace_back(key);
        return true;
      }
      ops.puts.emplace_back(idempotencyTimeKey(0, rest.substr(0, last), rest.substr(last + 1)), "");
      return true;
    }
    ops.puts.emplace_back(idempotencyTimeKey(record->created_us, rest.substr(0, last), rest.substr(last + 1)), "");
    return true;
  }));
  ops.puts.emplace_back(kIdempotencyIndexed, "1");
  return db_.apply(ops, /*sync=*/true);
}

// ---------------------------------------------------------------- outbox

Status Ledger::openOutbox() {
  LG_ASSIGN_OR_RETURN(std::optional<std::string> on, db_.get(kOutboxOn));
  if (!options_.outbox) {
    // Entries committed from now on get no marker: the next open with the
    // outbox gives every entry one again.
    if (on) LG_RETURN_IF_ERROR(db_.write({}, {std::string(kOutboxOn)}));
    return Status::ok();
  }
  if (!on) {
    // Every entry, once: PostgreSQL keeps those it already holds as they
    // are. A crash midway leaves led/outbox-on unwritten, so it starts over.
    const std::string now = std::to_string(options_.now_us ? options_.now_us() : unixMicros());
    WriteOps ops;
    uint64_t given = 0;
    Status written;
    LG_RETURN_IF_ERROR(db_.scan(kEntryPrefix, [&](std::string_view key, std::string_view) {
      ops.puts.emplace_back(std::string(kOutboxPrefix) + std::string(key.substr(kEntryPrefix.size())), now);
      ++given;
      if (ops.puts.size() >= kOutboxBackfillBatch) {
        written = db_.apply(ops, /*sync=*/false);
        ops.puts.clear();
        return written.isOk();
      }
      return true;
    }));
    LG_RETURN_IF_ERROR(written);
    ops.puts.emplace_back(kOutboxOn, "1");
    LG_RETURN_IF_ERROR(db_.apply(ops, /*sync=*/true));
    if (given > 0) ledgerLog()->info("ledger: {} existing entries queued for PostgreSQL", given);
  }
  uint64_t depth = 0;
  LG_RETURN_IF_ERROR(db_.scan(kOutboxPrefix, [&](std::string_view, std::string_view) {
    ++depth;
    return true;
  }));
  outbox_depth_.store(depth, std::memory_order_relaxed);
  return Status::ok();
}

Result<OutboxBatch> Ledger::readOutbox(size_t max_entries) const {
  OutboxBatch batch;
  std::vector<std::pair<std::string, int64_t>> markers;
  LG_RETURN_IF_ERROR(db_.scan(kOutboxPrefix, [&](std::string_view key, std::string_view value) {
    if (markers.size() >= max_entries) return false;
    int64_t commit_us = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), commit_us);
    if (ec != std::errc() || end != value.data() + value.size()) commit_us = 0;
    markers.emplace_back(std::string(key), commit_us);
    return true;
  }));
  for (auto& [marker, commit_us] : markers) {
    const std::string entry_key = std::string(kEntryPrefix) + marker.substr(kOutboxPrefix.size());
    LG_ASSIGN_OR_RETURN(std::optional<std::string> value, db_.get(entry_key));
    if (!value) {
      batch.broken.emplace_back(std::move(marker), "its entry is missing");
      continue;
    }
    auto e = decodeEntry(*value);
    if (!e.isOk()) {
      batch.broken.emplace_back(std::move(marker), "its entry is unreadable: " + e.status().toString());
      continue;
    }
    if (commit_us > 0 && (batch.oldest_commit_us == 0 || commit_us < batch.oldest_commit_us)) {
      batch.oldest_commit_us = commit_us;
    }
    batch.markers.push_back(std::move(marker));
    batch.entries.push_back(std::move(e).value());
  }
  return batch;
}

Status Ledger::removeFromOutbox(const std::vector<std::string>& drained,
                                const std::vector<std::pair<std::string, std::string>>& rejected) {
  WriteOps ops;
  for (const std::string& m : drained) {
    if (!m.starts_with(kOutboxPrefix)) return invalidArgument("ledger: " + m + " is not an outbox marker");
    ops.deletes.push_back(m);
  }
  for (const auto& [m, why] : rejected) {
    if (!m.starts_with(kOutboxPrefix)) return invalidArgument("ledger: " + m + " is not an outbox marker");
    ops.deletes.push_back(m);
    ops.puts.emplace_back(std::string(kOutboxRejectedPrefix) + m.substr(kOutboxPrefix.size()), why);
  }
  if (ops.deletes.empty()) return Status::ok();
  LG_RETURN_IF_ERROR(db_.apply(ops, /*sync=*/false));
  // One drainer: nothing else removes markers, so none was counted twice.
  const uint64_t n = ops.deletes.size();
  uint64_t depth = outbox_depth_.load(std::memory_order_relaxed);
  while (!outbox_depth_.compare_exchange_weak(depth, depth >= n ? depth - n : 0, std::memory_order_relaxed)) {
  }
  return Status::ok();
}

// ----------------------------------------------------------------- reads

Result<std::optional<LedgerEntry>> Ledger::find(const std::string& request_id) const {
  LG_ASSIGN_OR_RETURN(std::optional<std::string> start, db_.get(std::string(kIdPrefix) + request_id));
  if (!start) return std::optional<LedgerEntry>();
  int64_t start_us = 0;
  const auto [end, ec] = std::from_chars(start->data(), start->data() + start->size(), start_us);
  if (ec != std::errc() || end != start->data() + start->size()) {
    return dataLoss("billing store: the index of " + request_id + " is corrupt");
  }
  LG_ASSIGN_OR_RETURN(std::optional<std::string> value, db_.get(entryKey(start_us, request_id)));
  if (!value) return dataLoss("billing store: the entry of " + request_id + " is missing");
  LG_ASSIGN_OR_RETURN(LedgerEntry e, decodeEntry(*value));
  return std::optional<LedgerEntry>(std::move(e));
}

Status Ledger::scanEntries(int64_t from_us, int64_t to_us, const std::function<bool(const LedgerEntry&)>& fn) const {
  Status bad;
  const std::string begin = std::string(kEntryPrefix) + padded(std::max<int64_t>(from_us, 0), 16);
  const std::string end = std::string(kEntryPrefix) + padded(std::max<int64_t>(to_us, 0), 16);
  LG_RETURN_IF_ERROR(db_.scanRange(begin, end, [&](std::string_view, std::string_view value) {
    auto e = decodeEntry(value);
    if (!e.isOk()) {
      bad = e.status();
      return false;
    }
    return fn(*e);
  }));
  return bad;
}

Result<UsageScan> usageScan(const UsageQuery& q) {
  GroupBy dim = q.group_by;
  if (!q.key_id.empty()) {
    if (dim != GroupBy::kNone && dim != GroupBy::kKey) return invalidArgument("usage by key can be grouped by key only");
    dim = GroupBy::kKey;
  } else if (!q.team.empty() && dim == GroupBy::kModel) {
    return invalidArgument("usage by model cannot be limited to a team");
  }
  if (dim == GroupBy::kNone) dim = GroupBy::kTeam;  // every entry is in exactly one team row
  return UsageScan{dim, std::max<int64_t>(q.from_s, 0) / 3600, (std::max<int64_t>(q.to_s, 0) + 3599) / 3600};
}

Result<std::vector<UsageRow>> Ledger::usage(const UsageQuery& q) const {
  LG_ASSIGN_OR_RETURN(const UsageScan scan, usageScan(q));
  const GroupBy dim = scan.dimension;
  const int64_t from_hour = scan.from_hour;
  const int64_t to_hour = scan.to_hour;
  const std::string prefix = std::string(kAggPrefix) + std::string(dimensionName(dim)) + "/";
  std::map<std::tuple<std::string, std::string, int64_t>, Counters> rows;
  Status bad;
  LG_RETURN_IF_ERROR(db_.scanRange(prefix + padded(from_hour, 10), prefix + padded(to_hour, 10),
                                   [&](std::string_view key, std::string_view value) {
    std::string_view rest = key.substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return true;
    int64_t hour = 0;
    for (char c : rest.substr(0, slash)) hour = hour * 10 + (c - '0');
    std::string_view v = rest.substr(slash + 1);
    std::string team, group(v);
    if (dim == GroupBy::kKey || dim == GroupBy::kSystemPrompt) {
      const size_t s2 = v.find('/');
      if (s2 == std::string_view::npos) return true;
      team = std::string(v.substr(0, s2));
      group = std::string(v.substr(s2 + 1));
      if (dim == GroupBy::kSystemPrompt && group == "-") group.clear();
    } else if (dim == GroupBy::kTeam) {
      team = group;
    }
    if (!q.key_id.empty() && group != q.key_id) return true;
    if (!q.team.empty() && team != q.team) return true;
    auto counters = decodeCounters(value);
    if (!counters.isOk()) {
      bad = counters.status();
      return false;
    }
    Counters c{};
    for (size_t i = 0; i < std::min(counters->size(), c.size()); ++i) c[i] = (*counters)[i];
    if (q.group_by == GroupBy::kNone) {
      group.clear();
      team = q.team;
    }
    const int64_t period = q.granularity_s > 0 ? (hour * 3600) / q.granularity_s * q.granularity_s : -1;
    addCounters(rows[{group, team, period}], c);
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  std::vector<UsageRow> out;
  out.reserve(rows.size());
  for (auto& [k, c] : rows) out.push_back(UsageRow{std::get<0>(k), std::get<1>(k), std::get<2>(k), c});
  return out;
}

Result<VerifyReport> Ledger::verify() const {
  VerifyReport report;
  std::map<std::string, Counters> expected;
  Status bad;
  LG_RETURN_IF_ERROR(db_.scan(kEntryPrefix, [&](std::string_view, std::string_view value) {
    auto e = decodeEntry(value);
    if (!e.isOk()) {
      bad = e.status();
      return false;
    }
    ++report.entries;
    const Counters c = countersOf(*e);
    for (const std::string& k : aggregateKeys(*e)) addCounters(expected[k], c);
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  const auto show = [](const Counters& c) {
    std::string s;
    for (uint64_t v : c) s += (s.empty() ? "" : ",") + std::to_string(v);
    return "[" + s + "]";
  };
  std::set<std::string> seen;
  LG_RETURN_IF_ERROR(db_.scan(kAggPrefix, [&](std::string_view key, std::string_view value) {
    ++report.aggregate_keys;
    const std::string k(key);
    seen.insert(k);
    auto decoded = decodeCounters(value);
    Counters stored{};
    if (decoded.isOk()) {
      for (size_t i = 0; i < decoded->size(); ++i) {
        if (i < stored.size()) {
          stored[i] = (*decoded)[i];
        } else if ((*decoded)[i] != 0) {
          report.mismatches.push_back(k + ": a counter beyond the known ones is not zero");
        }
      }
    }
    const auto it = expected.find(k);
    const Counters want = it == expected.end() ? Counters{} : it->second;
    if (!decoded.isOk() || stored != want) {
      if (report.mismatches.size() < 20) {
        report.mismatches.push_back(k + ": stored " + (decoded.isOk() ? show(stored) : "corrupt") + ", entries " + show(want));
      }
    }
    return true;
  }));
  for (const auto& [k, c] : expected) {
    if (!seen.contains(k) && report.mismatches.size() < 20) {
      report.mismatches.push_back(k + ": missing, entries " + show(c));
    }
  }
  return report;
}

Result<std::vector<LedgerEntry>> Ledger::recentEntries(size_t limit, std::string_view team, int64_t from_us,
                                                       int64_t to_us, size_t max_examined) const {
  std::vector<LedgerEntry> out;
  if (limit == 0) return out;
  Status bad;
  const std::string begin = std::string(kEntryPrefix) + padded(std::max<int64_t>(from_us, 0), 16);
  const std::string end = std::string(kEntryPrefix) + padded(std::max<int64_t>(to_us, 0), 16);
  LG_RETURN_IF_ERROR(db_.scanRangeReverse(begin, end, max_examined, [&](std::string_view, std::string_view value) {
    auto e = decodeEntry(value);
    if (!e.isOk()) {
      bad = e.status();
      return false;
    }
    if (!team.empty() && e->team != team) return true;
    out.push_back(std::move(e).value());
    return out.size() < limit;
  }));
  LG_RETURN_IF_ERROR(bad);
  return out;
}

}  // namespace lg::billing

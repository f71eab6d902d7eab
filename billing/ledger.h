// Ledger: one durable entry per generation request, with the tokens it used
// by kind, the rates it paid and its exact cost, plus counters per key, team,
// model and system prompt per hour that always equal the sum of the entries
// (docs/billing.md).
//
// Commits are grouped: commit() queues an entry and returns at once; one
// committer thread writes everything queued meanwhile as one synced RocksDB
// WriteBatch (the entries, their id index, their counters as merges and their
// idempotency records) and then runs each entry's callback with the result.
// Callers hand the client the end of its response from that callback, so a
// response a client saw complete has a committed entry, and no fsync ever
// runs on the engine thread or an I/O thread.
//
// Layout in the billing store (keys; values are JSON unless noted):
//   led/e/<start us, 16 digits>/<request id>   the entry
//   led/id/<request id>                        <start us>: finds an entry by id, keeps ids unique
//   led/idem/<key id>/<SHA-256 of the Idempotency-Key, hex>   the request that used it
//   led/idemt/<created us, 16 digits>/<key id>/<key hash>      "": the records in creation order
//   led/idem-indexed                           "1": every record has its led/idemt/ key
//   led/outbox/<start us, 16 digits>/<request id>   <commit us>: the entry is not yet in
//                                              PostgreSQL (only with LedgerOptions::outbox)
//   led/outbox-on                              "1": every entry has been given a marker once
//   led/outbox-rejected/<start us>/<request id>   why PostgreSQL can never hold the entry
//   agg/<dimension>/<hour, 10 digits>/<value>  counters (encodeCounters, merged):
//     key: <team>/<key id>, team: <team>, model: <model>, sp: <team>/<fingerprint or "-">
//
// Idempotency records expire `idempotency_ttl_s` after they were made (24
// hours, as Stripe's keys do): a claim treats an expired record as absent,
// and the committer deletes expired ones in creation order, a bounded batch
// at a time, at start and then once a minute, so the table (whose records
// may keep whole responses) stays bounded. Each record has exactly one
// led/idemt/ key: they are written, replaced and deleted in the same batch.
//
// The outbox (LedgerOptions::outbox, when billing.postgres_url is set): the
// committer writes each entry's led/outbox/ marker in the same synced batch
// as the entry, so an entry is durable exactly when its marker is; a drainer
// (billing/postgres/ledger_drain.h) reads markers in key order with
// readOutbox(), writes their entries to PostgreSQL and only then deletes the
// markers with removeFromOutbox(). Opening with the outbox when led/outbox-on
// is absent first gives every existing entry a marker (PostgreSQL ignores
// those it holds: the writer is idempotent by request id); opening without it
// deletes led/outbox-on, so that entries committed meanwhile are given theirs
// the next time. Without the outbox nothing under led/outbox is written.
//
// Thread-safety: every method may be called from any thread. Callbacks run
// on the committer thread, one at a time, and must not block.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "billing/billing_db.h"
#include "billing/ledger_metrics.h"
#include "billing/prices.h"
#include "common/histogram.h"
#include "common/status.h"

namespace lg::billing {

enum class EntryStatus : uint8_t {
  kCompleted,  // the response was delivered in full (stop, length, tool calls)
  kCancelled,  // the client went away; billed for what was computed until then
  kFailed,     // the server could not finish it (engine error, shutdown): not billed
  kRefused,    // never admitted (queue full, queue timeout, ...): not billed
};
std::string_view entryStatusName(EntryStatus status);  // "completed", ...
std::optional<EntryStatus> parseEntryStatus(std::string_view name);
// Whether an entry of this status is charged its cost.
inline bool billable(EntryStatus s) { return s == EntryStatus::kCompleted || s == EntryStatus::kCancelled; }

// Why prompt tokens were computed rather than reused (docs/cache.md, "Why
// requests miss"): every computed prompt token of an entry is counted under
// exactly one cause. The cache classifies each missed block; the gateway
// puts the classification into the entry.
enum class MissCause : uint8_t {
  kNew,           // never computed in the team's namespace (nor in a shared one it reads)
  kEvicted,       // computed, then evicted from every tier
  kModelChanged,  // computed under another model or latent identity (before a restart)
  kInFlight,      // being computed by another request: the wait for it ended, or was off
  kRecomputed,    // on disk, but recomputing it was judged cheaper than restoring it
  kPartialBlock,  // the prompt's last block: not whole, or holding the last token (always computed)
  kUncached,      // the request ran without the prefix cache
  kCount
};
inline constexpr size_t kMissCauses = static_cast<size_t>(MissCause::kCount);
std::string_view missCauseName(MissCause cause);  // "new", "evicted", "model_changed", ...
std::optional<MissCause> parseMissCause(std::string_view name);

// Where a chat prompt's first computed token lies, by the chat template's
// message boundaries: the leading system (and developer) messages, the tool
// definitions the prompt carries, the conversation up to the last assistant
// message, or what follows it (the new input and the generation prompt).
enum class PromptRegion : uint8_t { kNone, kSystem, kTools, kHistory, kInput };
inline constexpr size_t kPromptRegions = 5;
std::string_view promptRegionName(PromptRegion region);  // "", "system", "tools", "history", "input"
std::optional<PromptRegion> parsePromptRegion(std::string_view name);

// A request's miss anatomy: no prompt text, only counts and positions.
struct MissAnatomy {
  std::array<int64_t, kMissCauses> tokens_by_cause{};  // add up to the entry's miss_tokens
  int64_t first_miss_token = -1;         // the first computed prompt token (its block's first); -1: none
  // The chat message and part that block's last token lies in (what made it
  // miss lies in the block); -1 and kNone: after the last message, or not a
  // chat request.
  int32_t first_miss_message = -1;
  PromptRegion first_miss_region = PromptRegion::kNone;
  MissCause first_miss_cause = MissCause::kNew;
  std::string evicted_tier;              // first_miss_cause kEvicted: "pool" or "disk"
  int64_t evicted_ago_ms = -1;           // ... how long before the request's lookup

  bool recorded() const { return first_miss_token >= 0; }
  int64_t tokens(MissCause c) const { return tokens_by_cause[static_cast<size_t>(c)]; }
  bool operator==(const MissAnatomy&) const = default;
};

struct LedgerEntry {
  std::string request_id;    // the x-request-id the client was sent
  std::string response_id;   // chatcmpl-..., cmpl-..., resp_...
  std::string key_id;
  std::string team;
  std::string model;             // the served model that ran it (what prices name)
  std::string requested_model;   // as the client named it (an alias, say)
  std::string endpoint;          // "/v1/chat/completions", ...
  std::string system_prompt;     // fingerprint (prompt_fingerprint.h); empty: none
  std::string idempotency_key;   // SHA-256 hex of the Idempotency-Key header; empty: none
  int64_t start_us = 0;          // Unix microseconds: request received (prices and hour buckets use it)
  int64_t end_us = 0;            // final event
  int64_t ttft_us = -1;          // submit to first generated token; -1: none generated
  int64_t prompt_tokens = 0;
  int64_t hit_tokens_tier0 = 0;  // prompt tokens reused from the latent pool
  int64_t hit_tokens_disk = 0;   // ... restored from the disk tier
  int64_t miss_tokens = 0;       // prompt tokens computed
  int64_t output_tokens = 0;
  int32_t choices = 1;           // scheduler requests summed (completions with several prompts)
  AppliedRates prices;
  Cost cost;                     // costOf(prices, hits, miss, output) when billable, else zero
  EntryStatus status = EntryStatus::kCompleted;
  std::string finish_reason;     // "stop", "length", "tool_calls", "cancelled", "error", "refused:queue_full", ...
  MissAnatomy miss;              // why the miss tokens missed (entries before it: not recorded)

  int64_t hitTokens() const { return hit_tokens_tier0 + hit_tokens_disk; }
  // Sets `cost` from the token counts, the rates and the status.
  void price();
};

// The storage encoding of an entry (JSON text). What the admin API shows is
// its own view (proxy/admin/usage_json.h: ledgerEntryJson).
std::string encodeEntry(const LedgerEntry& entry);
Result<LedgerEntry> decodeEntry(std::string_view json_text);
// The entry's "miss" field alone, for the stores and views that keep or show
// it apart from the entry (PostgreSQL's ledger_entries.miss, the admin API's
// entry view): a JSON object, or "null" when the anatomy is not recorded.
// decodeMissAnatomy reads either back (DataLoss when it is neither).
std::string encodeMissAnatomy(const MissAnatomy& anatomy);
Result<MissAnatomy> decodeMissAnatomy(std::string_view json_text);

// The counters kept per dimension and hour, slot by slot.
enum CounterSlot : size_t {
  kRequests, kCompleted, kCancelled, kFailed, kRefused,
  kPromptTokens, kHitTokensTier0, kHitTokensDisk, kMissTokens, kOutputTokens,
  kCostHit, kCostMiss, kCostOutput,
  kHitAtMissPrice,  // the hit tokens at the miss rate: what the cache saved = this - kCostHit
  // Miss tokens by cause (MissCause order); entries without an anatomy count in none.
  kMissNew, kMissEvicted, kMissModelChanged, kMissInFlight, kMissRecomputed, kMissPartialBlock, kMissUncached,
  // Miss tokens of the entries whose first computed token lies in each region.
  kFirstMissSystem, kFirstMissTools, kFirstMissHistory, kFirstMissInput,
  kCounterSlots
};
static_assert(kMissUncached - kMissNew + 1 == kMissCauses, "a counter slot per miss cause");
inline constexpr size_t missCauseSlot(MissCause c) { return kMissNew + static_cast<size_t>(c); }
// PromptRegion::kNone has no slot.
inline constexpr size_t firstMissSlot(PromptRegion r) { return kFirstMissSystem + static_cast<size_t>(r) - 1; }
using Counters = std::array<uint64_t, kCounterSlots>;
Counters countersOf(const LedgerEntry& entry);
void addCounters(Counters& into, const Counters& more);
// Tokens count whatever was computed; costs only billable entries.
inline Int128 costTotal(const Counters& c) {
  return static_cast<Int128>(c[kCostHit]) + c[kCostMiss] + c[kCostOutput];
}
// What the cache saved: the hit tokens at the miss rate, less what they cost.
inline Int128 cacheSavings(const Counters& c) { return static_cast<Int128>(c[kHitAtMissPrice]) - c[kCostHit]; }

// The aggregate keys an entry adds its counters to.
std::vector<std::string> aggregateKeys(const LedgerEntry& entry);

// What a request with an Idempotency-Key left for its retries.
struct IdempotencyRecord {
  std::string request_id;
  std::string request_digest;  // requestDigest() of the first request: a retry must match it
  EntryStatus status = EntryStatus::kCompleted;
  int64_t created_us = 0;
  bool stream = false;
  std::string content_type;
  std::string body;            // the whole response (JSON body or SSE transcript); empty when not kept
  bool body_kept = false;
};

// What a commit does with a claimed Idempotency-Key: always releases the
// claim; writes `record` when present (completed and cancelled requests).
struct IdempotencyCommit {
  std::string key_id;
  std::string key_hash;
  std::optional<IdempotencyRecord> record;
};

enum class GroupBy : uint8_t { kNone, kKey, kTeam, kModel, kSystemPrompt };
std::optional<GroupBy> parseGroupBy(std::string_view name);  // "key", "team", "model", "system_prompt"
std::string_view groupByName(GroupBy g);

struct UsageQuery {
  GroupBy group_by = GroupBy::kNone;
  int64_t from_s = 0;          // rounded down to the hour
  int64_t to_s = 0;            // exclusive, rounded up to the hour
  int64_t granularity_s = 0;   // 0: one row per group; 3600 or 86400: per period too
  std::string key_id;          // only this key (group_by none or key)
  std::string team;            // only this team (group_by none, key, team or system_prompt)
};

// What a usage query reads, the same in every store of the ledger (this one
// and PostgreSQL's): the dimension (a key filter reads the key rows; no
// grouping reads the team rows, every entry being in exactly one) and the
// hours [from_hour, to_hour). Refuses the combinations no dimension answers.
struct UsageScan {
  GroupBy dimension = GroupBy::kTeam;
  int64_t from_hour = 0;
  int64_t to_hour = 0;
};
Result<UsageScan> usageScan(const UsageQuery& q);

struct UsageRow {
  std::string group;          // the key id, team, model or fingerprint ("" for none); empty with kNone
  std::string team;           // for keys and system prompts
  int64_t period_start_s = -1;  // with a granularity
  Counters counters{};
};

struct LedgerOptions {
  size_t max_batch = 4096;                 // entries per WriteBatch
  size_t max_replay_bytes = size_t{4} << 20;  // a response kept for Idempotency-Key replays, at most
  int64_t idempotency_ttl_s = 24 * 3600;   // an Idempotency-Key is spent for this long; >= 1
  std::function<int64_t()> now_us;         // Unix microseconds; empty: the system clock (tests pass their own)
  LedgerMetrics* metrics = nullptr;        // /metrics: commit latency and cost by team; must outlive the ledger
  bool outbox = false;                     // write led/outbox/ markers for a drainer (above)
};

// What readOutbox() found: markers in key order (start time, then request
// id), each with its entry, and the markers whose entry is missing or
// unreadable (never drainable; see removeFromOutbox).
struct OutboxBatch {
  std::vector<std::string> markers;
  std::vector<LedgerEntry> entries;  // entries[i] is markers[i]'s
  std::vector<std::pair<std::string, std::string>> broken;  // marker, why
  int64_t oldest_commit_us = 0;      // the earliest commit among `markers` (0: none)
};

struct LedgerStats {
  uint64_t entries = 0;
  uint64_t batches = 0;
  uint64_t failed = 0;    // entries whose commit failed
  Histogram commit_ms;    // commit() to durable, per entry
  Histogram batch_size;   // entries per synced write
};

struct VerifyReport {
  uint64_t entries = 0;
  uint64_t aggregate_keys = 0;
  std::vector<std::string> mismatches;  // the first few aggregate keys that differ, with both values
  bool ok() const { return mismatches.empty(); }
};

// Told of every entry a group commit made durable (failed commits are not),
// on the committer thread after the batch synced and before the entries'
// callbacks run: a callback that releases what the request reserved (a
// budget) therefore never leaves its cost uncounted in between. Must not
// block.
class CommitObserver {
 public:
  virtual ~CommitObserver() = default;
  virtual void committed(const LedgerEntry& entry) = 0;
};

// What the usage API, the ledger routes and the dashboard read of the
// ledger, whichever store answers: this replica's RocksDB ledger (Ledger,
// below) or, with billing.postgres_url, the ledger of record in PostgreSQL
// that every replica drains into (billing/postgres/pg_ledger_reader.h), so
// that every replica shows the same numbers. The server picks one at start
// (proxy/server/server.cc); its readers depend on this interface only.
//
// Both give the same answers for the same entries: the same usage rows in
// the same order (usageScan is their one rule), entries in the same order
// (start time, then request id byte by byte). PostgreSQL that cannot be
// reached fails with Unavailable, which the routes answer 503.
//
// Thread-safety: every method may be called from any thread.
class LedgerReads {
 public:
  virtual ~LedgerReads() = default;

  // "rocksdb" or "postgresql": where the answers come from (shown by verify).
  virtual std::string_view source() const = 0;
  virtual Result<std::optional<LedgerEntry>> find(const std::string& request_id) const = 0;
  // Entries with start_us in [from_us, to_us), in start order (then request
  // id), until fn returns false.
  virtual Status scanEntries(int64_t from_us, int64_t to_us, const std::function<bool(const LedgerEntry&)>& fn) const = 0;
  // The newest entries with start_us in [from_us, to_us), newest first: at
  // most `limit`, only `team`'s when it is not empty. A store that must scan
  // to filter by team reads at most `max_examined` entries (Ledger's bounded
  // reverse scan); one with an index by team needs no bound.
  virtual Result<std::vector<LedgerEntry>> recentEntries(size_t limit, std::string_view team, int64_t from_us,
                                                         int64_t to_us, size_t max_examined) const = 0;
  virtual Result<std::vector<UsageRow>> usage(const UsageQuery& query) const = 0;
  // Recomputes the counters (rollups) from the entries and compares.
  virtual Result<VerifyReport> verify() const = 0;
};

class Ledger final : public LedgerReads {
 public:
  using Callback = std::function<void(Status)>;

  // `db` must outlive the ledger; open registers nothing in it but reads.
  static Result<std::unique_ptr<Ledger>> open(BillingDb& db, LedgerOptions options = {});
  // Commits what is queued, then stops the committer.
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Queues `entry` (and the idempotency record) for the next group commit;
  // `done` runs on the committer thread once it is durable (OK), or failed
  // (AlreadyExists for a request id already in the ledger, the store's
  // error otherwise). Never blocks on I/O. After the destructor started,
  // commits still complete before it returns.
  void commit(LedgerEntry entry, std::optional<IdempotencyCommit> idempotency, Callback done);

  // Idempotency-Key claims: one request at a time per (key id, key hash).
  enum class ClaimState : uint8_t { kClaimed, kInFlight, kDone };
  struct Claim {
    ClaimState state = ClaimState::kClaimed;
    std::optional<IdempotencyRecord> record;  // kDone
  };
  // kClaimed: the caller now holds it and must commit() with an
  // IdempotencyCommit naming it (which releases it). kInFlight: another
  // request holds it. kDone: an earlier request used it (its record).
  Result<Claim> claim(const std::string& key_id, const std::string& key_hash);
  // Releases a claim without a commit (a request refused before it ran).
  void release(const std::string& key_id, const std::string& key_hash);
  // Deletes up to `max_records` expired idempotency records, oldest first,
  // and returns how many it deleted (fewer: none is left). The committer
  // calls it; it is public for tests and serialized with the commits.
  Result<size_t> expireIdempotencyRecords(size_t max_records);

  // Returns once every commit queued before the call is written (or failed)
  // and its callback has run: what a shutdown waits for before the outbox's
  // final drain. Must not be called from a commit callback.
  void flush();

  // LedgerReads, from this replica's RocksDB store.
  std::string_view source() const override { return "rocksdb"; }
  Result<std::optional<LedgerEntry>> find(const std::string& request_id) const override;
  Status scanEntries(int64_t from_us, int64_t to_us, const std::function<bool(const LedgerEntry&)>& fn) const override;
  // A bounded reverse scan: a team whose requests are rare among the newest
  // `max_examined` entries gets fewer than `limit`.
  Result<std::vector<LedgerEntry>> recentEntries(size_t limit, std::string_view team, int64_t from_us, int64_t to_us,
                                                 size_t max_examined = 10'000) const override;
  Result<std::vector<UsageRow>> usage(const UsageQuery& query) const override;
  // Recomputes every counter from the entries and compares with the store.
  Result<VerifyReport> verify() const override;

  LedgerStats stats() const;
  const LedgerOptions& options() const { return options_; }

  // The outbox (LedgerOptions::outbox). Up to `max_entries` markers, oldest
  // start first, with their entries.
  Result<OutboxBatch> readOutbox(size_t max_entries) const;
  // Deletes `drained` markers (their entries are in PostgreSQL) and moves
  // `rejected` ones (marker, why) to led/outbox-rejected/, in one write; not
  // synced: a deletion a power loss drops is drained again, which PostgreSQL
  // ignores. Only the drainer calls it, one call at a time.
  Status removeFromOutbox(const std::vector<std::string>& drained,
                          const std::vector<std::pair<std::string, std::string>>& rejected = {});
  // Markers not yet removed: counted at open, then kept by the committer and
  // removeFromOutbox (0 without the outbox).
  uint64_t outboxDepth() const { return outbox_depth_.load(std::memory_order_relaxed); }

  // Tells `observer` of every later commit; it must outlive the ledger.
  void addObserver(CommitObserver* observer);

 private:
  struct Pending {
    LedgerEntry entry;
    std::optional<IdempotencyCommit> idempotency;
    Callback done;
    std::chrono::steady_clock::time_point queued;
  };
  Ledger(BillingDb& db, LedgerOptions options);
  void run();
  void commitBatch(std::vector<Pending>& batch);
  // An idempotency record made at or before this time has expired.
  int64_t expiryCutoffUs() const;
  bool expired(const IdempotencyRecord& record) const { return record.created_us <= expiryCutoffUs(); }
  // Gives every record written before led/idemt/ existed its key, once.
  Status indexIdempotencyRecords();
  // At open: markers for every entry when the outbox is new (led/outbox-on),
  // then the depth; without the outbox, forgets led/outbox-on.
  Status openOutbox();

  BillingDb& db_;
  const LedgerOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  // Commits queued and finished (callbacks run) since open, for flush().
  uint64_t queued_ = 0;        // guarded by mu_
  uint64_t finished_ = 0;      // guarded by mu_
  std::condition_variable flushed_cv_;

  // Serializes the batches with expireIdempotencyRecords(), so a sweep never
  // deletes a record that a batch is replacing.
  std::mutex write_mu_;

  // Claimed (key id, key hash) -> the creation time of the expired record
  // the claim will replace (its led/idemt/ key goes with it), or -1.
  mutable std::mutex claims_mu_;
  std::map<std::pair<std::string, std::string>, int64_t> claims_;  // guarded by claims_mu_

  mutable std::mutex stats_mu_;
  LedgerStats stats_;  // guarded by stats_mu_

  std::mutex observers_mu_;
  std::vector<CommitObserver*> observers_;  // guarded by observers_mu_

  std::atomic<uint64_t> outbox_depth_{0};

  std::thread committer_;
};

// SHA-256 hex of an Idempotency-Key header value (the key itself is not stored).
std::string idempotencyKeyHash(std::string_view idempotency_key);
// SHA-256 hex of what a retry must repeat: the endpoint and the body.
std::string requestDigest(std::string_view endpoint, std::string_view body);

}  // namespace lg::billing

#include "billing/postgres/pg_control_plane.h"

#include <algorithm>
#include <map>
#include <random>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "billing/postgres/pg_schema.h"
#include "billing/postgres/pg_session.h"
#include "common/hex.h"
#include "common/logging.h"
#include "common/unix_time.h"
#include "common/url_redact.h"

namespace lg::billing::pg {

// One row of control_records.
struct PgControlPlane::Row {
  std::string key;
  std::optional<std::string> value;
  int64_t seq = 0;
  std::string replica;
};

namespace {

constexpr std::string_view kReplicaKey = "ctl/replica";  // this replica's id
constexpr std::string_view kSyncedKey = "ctl/synced";    // "1": this store synced with PostgreSQL once

spdlog::logger* controlLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

std::string lockStatement() { return "SELECT pg_advisory_xact_lock(" + std::to_string(kControlLock) + ")"; }

using Row = PgControlPlane::Row;

std::vector<Row> rowsOf(const pqxx::result& r) {
  std::vector<Row> rows;
  rows.reserve(r.size());
  for (const auto& row : r) {
    Row out;
    out.key = row[0].as<std::string>();
    if (!row[1].is_null()) out.value = pqxx::binarystring(row[1]).str();
    out.seq = row[2].as<int64_t>();
    out.replica = row[3].as<std::string>();
    rows.push_back(std::move(out));
  }
  return rows;
}

// This replica's control records, by key.
Result<std::map<std::string, std::string>> localRecords(const BillingDb& db) {
  std::map<std::string, std::string> out;
  for (std::string_view prefix : kControlPrefixes) {
    LG_RETURN_IF_ERROR(db.scan(prefix, [&](std::string_view key, std::string_view value) {
      out.emplace(std::string(key), std::string(value));
      return true;
    }));
  }
  return out;
}

// The last write of each key, in the order of those last writes: one row
// per key in an upsert.
std::vector<ControlRecord> lastWrites(const std::vector<ControlRecord>& writes) {
  std::vector<ControlRecord> out;
  std::unordered_set<std::string_view> seen;
  for (auto it = writes.rbegin(); it != writes.rend(); ++it) {
    if (seen.insert(it->key).second) out.push_back(*it);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Upserts `records` with `seq` as `replica` (the caller holds kControlLock).
void upsert(pqxx::work& tx, const std::vector<ControlRecord>& records, int64_t seq, const std::string& replica) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ControlRecord& r : records) {
    // Keys are printable ASCII (wellFormedControlKey); values travel as hex
    // into bytea, whatever bytes they hold.
    rows.push_back({{"k", r.key}, {"v", r.value ? nlohmann::json(hexLower(*r.value)) : nlohmann::json(nullptr)}});
  }
  tx.exec_params(
      "INSERT INTO control_records (record_key, value, seq, replica, updated_at)"
      " SELECT r.k, decode(r.v, 'hex'), $2, $3, now() FROM jsonb_to_recordset($1::jsonb) AS r(k text, v text)"
      " ORDER BY r.k COLLATE \"C\""
      " ON CONFLICT (record_key) DO UPDATE SET value = EXCLUDED.value, seq = EXCLUDED.seq,"
      " replica = EXCLUDED.replica, updated_at = EXCLUDED.updated_at",
      rows.dump(), seq, replica);
}

int64_t nextSeq(pqxx::work& tx) { return tx.exec("SELECT nextval('control_seq')")[0][0].as<int64_t>(); }

// A change's view of control_records, inside the writer's transaction (after
// kControlLock: nothing else writes while it reads). libpqxx's exceptions
// pass through the change to Session::run, which turns them into a Status.
class PgTxn final : public ControlTxn {
 public:
  explicit PgTxn(pqxx::work& tx) : tx_(tx) {}

 protected:
  Result<std::vector<std::optional<std::string>>> read(const std::vector<std::string>& keys) override {
    const pqxx::result r = tx_.exec_params(
        "SELECT record_key, value FROM control_records"
        " WHERE record_key IN (SELECT jsonb_array_elements_text($1::jsonb))",
        nlohmann::json(keys).dump());
    std::map<std::string, std::optional<std::string>> found;
    for (const auto& row : r) {
      found[row[0].as<std::string>()] =
          row[1].is_null() ? std::nullopt : std::optional<std::string>(pqxx::binarystring(row[1]).str());
    }
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) {
      auto it = found.find(key);
      out.push_back(it == found.end() ? std::nullopt : it->second);
    }
    return out;
  }

 private:
  pqxx::work& tx_;
};

std::string newReplicaId() {
  std::random_device rd;
  std::string bytes(6, '\0');
  for (char& c : bytes) c = static_cast<char>(rd() & 0xff);
  return "r-" + hexLower(bytes);
}

}  // namespace

std::string_view controlSyncStateName(ControlSyncState s) {
  switch (s) {
    case ControlSyncState::kStarting: return "starting";
    case ControlSyncState::kSynced: return "synced";
    case ControlSyncState::kStale: return "stale";
    case ControlSyncState::kStopped: return "stopped";
  }
  return "stopped";
}

PgControlPlane::PgControlPlane(BillingDb& db, ControlSyncOptions options, std::string replica)
    : ControlPlane(db),
      options_(std::move(options)),
      replica_(std::move(replica)),
      started_us_(options_.now_us ? options_.now_us() : unixMicros()),
      write_session_(std::make_unique<Session>(options_.postgres)),
      sync_session_(std::make_unique<Session>(options_.postgres)) {}

Result<std::unique_ptr<PgControlPlane>> PgControlPlane::create(BillingDb& db, ControlSyncOptions options) {
  if (options.postgres.url.empty()) return invalidArgument("control plane: no PostgreSQL URL");
  if (options.interval.count() <= 0) return invalidArgument("control plane: the sync interval must be positive");
  LG_ASSIGN_OR_RETURN(std::optional<std::string> replica, db.get(kReplicaKey));
  if (!replica) {
    replica = newReplicaId();
    LG_RETURN_IF_ERROR(db.write({{std::string(kReplicaKey), *replica}}));
  }
  return std::unique_ptr<PgControlPlane>(new PgControlPlane(db, std::move(options), std::move(*replica)));
}

PgControlPlane::~PgControlPlane() { stop(); }

void PgControlPlane::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  state_.store(ControlSyncState::kStopped, std::memory_order_relaxed);
}

int64_t PgControlPlane::nowUs() const { return options_.now_us ? options_.now_us() : unixMicros(); }

Status PgControlPlane::start() {
  LG_ASSIGN_OR_RETURN(std::optional<std::string> synced, db().get(kSyncedKey));
  controlLog()->info("control plane: replica {} follows the control records in PostgreSQL at {} every {} ms",
                     replica_, redactUrlPassword(options_.postgres.url), options_.interval.count());
  Status s;
  {
    std::lock_guard lock(apply_mu_);
    // A replica that never synced must not serve records PostgreSQL does not
    // hold (an installation of its own): checked with the seed.
    if (!synced) {
      s = migrate(options_.postgres).status();
      if (s.isOk()) s = seed(/*refuse_differing=*/true);
      if (s.isOk()) bootstrapped_ = true;
    }
    if (s.isOk()) s = syncLocked();
  }
  if (!s.isOk()) {
    if (s.code() != StatusCode::kUnavailable || !synced) {
      const bool never = !synced && s.code() == StatusCode::kUnavailable;
      return s.withContext(std::string("billing.postgres_url: starting the control plane (keys, teams, budgets, "
                                       "prices)") +
                           (never ? ": this replica never synced its control records and cannot serve without them" : ""));
    }
    // Synced before: serve the last view; the follower catches up.
    controlLog()->warn("control plane: PostgreSQL unreachable at start; serving this replica's last synced view of "
                       "keys, teams, budgets and prices until it is back: {}",
                       redactPasswordIn(s.toString(), options_.postgres.url));
    state_.store(ControlSyncState::kStale, std::memory_order_relaxed);
  } else if (!synced) {
    LG_RETURN_IF_ERROR(db().write({{std::string(kSyncedKey), "1"}}));
  }
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

Status PgControlPlane::seed(bool refuse_differing) {
  LG_ASSIGN_OR_RETURN(auto local, localRecords(db()));
  size_t seeded = 0;
  size_t differing = 0;
  LG_RETURN_IF_ERROR(sync_session_->run("seeding the control records", [&](pqxx::connection& c) {
    seeded = differing = 0;
    pqxx::work tx(c);
    tx.exec(lockStatement());
    const int64_t rows = tx.exec("SELECT count(*) FROM control_records")[0][0].as<int64_t>();
    if (rows == 0) {
      if (local.empty()) return;
      // A single-node install's records become the cluster's (under the
      // lock: of replicas starting together, one seeds).
      std::vector<ControlRecord> records;
      for (const auto& [key, value] : local) records.push_back(ControlRecord{key, value});
      upsert(tx, records, nextSeq(tx), replica_);
      tx.commit();
      seeded = records.size();
      return;
    }
    if (!refuse_differing) return;
    // PostgreSQL holds records already: this replica's own must be among
    // them (a replica that seeded and stopped before it marked itself synced).
    std::map<std::string, std::string> theirs;
    for (const Row& r : rowsOf(tx.exec("SELECT record_key, value, seq, replica FROM control_records"))) {
      if (r.value) theirs.emplace(r.key, *r.value);
    }
    for (const auto& [key, value] : local) {
      auto it = theirs.find(key);
      if (it == theirs.end() || it->second != value) ++differing;
    }
  }));
  if (seeded > 0) {
    controlLog()->info("control plane: PostgreSQL held no control records; seeded it with this replica's {}", seeded);
  }
  if (differing > 0) {
    return Status{StatusCode::kAlreadyExists,
                  "PostgreSQL already holds the control records of an installation, and this replica's billing store "
                  "holds " + std::to_string(differing) +
                  " key, team, budget or price records that differ from them; two installations' records are not "
                  "merged. Start this replica with an empty billing store (it then takes the records from PostgreSQL), "
                  "or point it at another database"};
  }
  return Status::ok();
}

Status PgControlPlane::syncLocked() {
  Status s = Status::ok();
  if (!bootstrapped_) {
    // The first contact of a replica that started on its last view: the
    // schema may be new, and an empty table is seeded from this view rather
    // than applied to it.
    s = migrate(options_.postgres).status();
    if (s.isOk()) s = seed(/*refuse_differing=*/false);
    if (s.isOk()) bootstrapped_ = true;
  }
  const bool full = need_full_;
  if (s.isOk()) s = full ? fullSyncLocked() : pollLocked();
  if (!s.isOk()) {
    failed(s, full ? "a full sync of the control records" : "polling the control records");
    return s;
  }
  polls_.fetch_add(1, std::memory_order_relaxed);
  last_sync_us_.store(nowUs(), std::memory_order_relaxed);
  state_.store(ControlSyncState::kSynced, std::memory_order_relaxed);
  if (logged_failure_) {
    controlLog()->info("control plane: PostgreSQL is back; control records synced up to seq {}",
                       last_seq_.load(std::memory_order_relaxed));
    logged_failure_ = false;
  }
  return Status::ok();
}

Status PgControlPlane::apply(const std::vector<Row>& rows) {
  std::vector<ControlRecord> records;
  records.reserve(rows.size());
  size_t remote = 0;
  for (const Row& r : rows) {
    records.push_back(ControlRecord{r.key, r.value, r.replica != replica_});
    if (records.back().remote) ++remote;
  }
  LG_RETURN_IF_ERROR(applyLocally(records));
  applied_remote_.fetch_add(remote, std::memory_order_relaxed);
  return Status::ok();
}

Status PgControlPlane::pollLocked() {
  const int64_t after = last_seq_.load(std::memory_order_relaxed);
  std::vector<Row> rows;
  int64_t max_seq = 0;
  LG_RETURN_IF_ERROR(sync_session_->run("polling the control records", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    // One statement, one snapshot: seq order is commit order (kControlLock),
    // so every row above `after` committed so far is here, each at its
    // latest value.
    rows = rowsOf(tx.exec_params(
        "SELECT record_key, value, seq, replica FROM control_records WHERE seq > $1 ORDER BY seq, record_key", after));
    max_seq = tx.exec("SELECT coalesce(max(seq), 0) FROM control_records")[0][0].as<int64_t>();
  }));
  if (max_seq < after) {
    // The sequence went back: another database (a restore, a new one).
    need_full_ = true;
    return dataLoss("PostgreSQL's control records end at seq " + std::to_string(max_seq) + ", below the " +
                    std::to_string(after) + " this replica applied (a database restored or replaced); a full sync follows");
  }
  if (rows.empty()) return Status::ok();
  LG_RETURN_IF_ERROR(apply(rows));
  last_seq_.store(rows.back().seq, std::memory_order_relaxed);
  return Status::ok();
}

Status PgControlPlane::fullSyncLocked() {
  std::vector<Row> rows;
  LG_RETURN_IF_ERROR(sync_session_->run("reading every control record", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    rows = rowsOf(tx.exec("SELECT record_key, value, seq, replica FROM control_records ORDER BY seq, record_key"));
  }));
  LG_ASSIGN_OR_RETURN(auto local, localRecords(db()));
  if (rows.empty() && !local.empty()) {
    return dataLoss("PostgreSQL holds no control records while this replica holds " + std::to_string(local.size()) +
                    "; not applied (an emptied or replaced database would revoke every key): restart the replica "
                    "to seed it");
  }
  // What differs, in commit order; what PostgreSQL lacks goes too.
  std::vector<Row> diff;
  for (Row& r : rows) {
    auto it = local.find(r.key);
    const bool same = it == local.end() ? !r.value : r.value && *r.value == it->second;
    if (it != local.end()) local.erase(it);
    if (!same) diff.push_back(std::move(r));
  }
  if (!local.empty()) {
    controlLog()->warn("control plane: {} control records of this replica are not in PostgreSQL; erased here",
                       local.size());
    for (const auto& [key, value] : local) diff.push_back(Row{key, std::nullopt, 0, replica_});
  }
  if (!diff.empty()) LG_RETURN_IF_ERROR(apply(diff));
  if (!rows.empty()) last_seq_.store(rows.back().seq, std::memory_order_relaxed);
  need_full_ = false;
  return Status::ok();
}

Status PgControlPlane::update(std::string_view what, const Change& change) {
  Status change_status;
  std::vector<ControlRecord> committed;
  {
    std::lock_guard lock(write_mu_);
    Status s = write_session_->run(what, [&](pqxx::connection& c) {
      change_status = Status::ok();
      committed.clear();
      pqxx::work tx(c);
      tx.exec(lockStatement());
      PgTxn txn(tx);
      change_status = change(txn);
      if (!change_status.isOk()) return;  // rolled back with `tx`
      for (const ControlRecord& r : txn.writes()) {
        if (!wellFormedControlKey(r.key)) {
          change_status = internalError("not a control record key: " + quoteValue(r.key));
          return;
        }
      }
      committed = lastWrites(txn.writes());
      if (committed.empty()) return;
      upsert(tx, committed, nextSeq(tx), replica_);
      tx.commit();
    });
    if (!s.isOk()) {
      write_failures_.fetch_add(1, std::memory_order_relaxed);
      // Session::run's message names `what` already.
      return s.code() == StatusCode::kUnavailable
                 ? unavailable("PostgreSQL, the control records' source of truth, is unavailable; nothing was changed "
                               "unless this says the commit's outcome is unknown: " +
                               redactPasswordIn(s.message(), options_.postgres.url))
                 : s;
    }
  }
  if (change_status.isOk() && !committed.empty()) writes_.fetch_add(1, std::memory_order_relaxed);
  // Catch up: this change and everything committed before it, here, now.
  std::lock_guard lock(apply_mu_);
  if (Status caught = syncLocked(); !caught.isOk() && change_status.isOk() && !committed.empty()) {
    // PostgreSQL went away after the commit. The change stands (the
    // follower applies it); its revocations take effect here at once.
    std::vector<ControlRecord> erased;
    for (const ControlRecord& r : committed) {
      if (!r.value && r.key.starts_with("key/")) erased.push_back(r);
    }
    controlLog()->warn("control plane: {} committed, but reading it back failed; {} key revocation(s) applied at once, "
                       "the rest when PostgreSQL is back", what, erased.size());
    if (!erased.empty()) LG_RETURN_IF_ERROR(applyLocally(erased));
  }
  return change_status;
}

void PgControlPlane::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, options_.interval, [&] { return stopping_; })) return;
    }
    std::lock_guard lock(apply_mu_);
    (void)syncLocked();  // a failure is counted and logged; the next poll retries
  }
}

Status PgControlPlane::syncNow() {
  std::lock_guard lock(apply_mu_);
  return syncLocked();
}

void PgControlPlane::failed(const Status& s, std::string_view what) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  if (state_.load(std::memory_order_relaxed) != ControlSyncState::kStarting) {
    state_.store(ControlSyncState::kStale, std::memory_order_relaxed);
  }
  // One line per outage, not one per poll; the password never.
  if (!logged_failure_) {
    controlLog()->warn("control plane: {} failed; this replica keeps its last synced view (seq {}) and retries: {}",
                       what, last_seq_.load(std::memory_order_relaxed),
                       redactPasswordIn(s.toString(), options_.postgres.url));
    logged_failure_ = true;
  }
}

ControlSyncStats PgControlPlane::stats() const {
  ControlSyncStats s;
  s.last_seq = last_seq_.load(std::memory_order_relaxed);
  s.last_sync_us = last_sync_us_.load(std::memory_order_relaxed);
  s.polls = polls_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.applied_remote = applied_remote_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.write_failures = write_failures_.load(std::memory_order_relaxed);
  return s;
}

double PgControlPlane::syncAgeSeconds() const {
  const int64_t last = last_sync_us_.load(std::memory_order_relaxed);
  return std::max<double>(0, static_cast<double>(nowUs() - (last > 0 ? last : started_us_)) / 1e6);
}

void PgControlPlane::collect(metrics::ExpositionWriter& w) const {
  const ControlSyncStats s = stats();
  w.gauge("latentgate_control_sync_age_seconds",
          "Seconds since this replica last synced the control records (keys, teams, budgets, prices) with "
          "PostgreSQL; since its start when it has not yet. A revocation made elsewhere is refused here within "
          "billing.control_sync_interval_ms plus one poll while this stays low.",
          syncAgeSeconds());
  w.gauge("latentgate_control_sync_seq", "The highest control_records seq applied on this replica.", s.last_seq);
  w.counter("latentgate_control_sync_failures_total",
            "Failed polls of the control records (PostgreSQL unreachable); the replica serves its last synced view.",
            s.failures);
  w.counter("latentgate_control_records_applied_total",
            "Control records committed by other replicas and applied here.", s.applied_remote);
  w.counter("latentgate_control_writes_total", "Changes of the control records committed by this replica.", s.writes);
  w.counter("latentgate_control_write_failures_total",
            "Changes of the control records refused because PostgreSQL was unreachable (the admin API's 503), or "
            "whose commit's outcome was unknown.",
            s.write_failures);
  if (w.family("latentgate_control_sync_state", "The control plane follower's state: 1 for the current one.",
               metrics::MetricType::kGauge)) {
    for (ControlSyncState st : {ControlSyncState::kStarting, ControlSyncState::kSynced, ControlSyncState::kStale,
                                ControlSyncState::kStopped}) {
      w.sample({{"state", std::string(controlSyncStateName(st))}}, st == state() ? 1.0 : 0.0);
    }
  }
}

}  // namespace lg::billing::pg

// PgControlPlane: the control plane (billing/control_plane.h) with
// PostgreSQL as its source of truth, shared by every replica: API keys,
// teams, budgets, price versions and purges of stored responses are rows of
// control_records (pg_schema.h), and each replica's billing store holds its
// last synced view of them (docs/billing.md, "The control plane").
//
// Writes. update() runs the change in one transaction that first takes
// kControlLock (every replica's writes are serialized), reads the records
// it needs from control_records, writes its rows with one new control_seq
// value, and commits; then it catches up (below), so the change and
// everything committed before it are in this replica's memory when it
// returns. PostgreSQL unreachable: Unavailable, nothing changed (the admin
// API answers 503). Should the catch-up fail after the commit (PostgreSQL
// lost in between), the change's key erasures are applied at once anyway (a
// revoked key never authenticates here after revoke() returned) and the rest
// waits for the follower.
//
// Following. A follower thread polls every `interval` for the rows whose seq
// is above the last it applied, in seq order, and applies them (to the
// billing store and the stores' memory, in one batch: readers never see
// half a transaction); rows from other replicas are marked remote (a team
// deleted elsewhere is purged here). Because seq order is commit order,
// that poll misses nothing. Bound: a change committed anywhere is applied
// here at most `interval` plus one poll query later, while PostgreSQL is
// reachable. Unreachable: this replica keeps its last synced view (keys
// authenticate, revocations made elsewhere wait), /metrics shows the age of
// that view, and the first poll that succeeds catches up.
//
// Start (start(), before serving, after every store registered): migrate
// the schema; if control_records is empty, seed it with this replica's
// control records (the migration of a single-node install: one transaction
// under kControlLock, so of replicas starting together exactly one seeds);
// a replica that never synced and holds records that differ from a
// non-empty table refuses to start (AlreadyExists: two installs' keys are
// not merged silently); then a full sync, which makes the local view equal
// to the table (records it lacks are erased here), and the follower. If
// PostgreSQL is unreachable, a replica that synced before starts on its last
// view (state "stale", a full sync at the first successful poll); one that
// never did refuses (Unavailable). A full sync never empties a store: a
// table with no rows while this replica holds records is refused (an empty
// database named by mistake must not revoke every key).
//
// Secrets: the URL's password never reaches a log line.
//
// Thread-safety: update() from any thread; state(), stats() and collect()
// too (atomics); start() once, before concurrent use.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "billing/control_plane.h"
#include "billing/postgres/postgres_options.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::billing::pg {

class Session;

struct ControlSyncOptions {
  PostgresOptions postgres;
  std::chrono::milliseconds interval{1000};  // billing.control_sync_interval_ms: the poll period
  std::function<int64_t()> now_us;           // Unix microseconds; empty: the system clock
};

enum class ControlSyncState : uint8_t {
  kStarting,  // start() not done
  kSynced,    // the last poll succeeded
  kStale,     // the last poll failed: this replica serves its last synced view
  kStopped,
};
std::string_view controlSyncStateName(ControlSyncState s);  // "starting", "synced", "stale", "stopped"

struct ControlSyncStats {
  int64_t last_seq = 0;          // the highest seq applied here
  int64_t last_sync_us = 0;      // Unix microseconds of the last successful poll (0: none in this process)
  uint64_t polls = 0;            // successful polls
  uint64_t failures = 0;         // failed polls
  uint64_t applied_remote = 0;   // records committed by other replicas, applied here
  uint64_t writes = 0;           // changes committed by this replica
  uint64_t write_failures = 0;   // changes refused because PostgreSQL was unreachable (or the outcome unknown)
};

class PgControlPlane final : public ControlPlane {
 public:
  // The control plane over `db` (which must outlive it); nothing is read or
  // sent before start(). Its replica id is kept in the billing store
  // (ctl/replica), made at the first start.
  static Result<std::unique_ptr<PgControlPlane>> create(BillingDb& db, ControlSyncOptions options);
  // Stops the follower.
  ~PgControlPlane() override;

  // See above. Call once, after every store registered its applier.
  Status start();
  // Stops the follower (idempotent): nothing is applied afterwards, so the
  // stores may go before this object. update() still works.
  void stop();

  Status update(std::string_view what, const Change& change) override;

  // One poll on the caller's thread (tests; update() catches up the same way).
  Status syncNow();

  const std::string& replicaId() const { return replica_; }
  ControlSyncState state() const { return state_.load(std::memory_order_relaxed); }
  ControlSyncStats stats() const;
  // Seconds since the last successful poll (since the start when none).
  double syncAgeSeconds() const;
  // latentgate_control_* (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

  struct Row;  // one row of control_records (pg_control_plane.cc)

 private:
  PgControlPlane(BillingDb& db, ControlSyncOptions options, std::string replica);
  int64_t nowUs() const;
  void run();
  // Under apply_mu_: a poll of the rows above last_seq_, or a full sync
  // (after the migration and seed of a replica that started on its last view).
  Status syncLocked();
  Status pollLocked();
  Status fullSyncLocked();
  // Seeds an empty table with this replica's records; otherwise, when
  // `refuse_differing`, AlreadyExists if any of them differs from the table's.
  Status seed(bool refuse_differing);
  Status apply(const std::vector<Row>& rows);
  void failed(const Status& s, std::string_view what);

  const ControlSyncOptions options_;
  const std::string replica_;
  const int64_t started_us_;

  std::mutex write_mu_;                    // serializes this replica's writes on write_session_
  std::unique_ptr<Session> write_session_;  // guarded by write_mu_

  std::mutex apply_mu_;                    // serializes polls and applies
  std::unique_ptr<Session> sync_session_;  // guarded by apply_mu_
  bool bootstrapped_ = false;              // guarded by apply_mu_: migrated and seeded in this process
  bool need_full_ = true;                  // guarded by apply_mu_
  bool logged_failure_ = false;            // guarded by apply_mu_: one warning per outage

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_

  std::atomic<ControlSyncState> state_{ControlSyncState::kStarting};
  std::atomic<int64_t> last_seq_{0};
  std::atomic<int64_t> last_sync_us_{0};
  std::atomic<uint64_t> polls_{0}, failures_{0}, applied_remote_{0}, writes_{0}, write_failures_{0};

  std::thread thread_;
};

}  // namespace lg::billing::pg

// LedgerDrain: drains a replica's RocksDB ledger outbox (billing/ledger.h,
// LedgerOptions::outbox) into the ledger of record in PostgreSQL
// (docs/billing.md, "The outbox and its drain").
//
// One thread. It first brings the schema up to date (pg_schema.h: migrate(),
// retried with backoff while PostgreSQL is away), then loops: read up to
// `batch_size` markers in key order with their entries (Ledger::readOutbox),
// write them as one transaction (PgLedgerWriter: idempotent by request id),
// and delete the markers only after that commit succeeded
// (Ledger::removeFromOutbox). A failed write keeps the markers and is tried
// again after a backoff that doubles from `retry_min` to `retry_max`; a
// commit whose outcome is unknown (the connection lost during COMMIT) is
// simply written again, which PostgreSQL ignores for the rows it holds. A
// batch PostgreSQL refuses as InvalidArgument (text it cannot hold) is
// written entry by entry, and the entries it refuses alone are moved to
// led/outbox-rejected/ (counted, logged) rather than blocking the outbox.
// After a full batch the next one is read at once; otherwise the thread
// waits `interval` (or a wake()).
//
// Nothing here runs on the committer, the engine or an I/O thread: the
// committer only writes markers, and the drain reads them on its own thread.
// stop() (or the destructor) stops the loop, then makes one final drain
// attempt that starts no batch after `shutdown_drain` has passed (a batch
// under way is bounded by the connect and statement timeouts); what is left
// stays in the outbox for the next start. A server flushes the ledger's
// pending commits (Ledger::flush) before it, so that the final attempt sees
// every entry a client was told is complete.
//
// Secrets: the URL's password never reaches a log line (common/url_redact.h).
//
// Thread-safety: state(), stats(), collect() and wake() may be called from
// any thread (atomics); the ledger must outlive the drain.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "billing/ledger.h"
#include "billing/postgres/postgres_options.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::billing::pg {

class PgLedgerWriter;

struct DrainOptions {
  PostgresOptions postgres;
  size_t batch_size = 1000;                                // entries per PostgreSQL transaction
  std::chrono::milliseconds interval{200};                 // wait after a batch that was not full
  std::chrono::milliseconds retry_min{500};                // backoff after a failure, doubling ...
  std::chrono::milliseconds retry_max{30'000};             // ... up to this
  std::chrono::milliseconds shutdown_drain{2'000};         // the final attempt starts no batch after this
  std::function<int64_t()> now_us;                         // Unix microseconds; empty: the system clock
};

enum class DrainState : uint8_t {
  kStarting,   // migrating the schema (not yet done)
  kDraining,   // the last attempt succeeded
  kRetrying,   // the last attempt failed; the outbox holds until PostgreSQL is back
  kStopped,
};
std::string_view drainStateName(DrainState s);  // "starting", "draining", "retrying", "stopped"

struct DrainStats {
  uint64_t drained = 0;     // entries whose batch committed (new ones and ones PostgreSQL already held)
  uint64_t duplicates = 0;  // of those, entries PostgreSQL already held (a batch written again)
  uint64_t batches = 0;     // committed batches
  uint64_t failures = 0;    // failed attempts (migration or batch)
  uint64_t rejected = 0;    // entries moved to led/outbox-rejected/
  int64_t last_success_us = 0;  // Unix microseconds of the last committed batch (0: none yet)
};

class LedgerDrain {
 public:
  // Starts the thread; it migrates before its first batch. Fails only for
  // options out of range (validated in config/ before this).
  static Result<std::unique_ptr<LedgerDrain>> start(Ledger& ledger, DrainOptions options);
  // Stops the loop, then one final drain attempt bounded by shutdown_drain;
  // the state is then kStopped. Idempotent; one thread at a time.
  void stop();
  // stop().
  ~LedgerDrain();
  LedgerDrain(const LedgerDrain&) = delete;
  LedgerDrain& operator=(const LedgerDrain&) = delete;

  // Drain now rather than after the interval (tests, and a full outbox).
  void wake();

  DrainState state() const { return state_.load(std::memory_order_relaxed); }
  DrainStats stats() const;
  // /metrics: the outbox's depth, what was drained, the failures, the last
  // success and the lag of the oldest waiting entry (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

 private:
  LedgerDrain(Ledger& ledger, DrainOptions options);
  void run();
  // One batch: OK with how many entries it drained (0: the outbox was empty).
  Result<size_t> drainOnce();
  // Waits `d` or until stopped or woken; false when stopping.
  bool waitFor(std::chrono::milliseconds d);
  int64_t nowUs() const;
  void failed(const Status& s, std::string_view what);

  Ledger& ledger_;
  const DrainOptions options_;
  std::unique_ptr<PgLedgerWriter> writer_;  // used by the drain thread alone (and by stop() after the join)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  bool woken_ = false;     // guarded by mu_

  std::atomic<DrainState> state_{DrainState::kStarting};
  std::atomic<uint64_t> drained_{0}, duplicates_{0}, batches_{0}, failures_{0}, rejected_{0};
  std::atomic<int64_t> last_success_us_{0};
  std::atomic<int64_t> oldest_waiting_commit_us_{0};  // of the last batch read; 0: the outbox was empty
  bool migrated_ = false;        // drain thread only (and stop() after the join)
  bool stopped_ = false;         // stop()'s caller only
  bool logged_failure_ = false;  // drain thread only: one warning per outage, one line at recovery

  std::thread thread_;
};

}  // namespace lg::billing::pg

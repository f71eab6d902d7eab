// PgResponseIndex: the index of stored responses (billing/response_index.h)
// in PostgreSQL's stored_responses (pg_schema.h), shared by the replicas.
//
// One thread pushes this replica's markers (the billing store's respidx/
// keys, written by the response store with its records): up to `batch` in
// key order, upserted in one transaction (a deleted row stays deleted), then
// removed from the store, every `interval` or at once when marked(). A
// failed push keeps them for the next try. It also deletes, now and then,
// rows that expired more than a day ago.
//
// holder() is one query. After a failure, lookups are refused at once
// (Unavailable) for `lookup_backoff`, so that a PostgreSQL that does not
// answer costs the blocking pool one connect timeout, not one per request.
//
// Thread-safety: every method from any thread; the billing store must
// outlive the index.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "billing/billing_db.h"
#include "billing/postgres/postgres_options.h"
#include "billing/response_index.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::billing::pg {

class Session;

struct ResponseIndexOptions {
  PostgresOptions postgres;
  std::string replica;                             // this replica's id (PgControlPlane::replicaId)
  std::chrono::milliseconds interval{1000};        // the push period when nothing wakes it
  size_t batch = 500;                              // markers per transaction
  std::chrono::milliseconds lookup_backoff{2000};  // lookups refused at once after a failure
  std::function<int64_t()> now_s;                  // Unix seconds; empty: the system clock
};

class PgResponseIndex final : public ResponseIndex {
 public:
  // Starts the pushing thread. The schema must be migrated (the control
  // plane does it at start; a push before fails and is retried).
  static Result<std::unique_ptr<PgResponseIndex>> start(BillingDb& db, ResponseIndexOptions options);
  ~PgResponseIndex() override;
  PgResponseIndex(const PgResponseIndex&) = delete;
  PgResponseIndex& operator=(const PgResponseIndex&) = delete;

  const std::string& replica() const override { return options_.replica; }
  void marked() override;
  Result<std::optional<std::string>> holder(std::string_view owner, std::string_view response_id) override;

  // One push on the caller's thread: how many markers it pushed (tests).
  Result<size_t> pushNow();

  // latentgate_stored_response_index_* (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

 private:
  PgResponseIndex(BillingDb& db, ResponseIndexOptions options);
  void run();
  Result<size_t> pushLocked();
  int64_t nowS() const;

  BillingDb& db_;
  const ResponseIndexOptions options_;

  std::mutex push_mu_;                     // one push at a time
  std::unique_ptr<Session> push_session_;  // guarded by push_mu_
  int64_t next_cleanup_s_ = 0;             // guarded by push_mu_

  std::mutex lookup_mu_;
  std::unique_ptr<Session> lookup_session_;  // guarded by lookup_mu_
  std::atomic<int64_t> lookups_refused_until_ms_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  bool woken_ = false;     // guarded by mu_

  std::atomic<uint64_t> pushed_{0}, push_failures_{0}, lookups_{0}, lookup_failures_{0};
  bool logged_failure_ = false;  // pushing thread only

  std::thread thread_;
};

}  // namespace lg::billing::pg

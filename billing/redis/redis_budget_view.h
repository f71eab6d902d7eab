// RedisBudgetView: what the budget views (/v1/usage's budget, /user/balance,
// the admin budget API's status, the dashboard; billing/budget_view.h) show
// with limits.redis_url: the spending and live reservations of every
// replica, as Redis counts them for admission (docs/billing.md, "Budgets and
// limits shared by replicas", "What the budget views show").
//
// For each budget that applies (Budgets::effective: this replica's
// settings, as admission uses them), one read-only script on the team's
// slot returns its period's spend hash (`spent`, `seeded`), its held sum,
// and the members of its held set that expired by Redis's clock (the
// reservations of dead replicas, not yet purged by an admission), which are
// subtracted. Nothing is written: seeding and purging are admission's.
//
//   seeded              spent from Redis                    counted "shared"
//   not seeded          spent from the SpendSource (what    counted "records" (the ledger of
//   (a new period, or   admission would seed it with),      record) or "replica_ledger" (this
//   the counters lost)  reserved from Redis                 replica's ledger), as configured
//   source failed       spent from this replica's Budgets   counted "replica_ledger"
//   Redis unreachable   this replica's Budgets' status      counted "replica_only"
//   (or a bad reply)
//
// Connections: its own, not admission's (RedisLimits' thread must never
// wait behind a view): a small pool, each connection used by one caller at
// a time under its mutex; they connect on first use, and while one cools
// down after a failure (RedisOptions::retry_ms) calls through it answer at
// once with the local status.
//
// Threads: every method may be called from any thread, and blocks for a
// round trip to Redis (at most the command timeout; the connect timeout
// when connecting) and, for a period Redis has not counted, the SpendSource
// (a range scan, or a query of PostgreSQL). Callers run on the blocking pool
// (proxy/http/blocking_pool.h), never on an I/O thread: the routes that
// call it are registered with Runs::kBlocking.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "billing/budget_view.h"
#include "billing/budgets.h"
#include "billing/redis/redis_connection.h"
#include "billing/spend_source.h"
#include "common/status.h"

namespace lg::billing::redis {

class LimitKeys;

struct RedisBudgetViewOptions {
  RedisOptions redis;
  std::string key_prefix = "lg:";  // RedisLimitsOptions::key_prefix
  size_t connections = 2;          // callers that can read at once; more wait for a connection
  // What the SpendSource covers, named in "counted" for a period Redis has
  // not counted: kRecords (RecordSpendSource, billing.postgres_url) or
  // kReplicaLedger (LedgerSpendSource).
  BudgetCounted source_counts = BudgetCounted::kReplicaLedger;
};

class RedisBudgetView final : public BudgetView {
 public:
  // `budgets` gives the settings (and the local status while Redis is
  // away), `source` the spend of periods Redis has not counted; both must
  // outlive the view. Connects on first use: Redis may be away.
  static Result<std::unique_ptr<RedisBudgetView>> open(RedisBudgetViewOptions options, const Budgets& budgets,
                                                       const SpendSource& source);
  ~RedisBudgetView() override;
  RedisBudgetView(const RedisBudgetView&) = delete;
  RedisBudgetView& operator=(const RedisBudgetView&) = delete;

  std::optional<BudgetStatus> budgetOf(const Principal& who, int64_t now_s) const override;
  std::optional<BudgetStatus> statusOf(const BudgetSubject& subject, int64_t now_s) const override;
  // One pipeline for all (a subject asked twice is read once).
  std::vector<std::optional<BudgetStatus>> statusesOf(const std::vector<BudgetSubject>& subjects,
                                                      int64_t now_s) const override;
  std::vector<std::optional<BudgetStatus>> budgetsOf(const std::vector<Principal>& who, int64_t now_s) const override;

 private:
  struct Slot {
    std::mutex mu;
    std::unique_ptr<RedisConnection> conn;
  };
  RedisBudgetView(RedisBudgetViewOptions options, const Budgets& budgets, const SpendSource& source);
  // A free connection, locked; the next one in turn (waiting) when all are busy.
  std::unique_lock<std::mutex> acquire(Slot** slot) const;
  // Logs the first failure of an outage and the first success after it.
  void noteRedis(const Status& failure) const;

  const RedisBudgetViewOptions options_;
  const Budgets& budgets_;
  const SpendSource& source_;
  std::unique_ptr<LimitKeys> keys_;
  std::unique_ptr<RedisScript> read_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::atomic<size_t> next_{0};
  mutable std::atomic<bool> down_{false};
};

}  // namespace lg::billing::redis

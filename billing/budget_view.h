// BudgetView: what the usage API (GET /v1/usage, GET /user/balance), the
// admin budget API (its "status") and the dashboard show of a key's or a
// team's budget. billing::Budgets (budgets.h) implements it from this
// replica's own counts; with limits.redis_url,
// billing::redis::RedisBudgetView (redis/redis_budget_view.h) reads the
// counts every replica shares. docs/billing.md.
//
// Thread-safety: implementations must allow concurrent calls. A view may
// block (RedisBudgetView asks Redis): call it from the blocking pool
// (proxy/http/blocking_pool.h), never from an I/O thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "billing/key_store.h"
#include "common/decimal.h"

namespace lg::billing {

enum class BudgetScope : uint8_t { kKey, kTeam };
std::string_view budgetScopeName(BudgetScope scope);  // "key", "team" (budgets.cc)

// Where a status's spent and reserved amounts were counted.
enum class BudgetCounted : uint8_t {
  kReplica,        // this replica's memory (Budgets): the whole count without limits.redis_url
  kShared,         // Redis's counters: every replica's spending and live reservations
  kRecords,        // Redis holds no spend for the period (no request needed it yet, or the counters were
                   // lost): spent from the ledger of record (every replica's drained entries plus this
                   // replica's outbox), the seed admission will use; reserved from Redis
  kReplicaLedger,  // the same from this replica's ledger alone (no billing.postgres_url, or the ledger of
                   // record unreachable): the other replicas' spending is missing; reserved from Redis
  kReplicaOnly,    // Redis unreachable: this replica's memory (Budgets), which lacks the other replicas'
                   // spending and every reservation (they are held in Redis)
};
// As the APIs name it ("counted"): "shared", "records", "replica_ledger",
// "replica_only"; "" for kReplica, which they leave out (nothing is shared).
constexpr std::string_view budgetCountedName(BudgetCounted c) {
  switch (c) {
    case BudgetCounted::kReplica: return "";
    case BudgetCounted::kShared: return "shared";
    case BudgetCounted::kRecords: return "records";
    case BudgetCounted::kReplicaLedger: return "replica_ledger";
    case BudgetCounted::kReplicaOnly: return "replica_only";
  }
  return "";
}

// Pico-dollars, like every amount in billing/.
struct BudgetStatus {
  std::string scope;         // "key" or "team": the budget that binds (the less remaining)
  std::string period;        // "day", "month" or "total"
  int64_t period_start_s = 0;  // Unix seconds: this period's first (UTC midnight, the 1st); 0 for total
  int64_t period_end_s = 0;  // Unix seconds when the period renews; 0: never
  int64_t limit = 0;
  int64_t soft_limit = 0;    // warnings (a log line, a metric) once spent reaches it
  Int128 spent = 0;          // committed ledger entries that started in the period
  Int128 reserved = 0;       // held for requests in flight
  BudgetCounted counted = BudgetCounted::kReplica;
  Int128 remaining() const { return Int128{limit} - spent - reserved; }
};

// One budget to look at: a key's own or a team's own.
struct BudgetSubject {
  BudgetScope scope = BudgetScope::kKey;
  std::string id;    // the key id, or the team
  std::string team;  // the key's team (a team's: itself): the shared counters are named by it
};

class BudgetView {
 public:
  virtual ~BudgetView() = default;
  // The budget that binds `who` now, or nothing when no budget applies.
  virtual std::optional<BudgetStatus> budgetOf(const Principal& who, int64_t now_s) const = 0;
  // A key's or a team's own budget now (nothing when none applies).
  virtual std::optional<BudgetStatus> statusOf(const BudgetSubject& subject, int64_t now_s) const = 0;

  // Several at once, in the order asked (one round trip to a shared store).
  virtual std::vector<std::optional<BudgetStatus>> statusesOf(const std::vector<BudgetSubject>& subjects,
                                                              int64_t now_s) const {
    std::vector<std::optional<BudgetStatus>> out;
    out.reserve(subjects.size());
    for (const BudgetSubject& s : subjects) out.push_back(statusOf(s, now_s));
    return out;
  }
  virtual std::vector<std::optional<BudgetStatus>> budgetsOf(const std::vector<Principal>& who, int64_t now_s) const {
    std::vector<std::optional<BudgetStatus>> out;
    out.reserve(who.size());
    for (const Principal& p : who) out.push_back(budgetOf(p, now_s));
    return out;
  }

  // budgetOf's rule: the key's or the team's, whichever has less remaining.
  static std::optional<BudgetStatus> binding(std::optional<BudgetStatus> key, std::optional<BudgetStatus> team) {
    if (key && team) return team->remaining() < key->remaining() ? std::move(team) : std::move(key);
    return key ? std::move(key) : std::move(team);
  }
};

}  // namespace lg::billing

// BudgetView: what the usage API (GET /v1/usage, GET /user/balance) and the
// dashboard show of a key's budget; billing::Budgets (budgets.h) implements
// it. docs/billing.md.
//
// Thread-safety: implementations must allow concurrent calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "billing/key_store.h"
#include "common/decimal.h"

namespace lg::billing {

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
  Int128 remaining() const { return Int128{limit} - spent - reserved; }
};

class BudgetView {
 public:
  virtual ~BudgetView() = default;
  // The budget that binds `who` now, or nothing when no budget applies.
  virtual std::optional<BudgetStatus> budgetOf(const Principal& who, int64_t now_s) const = 0;
};

}  // namespace lg::billing

// BudgetView: the seam through which the usage API shows a key's budget.
// Budgets and their reservations are a later change (issue 12, point 4);
// until one implements this, the gateway has none and GET /v1/usage reports
// "budget": null and GET /user/balance an unlimited key (docs/billing.md).
//
// Thread-safety: implementations must allow concurrent calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "billing/key_store.h"

namespace lg::billing {

// Pico-dollars, like every amount in billing/.
struct BudgetStatus {
  std::string scope;         // "key" or "team": the tighter budget that applies
  std::string period;        // "day", "month" or "total"
  int64_t period_end_s = 0;  // Unix seconds when the period renews; 0: never
  int64_t limit = 0;
  int64_t spent = 0;         // committed entries in the period
  int64_t reserved = 0;      // held for requests in flight
  int64_t remaining() const { return limit - spent - reserved; }
};

class BudgetView {
 public:
  virtual ~BudgetView() = default;
  // The budget that binds `who` now, or nothing when no budget applies.
  virtual std::optional<BudgetStatus> budgetOf(const Principal& who, int64_t now_s) const = 0;
};

}  // namespace lg::billing

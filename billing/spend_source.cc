#include "billing/spend_source.h"

#include <vector>

#include "common/unix_time.h"

namespace lg::billing {

Result<Int128> LedgerSpendSource::spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                                        int64_t start_s) const {
  if (auto kept = budgets_.spentIn(scope, id, period, start_s)) return *kept;
  // An earlier day or month than Budgets keeps (a request that started just
  // before midnight): the hourly counters of that period, exact by the
  // entries' start like the budgets.
  UsageQuery q;
  q.group_by = GroupBy::kNone;
  q.from_s = start_s;
  // (Budgets always keeps the total, so a period here has an end.)
  q.to_s = period == BudgetPeriodSetting::kTotal ? unixSeconds() + 3600 : budgetPeriodEnd(period, start_s);
  if (scope == BudgetScope::kKey) {
    q.key_id = id;
  } else {
    q.team = id;
  }
  LG_ASSIGN_OR_RETURN(std::vector<UsageRow> rows, ledger_.usage(q));
  Int128 total = 0;
  for (const UsageRow& r : rows) total += costTotal(r.counters);
  return total;
}

}  // namespace lg::billing

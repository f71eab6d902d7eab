#include "billing/spend_source.h"

#include <vector>

#include "common/unix_time.h"

namespace lg::billing {

namespace {

// The usage query of one subject's period: from its start to its end (the
// next hour for a total, which has none).
UsageQuery periodQuery(BudgetScope scope, const std::string& id, BudgetPeriodSetting period, int64_t start_s) {
  UsageQuery q;
  q.group_by = GroupBy::kNone;
  q.from_s = start_s;
  q.to_s = period == BudgetPeriodSetting::kTotal ? unixSeconds() + 3600 : budgetPeriodEnd(period, start_s);
  if (scope == BudgetScope::kKey) {
    q.key_id = id;
  } else {
    q.team = id;
  }
  return q;
}

Result<Int128> usageCost(const LedgerReads& reads, const UsageQuery& q) {
  LG_ASSIGN_OR_RETURN(std::vector<UsageRow> rows, reads.usage(q));
  Int128 total = 0;
  for (const UsageRow& r : rows) total += costTotal(r.counters);
  return total;
}

}  // namespace

Result<Int128> LedgerSpendSource::spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                                        int64_t start_s) const {
  if (auto kept = budgets_.spentIn(scope, id, period, start_s)) return *kept;
  // An earlier day or month than Budgets keeps (a request that started just
  // before midnight): the hourly counters of that period, exact by the
  // entries' start like the budgets.
  return usageCost(ledger_, periodQuery(scope, id, period, start_s));
}

Result<Int128> RecordSpendSource::spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                                        int64_t start_s) const {
  const UsageQuery q = periodQuery(scope, id, period, start_s);
  LG_ASSIGN_OR_RETURN(OutboxBatch outbox, local_.readOutbox(max_outbox_ + 1));
  if (outbox.entries.size() > max_outbox_) {
    return unavailable("budget seed: this replica's outbox holds more than " + std::to_string(max_outbox_) +
                       " entries (the ledger of record is behind)");
  }
  Int128 undrained = 0;
  const int64_t from_us = q.from_s * 1'000'000, to_us = q.to_s * 1'000'000;
  for (const LedgerEntry& e : outbox.entries) {
    const bool mine = scope == BudgetScope::kKey ? e.key_id == id : e.team == id;
    if (mine && e.start_us >= from_us && e.start_us < to_us) undrained += e.cost.total();
  }
  LG_ASSIGN_OR_RETURN(Int128 recorded, usageCost(records_, q));
  return recorded + undrained;
}

}  // namespace lg::billing

// SpendSource: what a key or team spent in a budget period according to the
// durable records, for rebuilding counters kept elsewhere (Redis, shared by
// replicas) when they were lost: the store restarted empty or was flushed
// (docs/billing.md, "Budgets and limits shared by replicas").
//
// A source must never report less than the records it knows of: a seed that
// is too low lets a budget be overspent, one too high only refuses early.
//
//   LedgerSpendSource  this replica's ledger (what Budgets counted from it,
//                      else its hourly counters): exact for this replica,
//                      blind to the others' entries.
//   RecordSpendSource  the ledger of record (PostgreSQL's reader, with
//                      billing.postgres_url) plus this replica's undrained
//                      outbox: every replica's entries except those still in
//                      another replica's outbox (its drain's lag).
//
// Thread-safety: spent() may be called from any thread; it may block (a
// scan, a query), so callers keep it off request threads.
#pragma once

#include <string>

#include "billing/budgets.h"
#include "billing/ledger.h"
#include "billing/settings.h"
#include "common/decimal.h"
#include "common/status.h"

namespace lg::billing {

class SpendSource {
 public:
  virtual ~SpendSource() = default;
  // The cost of the committed entries of key `id` (scope kKey) or team `id`
  // (kTeam) that started in the period of `period` beginning at `start_s`
  // (budgetPeriodStart; 0 for total).
  virtual Result<Int128> spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                               int64_t start_s) const = 0;
};

class LedgerSpendSource final : public SpendSource {
 public:
  // Both must outlive the source.
  LedgerSpendSource(const Budgets& budgets, const Ledger& ledger) : budgets_(budgets), ledger_(ledger) {}

  // What Budgets counted for the period it keeps (the current one: no I/O),
  // else the ledger's hourly counters for the period (a range scan).
  Result<Int128> spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                       int64_t start_s) const override;

 private:
  const Budgets& budgets_;
  const Ledger& ledger_;
};

// The ledger of record's usage plus this replica's outbox. The outbox is read
// first and the records second, so an entry drained in between is counted
// twice (too high, which is safe) rather than not at all. An entry can be in
// both (drained, its marker not yet removed): counted twice as well. An
// outbox of more than `max_outbox` entries (PostgreSQL away for long) is
// Unavailable rather than a partial sum, so the admission waits or fails
// closed instead of seeding low.
class RecordSpendSource final : public SpendSource {
 public:
  // Both must outlive the source; `local` was opened with its outbox.
  RecordSpendSource(const LedgerReads& records, const Ledger& local, size_t max_outbox = 200'000)
      : records_(records), local_(local), max_outbox_(max_outbox) {}

  Result<Int128> spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                       int64_t start_s) const override;

 private:
  const LedgerReads& records_;
  const Ledger& local_;
  const size_t max_outbox_;
};

}  // namespace lg::billing

// Budgets: spending limits per API key and per team, enforced before a
// request runs (docs/billing.md, "Budgets").
//
// A budget is at most `limit` pico-dollars per period: a UTC day, a UTC
// calendar month, or in total. What counts against it is
//
//   spent     the cost of the committed ledger entries of the key (team) that
//             started in the period (what /admin/usage sums for that range),
//   reserved  for every request in flight, the most it can cost: its prompt
//             at the cache-miss rate plus its output cap (max_tokens) at the
//             output rate, at the rates it was priced with.
//
// reserve() admits a request only if its reservation fits in limit - spent -
// reserved of both the key's budget and its team's, and charges it to both
// under one lock, so concurrent requests cannot overspend between the check
// and the charge. A request's actual cost never exceeds its reservation
// (hits cost less than misses, output stops at max_tokens), so spent never
// passes the limit: the reservation is the contract, and a request whose
// reservation does not fit is refused (429 insufficient_quota) even if it
// would in fact have cost less.
//
// Settlement: the ledger tells Budgets of each committed entry (a
// CommitObserver, on the committer thread, after the sync and before the
// entry's callback), which adds its cost to spent; the request's
// BudgetReservation is released afterwards (in that callback, or when the
// request ends without an entry), so no moment counts the request as
// neither spent nor reserved.
//
// What was spent survives restarts: open() sums it from the ledger's hourly
// counters for the current day, month and all time, before the ledger takes
// any commit. Reservations are in memory only: a restart ends the requests
// that held them. Budgets set by the admin API are control records
// (budget/key/<key id>, budget/team/<team>; billing/control_plane.h): set
// through the control plane and taken into memory when it applies them, so a
// budget set on one replica applies on every replica once its follower
// applied it; billing.key_budget and billing.team_budget apply to every key
// and team without one.
//
// Soft limits warn: the first committed entry that brings a key's or team's
// spending in a period to its soft limit logs a warning (ids and amounts, no
// secrets) and counts in latentgate_budget_soft_limit_reached_total.
//
// Thread-safety: every method may be called from any thread; one mutex
// guards the state, held for map lookups and additions only (no I/O: set()
// and clear() write through the control plane, outside it).
#pragma once

#include <atomic>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "billing/billing_db.h"
#include "billing/budget_view.h"
#include "billing/control_plane.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/settings.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::billing {

// BudgetScope and budgetScopeName: budget_view.h.

// The first second of the period of `period` that holds `t_s`, and the first
// of the next (0 for total: it never renews). UTC.
int64_t budgetPeriodStart(BudgetPeriodSetting period, int64_t t_s);
int64_t budgetPeriodEnd(BudgetPeriodSetting period, int64_t t_s);

class Budgets;
class BudgetReservation;

// What holds reservations and takes them back: Budgets, in this replica's
// memory, or a store the replicas share (billing/redis/redis_limits.h).
class ReservationHolder {
 public:
  // Gives back what `r` held; called once per reservation, from any thread,
  // and must not block (a shared store queues it).
  virtual void releaseReservation(const BudgetReservation& r) = 0;

 protected:
  ~ReservationHolder() = default;
};

// What one admitted request holds against its key's and team's budgets until
// it is settled. Move-only; releasing (or destroying) gives the amount back.
class BudgetReservation {
 public:
  BudgetReservation() = default;
  // Held by `holder` (null: holds nothing), which release() tells.
  BudgetReservation(ReservationHolder* holder, std::string request_id, std::string key_id, std::string team,
                    int64_t amount)
      : holder_(holder),
        request_id_(std::move(request_id)),
        key_id_(std::move(key_id)),
        team_(std::move(team)),
        amount_(amount) {}
  BudgetReservation(BudgetReservation&& other) noexcept { *this = std::move(other); }
  BudgetReservation& operator=(BudgetReservation&& other) noexcept;
  BudgetReservation(const BudgetReservation&) = delete;
  BudgetReservation& operator=(const BudgetReservation&) = delete;
  ~BudgetReservation() { release(); }

  void release();
  int64_t amount() const { return amount_; }
  const std::string& requestId() const { return request_id_; }  // empty: held by Budgets, which needs none
  const std::string& keyId() const { return key_id_; }
  const std::string& team() const { return team_; }

 private:
  ReservationHolder* holder_ = nullptr;
  std::string request_id_;
  std::string key_id_;
  std::string team_;
  int64_t amount_ = 0;
};

// Why reserve() refused: the budget that could not hold the reservation.
struct BudgetRefusal {
  BudgetStatus budget;
  int64_t amount = 0;  // what the request would have reserved
};

struct BudgetOptions {
  BudgetSetting key_default;   // billing.key_budget
  BudgetSetting team_default;  // billing.team_budget
};

class Budgets final : public BudgetView, public CommitObserver, public ReservationHolder, public ControlApplier {
 public:
  // Reads the budgets set before, sums what each key and team spent from the
  // ledger's counters, and observes the ledger's commits from then on. Open
  // it before the ledger takes commits (before serving): a commit between
  // the sums and the observation would not be counted. Budgets are set
  // through a LocalControlPlane of its own.
  static Result<std::unique_ptr<Budgets>> open(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s);
  // The same, through `control` (whose store `db` is), which also hands it
  // the budget records it applies; `control` must outlive it.
  static Result<std::unique_ptr<Budgets>> open(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s,
                                               ControlPlane& control);

  // Admits a request that may cost up to `amount` pico-dollars, holding it
  // against both budgets of `who`, or refuses it holding nothing.
  std::variant<BudgetReservation, BudgetRefusal> reserve(const Principal& who, int64_t amount, int64_t now_s);

  // The admin API: a key's or a team's own budget (a change of the control
  // plane, in memory here when it returns; an enabled = false budget exempts
  // it from the default), or back to the default (false: it had none of its
  // own). Unavailable: the control plane's source of truth is unreachable.
  Status set(BudgetScope scope, const std::string& id, const BudgetSetting& budget);
  Result<bool> clear(BudgetScope scope, const std::string& id);

  struct Assigned {
    BudgetScope scope = BudgetScope::kKey;
    std::string id;
    BudgetSetting budget;
    bool is_default = false;  // from billing.*_budget, not set for this key or team
  };
  // The budget that applies to a key (team) and where it came from.
  Assigned effective(BudgetScope scope, const std::string& id) const;
  // Every budget set through the admin API, keys first, by id.
  std::vector<Assigned> assigned() const;
  const BudgetOptions& defaults() const { return options_; }
  // A key's or team's own budget now (nothing when none applies).
  std::optional<BudgetStatus> statusOf(BudgetScope scope, const std::string& id, int64_t now_s) const;
  // BudgetView: the same (this replica's counts; the subject's team is not needed).
  std::optional<BudgetStatus> statusOf(const BudgetSubject& subject, int64_t now_s) const override {
    return statusOf(subject.scope, subject.id, now_s);
  }

  // BudgetView: the key's or the team's, whichever has less remaining.
  std::optional<BudgetStatus> budgetOf(const Principal& who, int64_t now_s) const override;
  // CommitObserver: a committed entry's cost counts against its key and team.
  void committed(const LedgerEntry& entry) override;
  // ControlApplier: budget/ records into memory.
  void applyControl(const std::vector<ControlRecord>& records) override;

  // What `id` spent in the period of `period` that starts at `start_s`, as
  // counted here from this replica's ledger; nullopt when that period is no
  // longer the one kept (an earlier day or month: ask the ledger).
  std::optional<Int128> spentIn(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                                int64_t start_s) const;
  // A refusal decided elsewhere (a store shared by replicas), counted with
  // this replica's in latentgate_budget_refusals_total.
  void countRefusal(BudgetScope scope) { refusals_[static_cast<size_t>(scope)].fetch_add(1, std::memory_order_relaxed); }

  // latentgate_budget_* families (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

 private:
  // One key's or team's spending: per period, by the start of the entries.
  struct Spend {
    int64_t day_start = 0;
    int64_t month_start = 0;
    Int128 day = 0, month = 0, total = 0;
    Int128 reserved = 0;
    int64_t warned_start = -1;  // the period start whose soft limit was reported
    // Moves the day and month to those holding `t_s` if they are later.
    void roll(int64_t t_s);
    Int128 spentIn(BudgetPeriodSetting period) const;
  };
  using SpendMap = std::map<std::string, Spend, std::less<>>;

  Budgets(BillingDb& db, BudgetOptions options, std::unique_ptr<LocalControlPlane> own, ControlPlane& control)
      : db_(db), options_(std::move(options)), own_control_(std::move(own)), control_(control) {}
  static Result<std::unique_ptr<Budgets>> make(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s,
                                               std::unique_ptr<LocalControlPlane> own, ControlPlane& control);
  Status load(const Ledger& ledger, int64_t now_s);
  // ReservationHolder: a reservation made by reserve().
  void releaseReservation(const BudgetReservation& r) override;
  const BudgetSetting& effectiveLocked(BudgetScope scope, const std::string& id, bool* is_default = nullptr) const;
  Spend& spendLocked(BudgetScope scope, const std::string& id, int64_t now_s) const;
  BudgetStatus statusLocked(BudgetScope scope, const BudgetSetting& b, const Spend& s, int64_t now_s) const;
  // After `entry` was added: warns once per period when spent reached the soft limit.
  void checkSoftLimitLocked(BudgetScope scope, const std::string& id, Spend& s, int64_t at_s);

  BillingDb& db_;
  const BudgetOptions options_;
  std::unique_ptr<LocalControlPlane> own_control_;  // open() without a control plane: its own
  ControlPlane& control_;
  mutable std::mutex mu_;
  std::array<std::map<std::string, BudgetSetting, std::less<>>, 2> own_;  // guarded by mu_; by scope
  mutable std::array<SpendMap, 2> spend_;                                 // guarded by mu_; by scope
  std::array<std::atomic<uint64_t>, 2> refusals_{};
  std::array<std::atomic<uint64_t>, 2> soft_limit_reached_{};
};

}  // namespace lg::billing

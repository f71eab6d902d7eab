#include "billing/budgets.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "billing/settings_json.h"
#include "common/logging.h"
#include "common/unix_time.h"

namespace lg::billing {

namespace {

constexpr std::string_view kBudgetPrefix = "budget/";
constexpr int64_t kDayS = 86400;

spdlog::logger* billingLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

std::chrono::year_month_day civilDay(int64_t t_s) {
  using namespace std::chrono;
  return year_month_day{floor<days>(sys_seconds{seconds{t_s}})};
}

// The Unix time of midnight UTC at the start of `d`.
int64_t midnightOf(std::chrono::year_month_day d) {
  using namespace std::chrono;
  return sys_seconds{sys_days{d}}.time_since_epoch().count();
}

std::string storeKey(BudgetScope scope, std::string_view id) {
  return std::string(kBudgetPrefix) + std::string(budgetScopeName(scope)) + "/" + std::string(id);
}

// budget/<scope>/<id>: the scope and the id, or nothing for another key.
std::optional<std::pair<BudgetScope, std::string>> parseStoreKey(std::string_view key) {
  if (!key.starts_with(kBudgetPrefix)) return std::nullopt;
  const std::string_view rest = key.substr(kBudgetPrefix.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 == rest.size()) return std::nullopt;
  const std::string_view scope_name = rest.substr(0, slash);
  if (scope_name != "key" && scope_name != "team") return std::nullopt;
  return std::make_pair(scope_name == "key" ? BudgetScope::kKey : BudgetScope::kTeam, std::string(rest.substr(slash + 1)));
}

}  // namespace

std::string_view budgetScopeName(BudgetScope scope) { return scope == BudgetScope::kKey ? "key" : "team"; }

int64_t budgetPeriodStart(BudgetPeriodSetting period, int64_t t_s) {
  switch (period) {
    case BudgetPeriodSetting::kDay: return floorDiv(t_s, kDayS) * kDayS;
    case BudgetPeriodSetting::kMonth: {
      const auto d = civilDay(t_s);
      return midnightOf(d.year() / d.month() / 1);
    }
    case BudgetPeriodSetting::kTotal: break;
  }
  return 0;
}

int64_t budgetPeriodEnd(BudgetPeriodSetting period, int64_t t_s) {
  switch (period) {
    case BudgetPeriodSetting::kDay: return budgetPeriodStart(period, t_s) + kDayS;
    case BudgetPeriodSetting::kMonth: {
      const auto d = civilDay(t_s);
      return midnightOf(std::chrono::year_month_day(d.year() / d.month() / 1) + std::chrono::months{1});
    }
    case BudgetPeriodSetting::kTotal: break;
  }
  return 0;
}

// ---------------------------------------------------------- reservations

BudgetReservation& BudgetReservation::operator=(BudgetReservation&& other) noexcept {
  if (this != &other) {
    release();
    holder_ = std::exchange(other.holder_, nullptr);
    request_id_ = std::move(other.request_id_);
    key_id_ = std::move(other.key_id_);
    team_ = std::move(other.team_);
    amount_ = std::exchange(other.amount_, 0);
  }
  return *this;
}

void BudgetReservation::release() {
  if (holder_ == nullptr) return;
  std::exchange(holder_, nullptr)->releaseReservation(*this);
  amount_ = 0;
}

// ------------------------------------------------------------- spending

void Budgets::Spend::roll(int64_t t_s) {
  const int64_t d = budgetPeriodStart(BudgetPeriodSetting::kDay, t_s);
  if (d > day_start) {
    day_start = d;
    day = 0;
  }
  const int64_t m = budgetPeriodStart(BudgetPeriodSetting::kMonth, t_s);
  if (m > month_start) {
    month_start = m;
    month = 0;
  }
}

Int128 Budgets::Spend::spentIn(BudgetPeriodSetting period) const {
  switch (period) {
    case BudgetPeriodSetting::kDay: return day;
    case BudgetPeriodSetting::kMonth: return month;
    case BudgetPeriodSetting::kTotal: break;
  }
  return total;
}

// ------------------------------------------------------------------ open

Result<std::unique_ptr<Budgets>> Budgets::open(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s) {
  auto own = std::make_unique<LocalControlPlane>(db);
  ControlPlane& control = *own;
  return make(db, ledger, std::move(options), now_s, std::move(own), control);
}

Result<std::unique_ptr<Budgets>> Budgets::open(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s,
                                               ControlPlane& control) {
  return make(db, ledger, std::move(options), now_s, nullptr, control);
}

Result<std::unique_ptr<Budgets>> Budgets::make(BillingDb& db, Ledger& ledger, BudgetOptions options, int64_t now_s,
                                               std::unique_ptr<LocalControlPlane> own, ControlPlane& control) {
  std::unique_ptr<Budgets> budgets(new Budgets(db, std::move(options), std::move(own), control));
  LG_RETURN_IF_ERROR(budgets->load(ledger, now_s));
  ledger.addObserver(budgets.get());
  control.addApplier({std::string(kBudgetPrefix)}, budgets.get());
  return budgets;
}

Status Budgets::load(const Ledger& ledger, int64_t now_s) {
  Status parsed = Status::ok();
  LG_RETURN_IF_ERROR(db_.scan(kBudgetPrefix, [&](std::string_view key, std::string_view value) {
    const auto where = parseStoreKey(key);
    if (!where) {
      parsed = dataLoss("billing store: an unknown budget record " + std::string(key));
      return false;
    }
    auto b = parseBudget(value, std::string(key));
    if (!b.isOk()) {
      // Running without a budget someone set would let it be overspent.
      parsed = dataLoss("billing store: the budget record " + std::string(key) + " is corrupt: " + b.status().message());
      return false;
    }
    own_[static_cast<size_t>(where->first)].emplace(where->second, *b);
    return true;
  }));
  LG_RETURN_IF_ERROR(parsed);

  // What each key and team spent: all time, this month, today (the counters
  // are hourly by the entries' start, so the sums are exact per period).
  const int64_t day = budgetPeriodStart(BudgetPeriodSetting::kDay, now_s);
  const int64_t month = budgetPeriodStart(BudgetPeriodSetting::kMonth, now_s);
  for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
    SpendMap& spends = spend_[static_cast<size_t>(scope)];
    for (const auto& [from, slot] : {std::pair{int64_t{0}, 0}, std::pair{month, 1}, std::pair{day, 2}}) {
      UsageQuery q;
      q.group_by = scope == BudgetScope::kKey ? GroupBy::kKey : GroupBy::kTeam;
      q.from_s = from;
      q.to_s = now_s + 3600;  // through the current hour
      LG_ASSIGN_OR_RETURN(std::vector<UsageRow> rows, ledger.usage(q));
      for (const UsageRow& r : rows) {
        Spend& s = spends[r.group];
        s.roll(now_s);
        const Int128 cost = costTotal(r.counters);
        (slot == 0 ? s.total : slot == 1 ? s.month : s.day) = cost;
      }
    }
  }
  return Status::ok();
}

// -------------------------------------------------------------- budgets

const BudgetSetting& Budgets::effectiveLocked(BudgetScope scope, const std::string& id, bool* is_default) const {
  const auto& own = own_[static_cast<size_t>(scope)];
  if (auto it = own.find(id); it != own.end()) {
    if (is_default) *is_default = false;
    return it->second;
  }
  if (is_default) *is_default = true;
  return scope == BudgetScope::kKey ? options_.key_default : options_.team_default;
}

Budgets::Spend& Budgets::spendLocked(BudgetScope scope, const std::string& id, int64_t now_s) const {
  Spend& s = spend_[static_cast<size_t>(scope)][id];
  s.roll(now_s);
  return s;
}

BudgetStatus Budgets::statusLocked(BudgetScope scope, const BudgetSetting& b, const Spend& s, int64_t now_s) const {
  BudgetStatus st;
  st.scope = std::string(budgetScopeName(scope));
  st.period = std::string(budgetPeriodName(b.period));
  st.period_start_s = budgetPeriodStart(b.period, now_s);
  st.period_end_s = budgetPeriodEnd(b.period, now_s);
  st.limit = b.limit;
  st.soft_limit = b.soft_limit;
  st.spent = s.spentIn(b.period);
  st.reserved = s.reserved;
  return st;
}

std::variant<BudgetReservation, BudgetRefusal> Budgets::reserve(const Principal& who, int64_t amount, int64_t now_s) {
  amount = std::max<int64_t>(amount, 0);
  std::lock_guard lock(mu_);
  Spend& key_spend = spendLocked(BudgetScope::kKey, who.key_id, now_s);
  Spend& team_spend = spendLocked(BudgetScope::kTeam, who.team, now_s);
  for (auto [scope, spend] : {std::pair{BudgetScope::kKey, &key_spend}, std::pair{BudgetScope::kTeam, &team_spend}}) {
    const BudgetSetting& b = effectiveLocked(scope, scope == BudgetScope::kKey ? who.key_id : who.team);
    if (!b.enabled) continue;
    BudgetStatus st = statusLocked(scope, b, *spend, now_s);
    if (Int128{amount} > st.remaining()) {
      refusals_[static_cast<size_t>(scope)].fetch_add(1, std::memory_order_relaxed);
      return BudgetRefusal{std::move(st), amount};
    }
  }
  key_spend.reserved += amount;
  team_spend.reserved += amount;
  return BudgetReservation(this, "", who.key_id, who.team, amount);
}

void Budgets::releaseReservation(const BudgetReservation& r) {
  std::lock_guard lock(mu_);
  // Both exist: reserve() made them, and nothing erases a spend.
  spend_[0][r.keyId()].reserved -= r.amount();
  spend_[1][r.team()].reserved -= r.amount();
}

std::optional<Int128> Budgets::spentIn(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                                       int64_t start_s) const {
  std::lock_guard lock(mu_);
  const SpendMap& spends = spend_[static_cast<size_t>(scope)];
  Spend s;  // nothing recorded: nothing spent
  if (auto it = spends.find(id); it != spends.end()) s = it->second;
  s.roll(start_s);  // a later period than the one kept starts at zero
  const int64_t kept = period == BudgetPeriodSetting::kDay     ? s.day_start
                       : period == BudgetPeriodSetting::kMonth ? s.month_start
                                                               : 0;
  if (kept != start_s) return std::nullopt;
  return s.spentIn(period);
}

void Budgets::committed(const LedgerEntry& entry) {
  const int64_t cost = entry.cost.total();
  if (cost <= 0) return;
  const int64_t at_s = floorDiv(entry.start_us, 1'000'000);
  std::lock_guard lock(mu_);
  for (auto [scope, id] : {std::pair{BudgetScope::kKey, &entry.key_id}, std::pair{BudgetScope::kTeam, &entry.team}}) {
    Spend& s = spend_[static_cast<size_t>(scope)][*id];
    s.roll(at_s);
    s.total += cost;
    if (budgetPeriodStart(BudgetPeriodSetting::kDay, at_s) == s.day_start) s.day += cost;
    if (budgetPeriodStart(BudgetPeriodSetting::kMonth, at_s) == s.month_start) s.month += cost;
    checkSoftLimitLocked(scope, *id, s, at_s);
  }
}

void Budgets::checkSoftLimitLocked(BudgetScope scope, const std::string& id, Spend& s, int64_t at_s) {
  const BudgetSetting& b = effectiveLocked(scope, id);
  if (!b.enabled) return;
  const int64_t period_start = budgetPeriodStart(b.period, at_s);
  const int64_t current = b.period == BudgetPeriodSetting::kDay     ? s.day_start
                          : b.period == BudgetPeriodSetting::kMonth ? s.month_start
                                                                    : 0;
  // An entry of a period that has already ended changes nothing now.
  if (period_start != current || s.warned_start == period_start) return;
  const Int128 spent = s.spentIn(b.period);
  if (spent < Int128{b.soft_limit}) return;
  s.warned_start = period_start;
  soft_limit_reached_[static_cast<size_t>(scope)].fetch_add(1, std::memory_order_relaxed);
  billingLog()->warn("budget: {} {} reached its soft limit: spent ${} of ${} this {} (soft limit ${})",
                     budgetScopeName(scope), id, usd(spent), usd(b.limit), budgetPeriodName(b.period),
                     usd(b.soft_limit));
}

Status Budgets::set(BudgetScope scope, const std::string& id, const BudgetSetting& budget) {
  // The control plane serializes changes and applies this one (applyControl,
  // under mu_) before it returns; reserve() never waits for its write.
  return control_.update("setting a budget", [&](ControlTxn& txn) {
    txn.put(storeKey(scope, id), budgetToJson(budget));
    return Status::ok();
  });
}

Result<bool> Budgets::clear(BudgetScope scope, const std::string& id) {
  bool had = false;
  LG_RETURN_IF_ERROR(control_.update("clearing a budget", [&](ControlTxn& txn) -> Status {
    const std::string key = storeKey(scope, id);
    LG_ASSIGN_OR_RETURN(std::optional<std::string> current, txn.get(key));
    had = current.has_value();
    if (had) txn.erase(key);
    return Status::ok();
  }));
  return had;
}

void Budgets::applyControl(const std::vector<ControlRecord>& records) {
  std::lock_guard lock(mu_);
  for (const ControlRecord& r : records) {
    const auto where = parseStoreKey(r.key);
    if (!where) {
      billingLog()->error("control records: an unknown budget record {}; not applied", r.key);
      continue;
    }
    auto& own = own_[static_cast<size_t>(where->first)];
    if (!r.value) {
      own.erase(where->second);
      continue;
    }
    auto b = parseBudget(*r.value, r.key);
    if (!b.isOk()) {
      // Written through the same codec everywhere: only damage gets here.
      billingLog()->error("control records: the budget record {} is corrupt; not applied: {}", r.key,
                          b.status().message());
      continue;
    }
    own[where->second] = *b;
  }
}

Budgets::Assigned Budgets::effective(BudgetScope scope, const std::string& id) const {
  std::lock_guard lock(mu_);
  Assigned a{scope, id, {}, false};
  a.budget = effectiveLocked(scope, id, &a.is_default);
  return a;
}

std::vector<Budgets::Assigned> Budgets::assigned() const {
  std::lock_guard lock(mu_);
  std::vector<Assigned> out;
  for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
    for (const auto& [id, b] : own_[static_cast<size_t>(scope)]) out.push_back({scope, id, b, false});
  }
  return out;
}

std::optional<BudgetStatus> Budgets::statusOf(BudgetScope scope, const std::string& id, int64_t now_s) const {
  std::lock_guard lock(mu_);
  const BudgetSetting& b = effectiveLocked(scope, id);
  if (!b.enabled) return std::nullopt;
  const SpendMap& spends = spend_[static_cast<size_t>(scope)];
  Spend s;  // nothing recorded: nothing spent
  if (auto it = spends.find(id); it != spends.end()) s = it->second;
  s.roll(now_s);
  return statusLocked(scope, b, s, now_s);
}

std::optional<BudgetStatus> Budgets::budgetOf(const Principal& who, int64_t now_s) const {
  auto key = statusOf(BudgetScope::kKey, who.key_id, now_s);
  auto team = statusOf(BudgetScope::kTeam, who.team, now_s);
  if (key && team) return team->remaining() < key->remaining() ? team : key;
  return key ? key : team;
}

void Budgets::collect(metrics::ExpositionWriter& w) const {
  // Over every key and team with a budget of its own or any spending: how
  // many have a budget, how many reached its soft limit, and how many have
  // spent all of it.
  std::array<std::array<int64_t, 3>, 2> counts{};
  const int64_t now_s = unixSeconds();
  {
    std::lock_guard lock(mu_);
    for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
      const SpendMap& spends = spend_[static_cast<size_t>(scope)];
      std::set<std::string_view> ids;
      for (const auto& [id, spend] : spends) ids.insert(id);
      for (const auto& [id, budget] : own_[static_cast<size_t>(scope)]) ids.insert(id);
      for (std::string_view id : ids) {
        const BudgetSetting& b = effectiveLocked(scope, std::string(id));
        if (!b.enabled) continue;
        Spend s;
        if (auto it = spends.find(id); it != spends.end()) s = it->second;
        s.roll(now_s);
        const BudgetStatus st = statusLocked(scope, b, s, now_s);
        auto& c = counts[static_cast<size_t>(scope)];
        ++c[0];
        if (st.spent >= Int128{st.soft_limit}) ++c[1];
        if (st.spent >= Int128{st.limit}) ++c[2];
      }
    }
  }
  auto byScope = [&w](std::string_view name, std::string_view help, metrics::MetricType type, auto value) {
    if (!w.family(name, help, type)) return;
    for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
      w.sample(metrics::Labels{{"scope", std::string(budgetScopeName(scope))}}, value(static_cast<size_t>(scope)));
    }
  };
  byScope("latentgate_budget_refusals_total", "Requests refused with 429 insufficient_quota, by the budget that refused.",
          metrics::MetricType::kCounter, [&](size_t i) { return refusals_[i].load(std::memory_order_relaxed); });
  byScope("latentgate_budget_soft_limit_reached_total",
          "Times a key's or team's spending in a period reached its budget's soft limit (each logged once).",
          metrics::MetricType::kCounter, [&](size_t i) { return soft_limit_reached_[i].load(std::memory_order_relaxed); });
  byScope("latentgate_budgets", "Keys and teams with a budget (their own or the default) that have one set or have spent.",
          metrics::MetricType::kGauge,
          [&](size_t i) { return counts[i][0]; });
  byScope("latentgate_budgets_over_soft_limit", "Keys and teams whose spending this period reached the soft limit.",
          metrics::MetricType::kGauge, [&](size_t i) { return counts[i][1]; });
  byScope("latentgate_budgets_exhausted", "Keys and teams whose spending this period reached the limit.",
          metrics::MetricType::kGauge, [&](size_t i) { return counts[i][2]; });
}

}  // namespace lg::billing

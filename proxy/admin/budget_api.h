// BudgetApi: the admin API of budgets (billing/budgets.h, docs/billing.md).
//
// Admin key:
//   GET    /admin/budgets                  the defaults, and every key and team a budget applies to, with its state
//   GET    /admin/budgets/keys/ID          one key's budget (its own or the default) and its state
//   GET    /admin/budgets/teams/TEAM       one team's
//   PUT    /admin/budgets/keys/ID          {"limit": "25.00", "period": "day"|"month"|"total", "soft_limit": "20.00"}
//   PUT    /admin/budgets/teams/TEAM       (USD as exact decimal strings; "limit": null exempts it from the default)
//   DELETE /admin/budgets/keys/ID          back to the default (billing.key_budget)
//   DELETE /admin/budgets/teams/TEAM       back to billing.team_budget
//
// A change applies to requests admitted from then on; requests in flight
// keep the reservations they hold.
//
// The settings are Budgets'; the status (spent, reserved) is the view's:
// Budgets itself, or with limits.redis_url the replicas' shared counts
// (billing/redis/redis_budget_view.h), which a status names in "counted".
// Every route runs on the blocking pool: the view may ask Redis.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <memory>

#include <nlohmann/json_fwd.hpp>

#include "billing/budgets.h"
#include "billing/key_store.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"

namespace lg::proxy {

// A budget's state as the API shows it: {"scope", "period", "period_start",
// "period_end" (null: never), "limit", "soft_limit", "spent", "reserved",
// "remaining"}, amounts as exact decimal dollars, and with limits.redis_url
// "counted": where spent and reserved were counted (billing/budget_view.h,
// budgetCountedName: "shared", "records", "replica_ledger", "replica_only").
nlohmann::json budgetStatusJson(const billing::BudgetStatus& status);

class BudgetApi {
 public:
  // Everything must outlive the server. `view` shows the statuses; null:
  // `budgets`' own.
  BudgetApi(billing::Budgets& budgets, const billing::KeyStore& keys, const Admission& admission,
            const billing::BudgetView* view = nullptr)
      : budgets_(budgets), view_(view != nullptr ? *view : budgets), keys_(keys), admission_(admission) {}

  void addRoutes(Router& router) const;

 private:
  void list(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  // GET, PUT and DELETE of /admin/budgets/{keys|teams}/ID.
  void one(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  billing::Budgets& budgets_;
  const billing::BudgetView& view_;
  const billing::KeyStore& keys_;
  const Admission& admission_;
};

}  // namespace lg::proxy

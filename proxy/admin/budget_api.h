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
// Thread-safety: routes may run on every I/O thread at once.
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
// "remaining"}, amounts as exact decimal dollars.
nlohmann::json budgetStatusJson(const billing::BudgetStatus& status);

class BudgetApi {
 public:
  // Everything must outlive the server.
  BudgetApi(billing::Budgets& budgets, const billing::KeyStore& keys, const Admission& admission)
      : budgets_(budgets), keys_(keys), admission_(admission) {}

  void addRoutes(Router& router) const;

 private:
  void list(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  // GET, PUT and DELETE of /admin/budgets/{keys|teams}/ID.
  void one(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  billing::Budgets& budgets_;
  const billing::KeyStore& keys_;
  const Admission& admission_;
};

}  // namespace lg::proxy

// BillingApi: the HTTP side of billing/ (docs/billing.md, docs/gateway.md).
//
// Admin key:
//   PUT  /admin/pricing        {"prices": {...}, "effective_at": unix s | "RFC 3339" (default now)}
//   GET  /admin/pricing        the table in force and the history
//   GET  /admin/usage          ?group_by=key|team|model|system_prompt&from=&to=&granularity=hour|day
//                              &key_id=&team=   (JSON: {"data": [...], "totals": {...}})
//   GET  /admin/usage.csv      the same rows as CSV
//   GET  /admin/ledger         entries: ?request_id= | ?from=&to=&key_id=&team=&status=&limit=&after=
//   GET  /admin/ledger/verify  recomputes the counters from the entries
//   GET  /admin/ledger/stats   group-commit figures (commit latency, batch sizes)
// An API key, about itself:
//   GET  /v1/usage             its usage (?from=&to=&granularity=) and its budget (null without one)
//   GET  /user/balance         DeepSeek's shape
//
// Queries read RocksDB (point reads and range scans of the hourly counters:
// hours x groups rows; /admin/ledger and /admin/ledger/verify scan entries
// and are for operators, not hot paths), and PUT /admin/pricing waits for its
// fsync, so those routes run on the blocking pool (blocking_pool.h), not on
// an I/O thread.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <memory>

#include "billing/budget_view.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "proxy/router.h"
#include "proxy/usage_json.h"  // parseQuery, parseTimeParam; the JSON both this API and the dashboard show

namespace lg::proxy {

class BillingApi {
 public:
  // Everything must outlive the server. `budgets` null: none (the seam for
  // budgets, billing/budget_view.h).
  BillingApi(billing::Ledger& ledger, billing::PriceBook& prices, billing::KeyStore& keys,
             const billing::AdminKey& admin, const billing::BudgetView* budgets = nullptr);

  void addRoutes(Router& router);

 private:
  bool isAdmin(Exchange& exchange) const;  // answers 401 when not
  void putPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void getPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void usage(const HttpRequest& request, std::shared_ptr<Exchange> exchange, bool csv);
  void ledgerEntries(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void verify(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void stats(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void keyUsage(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void balance(const HttpRequest& request, std::shared_ptr<Exchange> exchange);

  billing::Ledger& ledger_;
  billing::PriceBook& prices_;
  billing::KeyStore& keys_;
  const billing::AdminKey& admin_;
  const billing::BudgetView* const budgets_;
};

}  // namespace lg::proxy

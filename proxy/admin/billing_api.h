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
// Usage, entries and verify read billing::LedgerReads (billing/ledger.h):
// this replica's RocksDB ledger, or with billing.postgres_url the ledger of
// record in PostgreSQL, so that every replica answers the same (entries
// reach it after the drain: docs/billing.md); PostgreSQL away is a 503
// (ledgerReadError). /admin/ledger/stats is this replica's group commit,
// read from its own ledger. Queries are point reads and range scans of the
// hourly counters (hours x groups rows; /admin/ledger and
// /admin/ledger/verify scan entries and are for operators, not hot paths),
// and PUT /admin/pricing waits for its fsync, so those routes run on the
// blocking pool (blocking_pool.h), not on an I/O thread.
//
// The budget in /v1/usage and /user/balance is the BudgetView's: this
// replica's Budgets, or with limits.redis_url the replicas' shared counts
// read from Redis (billing/redis/redis_budget_view.h), so those routes run on
// the blocking pool too. With Redis unreachable /v1/usage's budget is this
// replica's own count marked "counted": "replica_only", and /user/balance is
// 503 budget_store_unavailable (its shape has no room for the mark).
//
// Every route is registered through admission (proxy/gateway/admission.h):
// the admin key for /admin/, an API key for its own usage.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <memory>
#include <optional>

#include "billing/budget_view.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/rate_limiter.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"
#include "proxy/admin/usage_json.h"  // parseQuery, parseTimeParam; the JSON both this API and the dashboard show

namespace lg::proxy {

class BillingApi {
 public:
  // Everything must outlive the server. `reads` answers usage, entries and
  // verify; `local` is this replica's ledger, for its commit figures. The
  // same object without PostgreSQL. `budgets` null: none (the seam for
  // budgets, billing/budget_view.h).
  BillingApi(const billing::LedgerReads& reads, const billing::Ledger& local, billing::PriceBook& prices,
             const billing::KeyStore& keys, const Admission& admission, const billing::BudgetView* budgets = nullptr);

  void addRoutes(Router& router) const;
  // GET /v1/usage and /user/balance: at most `per_minute` a minute per API
  // key (0: unlimited; limits.key_usage_queries_per_minute), beyond which
  // 429 rate_limit_exceeded with Retry-After. Set before the server starts.
  void setKeyQueryLimit(int64_t per_minute);

 private:
  // The 429 to answer when the key is over its query limit; nothing when it may ask.
  std::optional<ApiError> overQueryLimit(const billing::Principal& who) const;

  void putPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void getPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void usageJson(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void usageCsv(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void usage(const HttpRequest& request, std::shared_ptr<Exchange> exchange, bool csv) const;
  void ledgerEntries(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void verify(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void stats(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void keyUsage(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who) const;
  void balance(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who) const;

  const billing::LedgerReads& reads_;
  const billing::Ledger& local_;  // /admin/ledger/stats only
  billing::PriceBook& prices_;
  const billing::KeyStore& keys_;  // names the keys in ledger entries
  const Admission& admission_;
  const billing::BudgetView* const budgets_;
  std::unique_ptr<billing::RateLimiter> query_limiter_;  // null: unlimited
};

}  // namespace lg::proxy

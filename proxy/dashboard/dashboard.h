// Dashboard: the cost dashboard at GET /dashboard (docs/dashboard.md).
//
//   GET    /dashboard                 the page (proxy/dashboard/, compiled into the binary)
//   GET    /dashboard/app.js, app.css, favicon.svg
//   POST   /dashboard/session         {"key": "<admin key or API key>"} -> a session cookie
//   GET    /dashboard/session         who the cookie signs in ({"viewer": null} when nobody)
//   DELETE /dashboard/session         signs out
//   GET    /dashboard/api/overview    ?range=24h|7d|30d (or from=&to=&granularity=): everything
//                                     the page shows, for the session's viewer (or a Bearer key)
//
// The admin sees every team and key, the memory picture and the teams'
// table; a team's key sees its own team (every key of it, the team lead's
// view) and nothing of any other team. The numbers come from the ledger's
// counters through the same queries, the same store (billing::LedgerReads:
// PostgreSQL's with billing.postgres_url, so every replica shows the same)
// and the same JSON (usage_json.h) as /admin/usage, so the page shows the
// usage API's strings; PostgreSQL away is the usage API's 503.
//
// Every response carries a Content-Security-Policy without inline script or
// style, nosniff, no referrer, no framing and Cache-Control: no-store. The
// key that signs in is in no URL, page, cookie or storage: the session is a
// random token (dashboard_sessions.h).
//
// Thread-safety: routes may run on every thread at once. The overview reads
// the ledger (hours x groups counters, and the newest entries: in RocksDB a
// reverse scan of at most `recent_max_examined`), so it runs on the blocking
// pool (blocking_pool.h), not on an I/O thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/budget_view.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/rate_limiter.h"
#include "cache/cache_stats.h"
#include "common/embedded_file.h"
#include "common/metrics.h"
#include "proxy/dashboard/dashboard_sessions.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/prefix_breakers.h"
#include "proxy/http/router.h"
#include "serving/scheduler_stats.h"
#include "serving/serving_metrics.h"

namespace lg::proxy {

struct DashboardOptions {
  int64_t session_ttl_s = 8 * 3600;
  size_t max_sessions = 1024;
  size_t max_sessions_per_key = 8;               // a key's oldest session goes first (dashboard_sessions.h)
  int64_t sign_in_failures_per_minute = 20;      // per client address; 0: unlimited
  int64_t sign_ins_per_key_per_minute = 10;      // per API key (the admin key is not throttled); 0: unlimited
  size_t recent_limit = 50;              // ledger entries in "recent"
  size_t recent_max_examined = 10'000;   // the reverse scan's bound (a team's entries among everyone's)
  size_t top_system_prompts = 20;
  // limits.redis_url: the per-minute limits are counted in Redis by every
  // replica together, and this replica's buckets (rate_limiter) are not the
  // ones admission uses; the keys' rows say so instead of showing them.
  bool rate_limits_shared = false;
  // Unix microseconds now; null: the system clock (tests move it to expire sessions).
  std::function<int64_t()> clock_us;
  // The model the gateway serves, as prices name it: the cache curves'
  // savings are priced at its rates in force now.
  std::string served_model;
};

// What the memory picture is read from: the same snapshots /metrics reads
// (serving::addEngineCollectors). `scheduler` null: no memory section.
struct DashboardMemorySources {
  const serving::SchedulerMetricsSource* scheduler = nullptr;
  const cache::CacheMetricsSource* cache = nullptr;  // null: no prefix cache
  serving::MemoryFacts facts;
};

class Dashboard {
 public:
  // Everything must outlive the server. `budgets` null: none ("no budget");
  // `rate_limiter` null: no limits shown.
  Dashboard(const billing::LedgerReads& ledger, const billing::KeyStore& keys, const Admission& admission,
            const billing::BudgetView* budgets, const billing::RateLimiter* rate_limiter,
            DashboardMemorySources memory, DashboardOptions options = {});

  void addRoutes(Router& router);
  // The prefix-breaker rows the overview shows (null: none); the admin sees
  // every team's, a team's key its team's. Set before the server starts.
  void setPrefixBreakers(const PrefixBreakers* breakers) { breakers_ = breakers; }

  // The overview's JSON for `viewer` over [from_s, to_s) by `granularity_s`
  // (3600 or 86400), `range` naming it ("24h", ..., "custom"); what GET
  // /dashboard/api/overview answers. Error: the store failed.
  Result<std::string> overviewJson(const DashboardViewer& viewer, std::string_view range, int64_t from_s, int64_t to_s,
                                   int64_t granularity_s) const;

  DashboardSessions& sessions() { return sessions_; }
  // Whether a request's session cookie names a live admin session: for the
  // blocking pool's lanes. Reads only memory.
  bool adminSession(const HttpRequest& request);
  // latentgate_dashboard_sign_in_refusals_total{reason}.
  void collect(metrics::ExpositionWriter& w) const;

 private:
  int64_t nowUs() const;
  // The viewer of a request: the admin key or an API key in its
  // Authorization header (Admission::identify), else the session cookie;
  // nullopt when it answered 401.
  std::optional<DashboardViewer> viewerOf(Exchange& exchange);
  // The token's session while it lasts and, for a team, while its key is not
  // revoked; otherwise nullopt and `why`, for the client.
  std::optional<DashboardSession> liveSession(std::string_view token, std::string& why);
  void asset(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const lg_embedded_file& file);
  void signIn(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void session(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void signOut(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void overview(const HttpRequest& request, std::shared_ptr<Exchange> exchange);

  const billing::LedgerReads& ledger_;
  const billing::KeyStore& keys_;  // the keys a team's overview lists; revoked keys end their sessions
  const Admission& admission_;
  const billing::BudgetView* const budgets_;
  const billing::RateLimiter* const rate_limiter_;
  const DashboardMemorySources memory_;
  const DashboardOptions options_;
  const PrefixBreakers* breakers_ = nullptr;
  DashboardSessions sessions_;
  SignInThrottle failures_by_address_;
  SignInThrottle sign_ins_by_key_;
  std::atomic<uint64_t> refused_address_{0}, refused_key_{0}, refused_table_{0};
};

// The headers of every dashboard response: the Content-Security-Policy,
// X-Content-Type-Options, Referrer-Policy, X-Frame-Options and
// Cache-Control: no-store, with `content_type`.
HttpHeaders dashboardHeaders(std::string_view content_type);

// The value of the cookie `name` in the request's Cookie header(s); nullopt
// when absent.
std::optional<std::string> cookieValue(const HttpHeaders& headers, std::string_view name);

// Tenant isolation, checked again on what a team's overview is built from
// (the queries already name the team): removes every item of another team
// and logs each at error. Returns how many were removed (0 unless a query
// is broken).
size_t dropOtherTeams(std::vector<billing::UsageRow>& rows, std::string_view team, std::string_view what);
size_t dropOtherTeams(std::vector<billing::LedgerEntry>& entries, std::string_view team, std::string_view what);
size_t dropOtherTeams(std::vector<billing::ApiKeyInfo>& keys, std::string_view team, std::string_view what);

}  // namespace lg::proxy

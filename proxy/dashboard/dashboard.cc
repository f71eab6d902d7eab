#include "proxy/dashboard/dashboard.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "billing/prices.h"
#include "common/unix_time.h"
#include "proxy/admin/budget_api.h"
#include "proxy/admin/cache_curves.h"
#include "proxy/admin/prefix_breakers_api.h"
#include "proxy/openai/api_error.h"
#include "proxy/openai/sse.h"  // jsonText
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/admin/usage_json.h"

// The page's files (proxy/dashboard/), compiled in by lg_embed_files.
extern "C" const lg_embedded_file lg_dashboard_assets[];

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr int64_t kUsPerS = 1'000'000;
constexpr std::string_view kCookie = "lg_dashboard";
constexpr size_t kMaxSignInBody = 8192;

// Scripts, styles, images and fetches from the gateway itself only: no
// inline script or style, no plugins, no <base>, forms post only here, and
// no page may frame this one.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

std::string_view contentTypeOf(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

void respondError(Exchange& exchange, const openai::ApiError& error) {
  HttpHeaders h = dashboardHeaders("application/json");
  h.remove("content-type");  // respondWithApiError sets its own
  respondWithApiError(exchange, error, std::move(h));
}

openai::ApiError unauthorized(std::string message) {
  openai::ApiError e = openai::invalidApiKey();
  e.message = std::move(message);
  return e;
}

std::string sessionCookie(std::string_view token, int64_t max_age_s) {
  return std::string(kCookie) + "=" + std::string(token) + "; HttpOnly; Secure; SameSite=Strict; Path=/dashboard; Max-Age=" +
         std::to_string(max_age_s);
}

json viewerJson(const DashboardViewer& v) {
  if (v.admin()) return json{{"role", "admin"}};
  return json{{"role", "team"}, {"team", v.team}, {"key_id", v.key_id}, {"key_name", v.key_name}};
}

json limitStateJson(const billing::RateLimitState& s) {
  if (s.limit <= 0) return nullptr;  // unlimited
  return json{{"limit", s.limit}, {"remaining", s.remaining}, {"reset_s", s.reset_s}};
}

// A budget as /v1/usage and /admin/budgets show it; null: none applies.
json budgetOrNull(const std::optional<billing::BudgetStatus>& b) { return b ? budgetStatusJson(*b) : json(nullptr); }

template <class T, class TeamOf>
size_t dropOthers(std::vector<T>& items, std::string_view team, std::string_view what, TeamOf team_of) {
  size_t dropped = 0;
  std::erase_if(items, [&](const T& item) {
    if (team_of(item) == team) return false;
    ++dropped;
    proxyLog()->error("dashboard: a {} of team '{}' reached team '{}''s overview and was dropped: a query ignores "
                      "its team filter",
                      what, team_of(item), team);
    return true;
  });
  return dropped;
}

// The origin's host[:port] ("https://127.0.0.1:8443" -> "127.0.0.1:8443").
std::string_view authorityOf(std::string_view origin) {
  const size_t scheme = origin.find("://");
  return scheme == std::string_view::npos ? origin : origin.substr(scheme + 3);
}

}  // namespace

HttpHeaders dashboardHeaders(std::string_view content_type) {
  HttpHeaders h{{"content-type", std::string(content_type)}};
  h.add("content-security-policy", std::string(kContentSecurityPolicy));
  h.add("x-content-type-options", "nosniff");
  h.add("referrer-policy", "no-referrer");
  h.add("x-frame-options", "DENY");
  h.add("cache-control", "no-store");
  return h;
}

std::optional<std::string> cookieValue(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [field, value] : headers.fields()) {
    if (!equalsIgnoreCase(field, "cookie")) continue;
    std::string_view rest = value;
    while (!rest.empty()) {
      const size_t semi = rest.find(';');
      std::string_view pair = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
      while (!pair.empty() && (pair.back() == ' ' || pair.back() == '\t')) pair.remove_suffix(1);
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
      std::string_view v = pair.substr(eq + 1);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return std::string(v);
    }
  }
  return std::nullopt;
}

size_t dropOtherTeams(std::vector<billing::UsageRow>& rows, std::string_view team, std::string_view what) {
  return dropOthers(rows, team, what, [](const billing::UsageRow& r) -> const std::string& { return r.team; });
}
size_t dropOtherTeams(std::vector<billing::LedgerEntry>& entries, std::string_view team, std::string_view what) {
  return dropOthers(entries, team, what, [](const billing::LedgerEntry& e) -> const std::string& { return e.team; });
}
size_t dropOtherTeams(std::vector<billing::ApiKeyInfo>& keys, std::string_view team, std::string_view what) {
  return dropOthers(keys, team, what, [](const billing::ApiKeyInfo& k) -> const std::string& { return k.team; });
}

Dashboard::Dashboard(const billing::LedgerReads& ledger, const billing::KeyStore& keys, const Admission& admission,
                     const billing::BudgetView* budgets, const billing::RateLimiter* rate_limiter,
                     DashboardMemorySources memory, DashboardOptions options)
    : ledger_(ledger),
      keys_(keys),
      admission_(admission),
      budgets_(budgets),
      rate_limiter_(rate_limiter),
      memory_(memory),
      options_(std::move(options)),
      sessions_(options_.max_sessions, options_.session_ttl_s * kUsPerS, options_.max_sessions_per_key),
      failures_by_address_(options_.sign_in_failures_per_minute),
      sign_ins_by_key_(options_.sign_ins_per_key_per_minute) {}

namespace {

// The peer's address without its port: a client's connections share one bucket.
std::string addressOf(const std::string& remote) {
  const size_t colon = remote.rfind(':');
  if (colon == std::string::npos || remote.find(']') != std::string::npos) {
    const size_t close = remote.rfind(']');
    return close == std::string::npos ? remote : remote.substr(0, close + 1);
  }
  return remote.substr(0, colon);
}

openai::ApiError tooManySignIns(std::string message, int64_t retry_after_s) {
  openai::ApiError e;
  e.http_status = 429;
  e.type = "rate_limit_error";
  e.code = "rate_limit_exceeded";
  e.message = std::move(message);
  e.retry_after_s = static_cast<int32_t>(retry_after_s);
  return e;
}

}  // namespace

bool Dashboard::adminSession(const HttpRequest& request) {
  const auto token = cookieValue(request.headers, kCookie);
  if (!token) return false;
  const auto session = sessions_.find(*token, nowUs());
  return session && session->viewer.admin();
}

void Dashboard::collect(metrics::ExpositionWriter& w) const {
  if (w.family("latentgate_dashboard_sign_in_refusals_total",
               "Dashboard sign-ins refused: too many failures from one address, too many sign-ins with one key, or a "
               "session table of admin sessions only.",
               metrics::MetricType::kCounter)) {
    w.sample({{"reason", "address_failures"}}, refused_address_.load());
    w.sample({{"reason", "key_sign_ins"}}, refused_key_.load());
    w.sample({{"reason", "table_full"}}, refused_table_.load());
  }
}

int64_t Dashboard::nowUs() const {
  return options_.clock_us ? options_.clock_us() : unixMicros();
}

void Dashboard::addRoutes(Router& router) {
  for (const lg_embedded_file* f = lg_dashboard_assets; f->name != nullptr; ++f) {
    const std::string name = f->name;
    auto serve = [this, f](const HttpRequest& r, std::shared_ptr<Exchange> e) { asset(r, std::move(e), *f); };
    if (name == "index.html") {
      router.add("GET", "/dashboard", serve);
      router.add("GET", "/dashboard/", serve);
    } else {
      router.add("GET", "/dashboard/" + name, serve);
    }
  }
  router.add("POST", "/dashboard/session", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { signIn(r, e); });
  router.add("GET", "/dashboard/session", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { session(r, e); });
  router.add("DELETE", "/dashboard/session", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { signOut(r, e); });
  router.add("GET", "/dashboard/api/overview", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { overview(r, e); },
             Runs::kBlocking);  // counters and a bounded reverse scan of the ledger
}

void Dashboard::asset(const HttpRequest&, std::shared_ptr<Exchange> exchange, const lg_embedded_file& file) {
  exchange->respond(200, dashboardHeaders(contentTypeOf(file.name)), std::string(embeddedBytes(file)));
}

// ------------------------------------------------------------------ sessions

void Dashboard::signIn(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  // A page elsewhere cannot sign a browser in here: a cross-origin fetch
  // names its origin, and a form cannot send JSON.
  if (auto origin = request.headers.get("origin")) {
    const auto host = request.headers.get("host");
    if (!host || authorityOf(*origin) != *host) {
      openai::ApiError e = openai::invalidRequest("", "cross_origin", "Sign in from the dashboard's own page.");
      e.http_status = 403;
      return respondError(*exchange, e);
    }
  }
  const auto content_type = request.headers.get("content-type");
  if (!content_type || !content_type->starts_with("application/json")) {
    openai::ApiError e = openai::invalidRequest("", "unsupported_media_type",
                                                R"(Send {"key": "<admin key or API key>"} as application/json.)");
    e.http_status = 415;
    return respondError(*exchange, e);
  }
  const json body = request.body.size() > kMaxSignInBody ? json(json::value_t::discarded)
                                                         : json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("key") || !body["key"].is_string() ||
      body.size() != 1) {
    return respondError(*exchange, openai::invalidJsonBody(R"(Expected {"key": "<admin key or API key>"}.)"));
  }
  const std::string& key = body["key"].get_ref<const std::string&>();
  if (key.empty()) return respondError(*exchange, openai::invalidRequest("key", "invalid_value", "`key` is empty."));
  // Failures are throttled per address before the key is even looked at,
  // so guessing stops at the bound; a right key is never counted, so a team
  // behind one NAT address is not throttled by signing in.
  const std::string address = addressOf(request.remote);
  const int64_t now = nowUs();
  if (!failures_by_address_.wouldAllow(address, now)) {
    refused_address_.fetch_add(1);
    proxyLog()->info("dashboard: a sign-in from {} refused: too many failed sign-ins", request.remote);
    return respondError(*exchange, tooManySignIns("Too many failed sign-ins from this address: wait a minute.",
                                                  failures_by_address_.take(address, now)));
  }
  DashboardViewer viewer;
  const Caller caller = admission_.identify(key);
  if (caller.kind == Caller::Kind::kAdmin) {
    viewer.role = DashboardViewer::Role::kAdmin;
  } else if (caller.kind == Caller::Kind::kKey) {
    viewer.role = DashboardViewer::Role::kTeam;
    viewer.key_id = caller.who.key_id;
    viewer.team = caller.who.team;
    viewer.key_name = caller.who.key_name;
  } else {
    failures_by_address_.take(address, now);
    proxyLog()->info("dashboard: a sign-in with an unknown key from {}", request.remote);
    return respondError(*exchange, unauthorized("Incorrect key: sign in with the admin key or an API key."));
  }
  // Sign-ins per API key: a key holder cannot churn the table (the admin,
  // who holds every power already, is not throttled).
  if (!viewer.admin()) {
    if (const int64_t wait_s = sign_ins_by_key_.take(viewer.key_id, now); wait_s > 0) {
      refused_key_.fetch_add(1);
      proxyLog()->info("dashboard: a sign-in with key {} from {} refused: too many sign-ins", viewer.key_id, request.remote);
      return respondError(*exchange, tooManySignIns("Too many sign-ins with this key: wait a minute.", wait_s));
    }
  }
  auto token = sessions_.create(viewer, now);
  if (!token.isOk() && token.status().code() == StatusCode::kResourceExhausted) {
    refused_table_.fetch_add(1);
    openai::ApiError e = openai::internalError();
    e.http_status = 503;
    e.type = "server_error";
    e.code = "server_overloaded";
    e.message = "Every dashboard session is in use: try again later.";
    e.retry_after_s = 60;
    return respondError(*exchange, e);
  }
  if (!token.isOk()) {
    proxyLog()->error("dashboard: {}", token.status().toString());
    return respondError(*exchange, openai::internalError());
  }
  proxyLog()->info("dashboard: signed in as {} from {}", viewer.admin() ? std::string("the admin")
                                                                        : "team " + viewer.team + " (" + viewer.key_id + ")",
                   request.remote);
  HttpHeaders h = dashboardHeaders("application/json");
  h.add("set-cookie", sessionCookie(*token, options_.session_ttl_s));
  exchange->respond(200, std::move(h),
                    openai::jsonText(json{{"object", "dashboard.session"},
                                {"viewer", viewerJson(viewer)},
                                {"expires_at", (now + sessions_.ttlUs()) / kUsPerS}}));
}

void Dashboard::signOut(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  const auto token = cookieValue(request.headers, kCookie);
  const bool removed = token && sessions_.remove(*token);
  HttpHeaders h = dashboardHeaders("application/json");
  h.add("set-cookie", sessionCookie("", 0));  // the browser forgets it either way
  exchange->respond(200, std::move(h), openai::jsonText(json{{"object", "dashboard.session"}, {"deleted", removed}}));
}

void Dashboard::session(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  // Who the cookie signs in, without a 401 when nobody: the page asks this first.
  const auto token = cookieValue(request.headers, kCookie);
  std::string why;
  auto found = token ? liveSession(*token, why) : std::nullopt;
  json out{{"object", "dashboard.session"}, {"viewer", nullptr}, {"expires_at", nullptr}};
  if (found) {
    out["viewer"] = viewerJson(found->viewer);
    out["expires_at"] = found->expires_us / kUsPerS;
  }
  exchange->respond(200, dashboardHeaders("application/json"), openai::jsonText(out));
}

std::optional<DashboardViewer> Dashboard::viewerOf(Exchange& exchange) {
  const HttpRequest& request = exchange.request();
  // Scripts: the admin key or an API key as a Bearer token, as the API takes them.
  if (request.headers.has("authorization")) {
    const Caller caller = admission_.identify(request);
    if (caller.kind == Caller::Kind::kAdmin) return DashboardViewer{};
    if (caller.kind == Caller::Kind::kKey) {
      return DashboardViewer{DashboardViewer::Role::kTeam, caller.who.key_id, caller.who.team, caller.who.key_name};
    }
    respondError(exchange, openai::invalidApiKey());
    return std::nullopt;
  }
  const auto token = cookieValue(request.headers, kCookie);
  if (!token || token->empty()) {
    respondError(exchange, unauthorized("Not signed in: sign in at /dashboard, or send the admin key or an API key "
                                        "as a Bearer token."));
    return std::nullopt;
  }
  std::string why;
  auto session = liveSession(*token, why);
  if (!session) {
    respondError(exchange, unauthorized(why));
    return std::nullopt;
  }
  return session->viewer;
}

std::optional<DashboardSession> Dashboard::liveSession(std::string_view token, std::string& why) {
  if (!DashboardSessions::wellFormed(token)) {
    why = "The dashboard session cookie is malformed: sign in again.";
    return std::nullopt;
  }
  auto session = sessions_.find(token, nowUs());
  if (!session) {
    why = "The dashboard session expired or was signed out: sign in again.";
    return std::nullopt;
  }
  if (!session->viewer.admin()) {
    // A revoked key ends the sessions it opened.
    const auto keys = keys_.list();
    const bool live = std::any_of(keys.begin(), keys.end(),
                                  [&](const billing::ApiKeyInfo& k) { return k.id == session->viewer.key_id; });
    if (!live) {
      sessions_.remove(token);
      why = "The API key this session signed in with was revoked: sign in again.";
      return std::nullopt;
    }
  }
  return session;
}

// ------------------------------------------------------------------ overview

void Dashboard::overview(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto viewer = viewerOf(*exchange);
  if (!viewer) return;
  const auto q = parseQuery(request.query);
  std::string range = q.contains("range") ? q.at("range") : "24h";
  int64_t from_s = 0, to_s = 0, granularity_s = 0;
  const int64_t now_s = nowUs() / kUsPerS;
  if (q.contains("from") || q.contains("to") || q.contains("granularity")) {
    billing::UsageQuery parsed;
    if (auto e = parseUsageRange(q, parsed)) return respondError(*exchange, *e);
    range = "custom";
    from_s = parsed.from_s;
    to_s = parsed.to_s;
    granularity_s = parsed.granularity_s != 0 ? parsed.granularity_s : to_s - from_s <= 2 * 86400 ? 3600 : 86400;
  } else if (range == "24h") {
    // The last 24 whole hours, this one included.
    granularity_s = 3600;
    to_s = (now_s / 3600 + 1) * 3600;
    from_s = to_s - 24 * 3600;
  } else if (range == "7d" || range == "30d") {
    // The last 7 or 30 UTC days, today included.
    granularity_s = 86400;
    to_s = (now_s / 86400 + 1) * 86400;
    from_s = to_s - (range == "7d" ? 7 : 30) * int64_t{86400};
  } else {
    return respondError(*exchange, openai::invalidRequest("range", "invalid_value", "`range` must be 24h, 7d or 30d."));
  }
  auto body = overviewJson(*viewer, range, from_s, to_s, granularity_s);
  if (!body.isOk()) return respondError(*exchange, ledgerReadError(ledger_, body.status(), "dashboard: overview"));
  exchange->respond(200, dashboardHeaders("application/json"), std::move(body).value());
}

Result<std::string> Dashboard::overviewJson(const DashboardViewer& viewer, std::string_view range, int64_t from_s,
                                            int64_t to_s, int64_t granularity_s) const {
  using billing::GroupBy;
  const bool admin = viewer.admin();
  const std::string team = admin ? "" : viewer.team;  // every query of a team's overview names it
  const int64_t now_us = nowUs();
  const int64_t now_s = now_us / kUsPerS;
  // A team whose id was reused after a deletion (issue 21, item 10) sees its
  // own generation only: the earlier owner's entries stay in the ledger for
  // the admin, marked deleted. The counters are hourly, so its view starts at
  // the first whole hour of its generation (an hour shared with the earlier
  // owner would mix both), and its recent entries at the generation's start.
  int64_t since_us = 0;
  if (!admin) {
    if (const std::optional<billing::TeamInfo> t = keys_.team(team); t && t->generation > 0) {
      since_us = t->since_us;
      from_s = std::max(from_s, (since_us / kUsPerS + 3599) / 3600 * 3600);
      to_s = std::max(to_s, from_s);
    }
  }

  billing::UsageQuery base;
  base.from_s = from_s;
  base.to_s = to_s;
  base.team = team;
  const auto queryOf = [&](GroupBy g, int64_t granularity) {
    billing::UsageQuery q = base;
    q.group_by = g;
    q.granularity_s = granularity;
    return q;
  };
  const auto rowsOf = [&](const billing::UsageQuery& q, std::string_view what) -> Result<std::vector<billing::UsageRow>> {
    LG_ASSIGN_OR_RETURN(std::vector<billing::UsageRow> rows, ledger_.usage(q));
    if (!admin) dropOtherTeams(rows, team, what);
    return rows;
  };

  // The keys the viewer may see: all, or its team's.
  std::vector<billing::ApiKeyInfo> keys = keys_.list();
  if (!admin) {
    std::erase_if(keys, [&](const billing::ApiKeyInfo& k) { return k.team != team; });
    dropOtherTeams(keys, team, "key");
  }
  KeyNames names;
  for (const billing::ApiKeyInfo& k : keys) names[k.id] = k.name;

  json out{{"object", "dashboard.overview"},
           {"viewer", viewerJson(viewer)},
           {"generated_at", now_s},
           {"range", range},
           {"from", usageFromS(base)},
           {"to", usageToS(base)},
           {"granularity", granularityJson(granularity_s)},
           {"currency", "USD"}};

  // Totals: /admin/usage?from=&to= (and &team= for a team).
  const billing::UsageQuery totals_q = queryOf(GroupBy::kNone, 0);
  LG_ASSIGN_OR_RETURN(auto totals_rows, rowsOf(totals_q, "total"));
  out["totals"] = countersJson(usageList(totals_rows, totals_q, names).totals);

  // Over time: ...&granularity=hour|day (periods without usage have no row).
  const billing::UsageQuery series_q = queryOf(GroupBy::kNone, granularity_s);
  LG_ASSIGN_OR_RETURN(auto series_rows, rowsOf(series_q, "period"));
  out["series"] = usageList(series_rows, series_q, names).data;

  // Keys: ...&group_by=key, then the visible keys without usage in the range
  // (zero rows), each with its budget and what its rate limits leave now.
  const billing::UsageQuery keys_q = queryOf(GroupBy::kKey, 0);
  LG_ASSIGN_OR_RETURN(auto key_rows, rowsOf(keys_q, "key row"));
  std::set<std::string> with_usage;
  for (const billing::UsageRow& r : key_rows) with_usage.insert(r.group);
  for (const billing::ApiKeyInfo& k : keys) {
    if (!with_usage.contains(k.id)) key_rows.push_back(billing::UsageRow{k.id, k.team, -1, {}});
  }
  std::sort(key_rows.begin(), key_rows.end(), [](const billing::UsageRow& a, const billing::UsageRow& b) {
    return std::make_tuple(billing::costTotal(b.counters), a.team, a.group) <
           std::make_tuple(billing::costTotal(a.counters), b.team, b.group);
  });
  std::map<std::string, const billing::ApiKeyInfo*> info;
  for (const billing::ApiKeyInfo& k : keys) info[k.id] = &k;
  // The live keys' budgets, all at once (with limits.redis_url, one round
  // trip to Redis rather than one per key).
  std::map<std::string, std::optional<billing::BudgetStatus>> key_budgets;
  if (budgets_ != nullptr) {
    std::vector<billing::Principal> live_keys;
    for (const billing::UsageRow& r : key_rows) {
      if (const auto it = info.find(r.group); it != info.end()) live_keys.push_back({r.group, r.team, it->second->name});
    }
    std::vector<std::optional<billing::BudgetStatus>> found = budgets_->budgetsOf(live_keys, now_s);
    for (size_t i = 0; i < live_keys.size(); ++i) key_budgets[live_keys[i].key_id] = std::move(found[i]);
  }
  json key_list = json::array();
  for (const billing::UsageRow& r : key_rows) {
    json row = usageRowJson(r, keys_q, names);
    const auto it = info.find(r.group);
    const bool live = it != info.end();
    row["revoked"] = !live;
    row["created"] = live ? json(it->second->created_unix) : json(nullptr);
    const auto budget = key_budgets.find(r.group);
    row["budget"] = budgetOrNull(live && budget != key_budgets.end() ? budget->second : std::nullopt);
    if (live && options_.rate_limits_shared) {
      row["rate_limits"] = json{{"shared", true}};
    } else if (live && rate_limiter_ != nullptr) {
      const billing::RateLimiter::Remaining left = rate_limiter_->peek(r.group, r.team);
      row["rate_limits"] = json{{"requests", limitStateJson(left.requests)}, {"tokens", limitStateJson(left.tokens)}};
    } else {
      row["rate_limits"] = nullptr;
    }
    key_list.push_back(std::move(row));
  }
  markDeletedTeams(key_list, keys_);  // as /admin/usage marks its rows
  out["keys"] = std::move(key_list);

  // Teams (the admin's): ...&group_by=team, and teams with keys but no usage.
  if (admin) {
    const billing::UsageQuery teams_q = queryOf(GroupBy::kTeam, 0);
    LG_ASSIGN_OR_RETURN(auto team_rows, rowsOf(teams_q, "team row"));
    std::set<std::string> teams_with_usage;
    for (const billing::UsageRow& r : team_rows) teams_with_usage.insert(r.group);
    for (const billing::ApiKeyInfo& k : keys) {
      if (teams_with_usage.insert(k.team).second) team_rows.push_back(billing::UsageRow{k.team, k.team, -1, {}});
    }
    std::map<std::string, int> key_counts;
    for (const billing::ApiKeyInfo& k : keys) ++key_counts[k.team];
    std::sort(team_rows.begin(), team_rows.end(), [](const billing::UsageRow& a, const billing::UsageRow& b) {
      return std::make_tuple(billing::costTotal(b.counters), a.group) <
             std::make_tuple(billing::costTotal(a.counters), b.group);
    });
    json team_list = json::array();
    for (const billing::UsageRow& r : team_rows) {
      json row = usageRowJson(r, teams_q, names);
      row["keys"] = key_counts[r.group];
      team_list.push_back(std::move(row));
    }
    markDeletedTeams(team_list, keys_);
    out["teams"] = std::move(team_list);
  }

  // System prompts: ...&group_by=system_prompt, the most saving first
  // (requests without one are not a prompt to rank).
  const billing::UsageQuery sp_q = queryOf(GroupBy::kSystemPrompt, 0);
  LG_ASSIGN_OR_RETURN(auto sp_rows, rowsOf(sp_q, "system prompt row"));
  std::erase_if(sp_rows, [](const billing::UsageRow& r) { return r.group.empty(); });
  std::sort(sp_rows.begin(), sp_rows.end(), [](const billing::UsageRow& a, const billing::UsageRow& b) {
    return std::make_tuple(billing::cacheSavings(b.counters), b.counters[billing::kRequests], a.team, a.group) <
           std::make_tuple(billing::cacheSavings(a.counters), a.counters[billing::kRequests], b.team, b.group);
  });
  out["system_prompt_count"] = sp_rows.size();
  if (sp_rows.size() > options_.top_system_prompts) sp_rows.resize(options_.top_system_prompts);
  json sp_list = usageList(sp_rows, sp_q, names).data;
  markDeletedTeams(sp_list, keys_);
  out["system_prompts"] = std::move(sp_list);

  // Prompts that break their own prefix (this replica's memory, not the
  // range): the admin's every team's, a team's its own.
  if (breakers_ != nullptr && breakers_->enabled()) {
    out["prefix_breakers"] = prefixBreakersJson(breakers_->report(team), keys_);
  }

  // Recent requests: the newest entries of the range (a bounded reverse scan).
  LG_ASSIGN_OR_RETURN(auto entries, ledger_.recentEntries(options_.recent_limit, team, from_s * kUsPerS, to_s * kUsPerS,
                                                          options_.recent_max_examined));
  if (!admin) dropOtherTeams(entries, team, "ledger entry");
  std::erase_if(entries, [&](const billing::LedgerEntry& e) { return e.start_us < since_us; });
  json recent = json::array();
  for (const billing::LedgerEntry& e : entries) {
    const auto name = names.find(e.key_id);
    recent.push_back(json{
        {"request_id", e.request_id},
        {"start_us", e.start_us},
        {"time", isoTime(e.start_us / kUsPerS)},
        {"key_id", e.key_id},
        {"key_name", name == names.end() ? json(nullptr) : json(name->second)},
        {"team", e.team},
        {"model", e.model},
        {"endpoint", e.endpoint},
        {"status", billing::entryStatusName(e.status)},
        {"finish_reason", e.finish_reason},
        {"system_prompt", e.system_prompt.empty() ? json(nullptr) : json(e.system_prompt)},
        {"prompt_tokens", e.prompt_tokens},
        {"prompt_cache_hit_tokens", e.hitTokens()},
        {"prompt_cache_hit_tokens_memory", e.hit_tokens_tier0},
        {"prompt_cache_hit_tokens_disk", e.hit_tokens_disk},
        {"prompt_cache_miss_tokens", e.miss_tokens},
        {"completion_tokens", e.output_tokens},
        {"ttft_ms", e.ttft_us >= 0 ? json(static_cast<double>(e.ttft_us) / 1000.0) : json(nullptr)},
        {"duration_ms", static_cast<double>(std::max<int64_t>(e.end_us - e.start_us, 0)) / 1000.0},
        {"cost_input_cache_hit", billing::usd(e.cost.input_cache_hit)},
        {"cost_input_cache_miss", billing::usd(e.cost.input_cache_miss)},
        {"cost_output", billing::usd(e.cost.output)},
        {"cost_total", billing::usd(e.cost.total())},
        {"miss", missAnatomyJson(e.miss)}});  // as GET /admin/ledger shows it
  }
  out["recent"] = std::move(recent);

  // Budgets (billing/budget_view.h) and the configured limits.
  out["budgets_enabled"] = budgets_ != nullptr;
  out["budget"] = !admin && budgets_ != nullptr
                      ? budgetOrNull(budgets_->budgetOf(billing::Principal{viewer.key_id, viewer.team, viewer.key_name}, now_s))
                      : json(nullptr);
  if (rate_limiter_ != nullptr) {
    const billing::RateLimitOptions& o = rate_limiter_->options();
    out["limits"] = json{{"per_key", {{"requests_per_minute", o.per_key.requests_per_minute},
                                      {"tokens_per_minute", o.per_key.tokens_per_minute}}},
                         {"per_team", {{"requests_per_minute", o.per_team.requests_per_minute},
                                       {"tokens_per_minute", o.per_team.tokens_per_minute}}}};
  } else {
    out["limits"] = nullptr;
  }

  // The memory picture (the admin's): the snapshots /metrics reads.
  if (admin && memory_.scheduler != nullptr) {
    const serving::SchedulerStats s = memory_.scheduler->schedulerStats();
    std::optional<cache::CacheStats> c;
    if (memory_.cache != nullptr) c = memory_.cache->snapshot();
    const serving::MemoryPicture m = serving::memoryPicture(memory_.facts, s, c ? &*c : nullptr);
    const auto b = static_cast<int64_t>(m.block_bytes);
    json disk = nullptr;
    if (m.has_disk_tier) {
      disk = json{{"blocks", m.disk_blocks}, {"bytes", m.disk_bytes}, {"occupied_bytes", m.disk_occupied_bytes},
                  {"state", cache::diskStateName(m.disk_state)}};
    }
    out["memory"] = json{
        {"weights_bytes", m.weights_bytes},
        {"latent_pool", {{"block_bytes", m.block_bytes},
                         {"capacity_blocks", m.capacity_blocks}, {"capacity_bytes", m.capacity_blocks * b},
                         {"running_blocks", m.running_blocks}, {"running_bytes", m.running_blocks * b},
                         {"cached_blocks", m.cached_blocks}, {"cached_bytes", m.cached_blocks * b},
                         {"free_blocks", m.free_blocks}, {"free_bytes", m.free_blocks * b},
                         {"reserved_blocks", m.reserved_blocks}}},
        {"disk_tier", disk},
        {"scheduler", {{"queued", s.queued}, {"looking_up", s.looking_up}, {"prefilling", s.prefilling},
                       {"decoding", s.decoding}}}};
  }
  // What more cache would buy (the admin's: a curve is every team's traffic
  // together), as GET /admin/cache/mrc answers it.
  if (admin && memory_.cache != nullptr) {
    // Priced as a request arriving now is (admission's system clock; the
    // options' clock is the sessions').
    json curves = json::parse(missRatioCurvesJson(memory_.cache->missRatioCurves(),
                                                  curvePricesAt(admission_, options_.served_model, unixMicros())));
    if (!curves["tiers"].empty()) {
      out["cache_curves"] = std::move(curves["tiers"]);
      out["cache_curve_prices"] = std::move(curves["prices"]);
    }
  }
  return openai::jsonText(out);
}

}  // namespace lg::proxy

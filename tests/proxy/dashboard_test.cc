// The cost dashboard (proxy/dashboard.h) through the real server over TLS:
// the generated CA, the real KeyStore, AdminKey, Ledger and BillingApi over a
// BillingDb in a temp dir (entries committed through the ledger, so the
// counters are the ones the gateway would have written), a real RateLimiter,
// and the memory picture from fixed SchedulerStats and CacheStats snapshots
// (the sources' interfaces; /metrics reads the same). Requests go through
// curl, as a browser's would (cookies in headers). Also the billing
// additions the dashboard relies on: the ledger's bounded reverse scan and
// the rate limiter's peek.
#include "proxy/dashboard.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/prompt_fingerprint.h"
#include "common/unix_time.h"
#include "proxy/billing_api.h"
#include "proxy/blocking_pool.h"
#include "proxy/http_server.h"
#include "proxy/tls_material.h"
#include "tests/proxy/curl_client.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int64_t kUs = 1'000'000;
constexpr const char* kSourceDir = LG_ASSETS_DIR "/..";

struct Reply : testing::CurlReply {
  json parsed() const { return json::parse(body, nullptr, false); }
};

// Fixed snapshots: what the memory picture must show.
class FixedScheduler : public serving::SchedulerMetricsSource {
 public:
  serving::SchedulerStats schedulerStats() const override {
    serving::SchedulerStats s;
    s.pool_blocks = 100;
    s.running_blocks = 10;
    s.cached_blocks = 30;
    s.pool_free_blocks = 60;
    s.reserved_blocks = 5;
    s.queued = 2;
    s.decoding = 1;
    return s;
  }
};
class FixedCache : public cache::CacheMetricsSource {
 public:
  cache::CacheStats snapshot() const override {
    cache::CacheStats s;
    s.disk_state = cache::DiskState::kOk;
    s.disk.blocks = 7;
    s.disk.bytes = 7 * 1000;
    s.disk_occupied_bytes = 9000;
    s.disk_error = "/secret/path/kv: should never be shown";
    return s;
  }
};

// A budget for team-a's keys only.
class TeamABudget : public billing::BudgetView {
 public:
  std::optional<billing::BudgetStatus> budgetOf(const billing::Principal& who, int64_t) const override {
    if (who.team != "team-a") return std::nullopt;
    billing::BudgetStatus s;
    s.scope = "team";
    s.period = "month";
    s.period_end_s = 1'800'000'000;
    s.limit = 5'000'000'000'000;  // $5
    s.spent = 1'000'000'000'000;
    s.reserved = 250'000'000;
    return s;
  }
};

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = billing::BillingDb::open(data_.path() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto keys = billing::KeyStore::open(*db_);
    ASSERT_TRUE(keys.isOk()) << keys.status().toString();
    keys_ = std::move(keys).value();
    auto admin = billing::AdminKey::loadOrCreate("", data_.path() + "/admin.key", nullptr);
    ASSERT_TRUE(admin.isOk()) << admin.status().toString();
    admin_ = std::move(admin).value();
    std::ifstream admin_file(data_.path() + "/admin.key");
    std::getline(admin_file, admin_key_);
    ASSERT_FALSE(admin_key_.empty());
    for (const auto& [team, name] : {std::pair{"team-a", "alice"}, {"team-a", "andy"}, {"team-b", "bob"},
                                     {"team-a", "idle-anna"}}) {
      auto created = keys_->create(team, name);
      ASSERT_TRUE(created.isOk()) << created.status().toString();
      ids_[name] = created->first.id;
      secrets_[name] = created->second;
    }
    auto prices = billing::PriceBook::open(*db_, billing::PriceTable{}, unixMicros());
    ASSERT_TRUE(prices.isOk()) << prices.status().toString();
    prices_ = std::move(prices).value();
    auto ledger = billing::Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk()) << ledger.status().toString();
    ledger_ = std::move(ledger).value();
    auto fingerprints = billing::SystemPromptFingerprinter::open(*db_);
    ASSERT_TRUE(fingerprints.isOk()) << fingerprints.status().toString();
    fingerprints_.emplace(std::move(fingerprints).value());

    // Usage: alice and andy (team-a) with prompt A, bob (team-b) with prompt
    // B; one of alice's two days ago (in 7d, not in 24h); a refused one.
    const int64_t now = unixMicros();
    commit("alice", kPromptA, now - 20 * 60 * kUs, 0, 900, 5);
    commit("alice", kPromptA, now - 10 * 60 * kUs, 896, 13, 4);
    commit("andy", kPromptA, now - 5 * 60 * kUs, 896, 20, 7);
    commit("alice", "", now - 3 * 60 * kUs, 0, 40, 3);
    commit("bob", kPromptB, now - 15 * 60 * kUs, 0, 850, 4);
    commit("bob", kPromptB, now - 2 * 60 * kUs, 832, 16, 4);
    commit("bob", kPromptB, now - 60 * kUs, 0, 30, 0, billing::EntryStatus::kRefused);
    commit("alice", kPromptA, now - 2 * 86400 * kUs, 512, 100, 9);

    billing::RateLimitOptions limits;
    // Small limits refill slowly (tokens 0.1/s, requests 0.05/s): what they
    // leave stays a whole number for the few seconds the test takes.
    limits.per_key = {3, 6};
    limits.per_team = {0, 50'000};
    limiter_ = std::make_unique<billing::RateLimiter>(limits);
    ASSERT_TRUE(limiter_->admit(ids_["alice"], "team-a", 3).allowed);

    TlsMaterialOptions to;
    to.dir = data_.path() + "/tls";
    auto tls = loadOrCreateTlsMaterial(to);
    ASSERT_TRUE(tls.isOk()) << tls.status().toString();
    tls_ = *tls;

    clock_us_ = now;
    DashboardOptions options;
    options.clock_us = [this] { return clock_us_.load(); };
    dashboard_ = std::make_unique<Dashboard>(*ledger_, *keys_, *admin_, &budgets_, limiter_.get(),
                                             DashboardMemorySources{&scheduler_, &cache_, serving::MemoryFacts{123'456, 1000}},
                                             options);
    billing_api_ = std::make_unique<BillingApi>(*ledger_, *prices_, *keys_, *admin_, &budgets_);
    router_.setBlockingPool(&blocking_pool_);
    dashboard_->addRoutes(router_);
    billing_api_->addRoutes(router_);

    HttpServerOptions server;
    server.host = "127.0.0.1";
    server.port = 0;
    server.cert_chain_pem = tls_.cert_chain_pem;
    server.key_pem = tls_.key_pem;
    server.io_threads = 2;
    auto started = HttpServer::start(server, router_.handler());
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    server_ = std::move(started).value();
  }

  void TearDown() override { server_.reset(); }

  void commit(const std::string& who, const std::string& prompt_text, int64_t start_us, int64_t hit, int64_t miss,
              int64_t output, billing::EntryStatus status = billing::EntryStatus::kCompleted) {
    billing::LedgerEntry e;
    e.request_id = "req_" + std::to_string(++entries_);
    e.response_id = "chatcmpl-" + std::to_string(entries_);
    e.key_id = ids_[who];
    e.team = who == "bob" ? "team-b" : "team-a";
    e.model = "demo";
    e.requested_model = "deepseek-chat";
    e.endpoint = "/v1/chat/completions";
    e.system_prompt =
        prompt_text.empty() ? "" : fingerprints_->fingerprint({{"system", prompt_text}});
    e.start_us = start_us;
    e.end_us = start_us + 40'000;
    e.ttft_us = 12'500;
    e.hit_tokens_tier0 = hit;
    e.miss_tokens = miss;
    e.prompt_tokens = hit + miss;
    e.output_tokens = output;
    e.prices = prices_->at("demo", start_us);
    e.status = status;
    e.finish_reason = status == billing::EntryStatus::kRefused ? "refused:queue_full" : "length";
    e.price();
    std::promise<Status> done;
    ledger_->commit(std::move(e), std::nullopt, [&](Status s) { done.set_value(std::move(s)); });
    Status s = done.get_future().get();
    ASSERT_TRUE(s.isOk()) << s.toString();
  }

  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra = {}) {
    Reply reply{testing::curlOverTls(tls_.ca_cert_path, server_->port(), method, path, extra, 60)};
    seen_ += reply.head + "\n" + reply.body + "\n";
    return reply;
  }
  Reply signIn(const std::string& body, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"-H", "content-type: application/json", "--data-binary", body});
    return curl("POST", "/dashboard/session", extra);
  }
  // Signs in with `key`; the session token from Set-Cookie.
  std::string sessionFor(const std::string& key) {
    const Reply r = signIn(json{{"key", key}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    const auto cookie = r.header("set-cookie");
    EXPECT_TRUE(cookie.has_value()) << r.head;
    if (!cookie) return "";
    const std::string prefix = "lg_dashboard=";
    EXPECT_EQ(cookie->rfind(prefix, 0), 0u) << *cookie;
    std::string token = cookie->substr(prefix.size(), cookie->find(';') - prefix.size());
    tokens_.push_back(token);
    return token;
  }
  Reply overview(const std::string& token, const std::string& query = "range=24h") {
    return curl("GET", "/dashboard/api/overview?" + query, {"-H", "Cookie: lg_dashboard=" + token});
  }
  json adminGet(const std::string& path) {
    const Reply r = curl("GET", path, {"-H", "Authorization: Bearer " + admin_key_});
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return r.parsed();
  }
  static void expectApiError(const Reply& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    const json e = r.parsed();
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["code"], code) << r.body;
    EXPECT_TRUE(e["error"]["message"].is_string() && !e["error"]["message"].get<std::string>().empty());
    EXPECT_FALSE(r.header("set-cookie").has_value()) << r.head;
    EXPECT_EQ(r.header("cache-control"), "no-store");
  }

  static constexpr const char* kPromptA = "You are team A's research agent.";
  static constexpr const char* kPromptB = "You are team B's support agent.";

  test::TempDir data_{"lg_dashboard"};
  std::unique_ptr<billing::BillingDb> db_;
  std::optional<billing::SystemPromptFingerprinter> fingerprints_;
  std::unique_ptr<billing::KeyStore> keys_;
  std::optional<billing::AdminKey> admin_;
  std::string admin_key_;
  std::map<std::string, std::string> ids_, secrets_;
  std::unique_ptr<billing::PriceBook> prices_;
  std::unique_ptr<billing::Ledger> ledger_;
  std::unique_ptr<billing::RateLimiter> limiter_;
  FixedScheduler scheduler_;
  FixedCache cache_;
  TeamABudget budgets_;
  std::atomic<int64_t> clock_us_{0};
  TlsMaterial tls_;
  std::unique_ptr<Dashboard> dashboard_;
  std::unique_ptr<BillingApi> billing_api_;
  BlockingPool blocking_pool_;  // as in `latentgate serve`: the admin routes run on it
  Router router_;
  std::unique_ptr<HttpServer> server_;
  int entries_ = 0;
  std::vector<std::string> tokens_;
  std::string seen_;  // every response's head and body, for the no-secrets check
};

std::string readSource(const std::string& relative) {
  std::ifstream in(std::string(kSourceDir) + "/" + relative, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void expectSecurityHeaders(const Reply& r, const std::string& what) {
  EXPECT_EQ(r.header("content-security-policy"),
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
            "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
      << what;
  EXPECT_EQ(r.header("x-content-type-options"), "nosniff") << what;
  EXPECT_EQ(r.header("referrer-policy"), "no-referrer") << what;
  EXPECT_EQ(r.header("x-frame-options"), "DENY") << what;
  EXPECT_EQ(r.header("cache-control"), "no-store") << what;
}

// ------------------------------------------------------------------ assets

TEST_F(DashboardTest, ThePageIsServedFromTheBinaryWithItsSecurityHeaders) {
  const std::pair<const char*, const char*> assets[] = {
      {"/dashboard", "text/html; charset=utf-8"},        {"/dashboard/", "text/html; charset=utf-8"},
      {"/dashboard/app.js", "text/javascript; charset=utf-8"}, {"/dashboard/app.css", "text/css; charset=utf-8"},
      {"/dashboard/favicon.svg", "image/svg+xml"}};
  for (const auto& [path, type] : assets) {
    const Reply r = curl("GET", path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.header("content-type"), type) << path;
    expectSecurityHeaders(r, path);
    // The bytes compiled in are the source files' (the build embeds them again when they change).
    std::string file = std::string(path) == "/dashboard" || std::string(path) == "/dashboard/"
                           ? "index.html" : std::string(path).substr(std::string("/dashboard/").size());
    EXPECT_EQ(r.body, readSource("proxy/dashboard/" + file)) << path;
  }
  // No inline script, style or event handler for the CSP to refuse.
  const std::string html = curl("GET", "/dashboard").body;
  std::smatch m;
  std::string rest = html;
  int scripts = 0;
  while (std::regex_search(rest, m, std::regex("<script([^>]*)>([^<]*)</script>", std::regex::icase))) {
    EXPECT_NE(m[1].str().find("src=\"/dashboard/"), std::string::npos) << m[0];
    EXPECT_EQ(m[2].str(), "") << "inline script: " << m[0];
    ++scripts;
    rest = m.suffix();
  }
  EXPECT_EQ(scripts, 1);
  EXPECT_EQ(html.find("<style"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex("\\sstyle\\s*=", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex("\\son[a-z]+\\s*=", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex("(src|href)=\"(https?:)?//", std::regex::icase)))
      << "the page loads nothing from elsewhere";
  // The form posts its key in the body, never as a query string.
  EXPECT_NE(html.find("<form id=\"signin-form\" data-testid=\"signin-form\" method=\"post\" action=\"/dashboard/session\""),
            std::string::npos);
  EXPECT_EQ(curl("GET", "/dashboard/nope").status, 404);
}

// ---------------------------------------------------------------- sessions

TEST_F(DashboardTest, TheAdminKeyAndATeamKeySignIn) {
  const Reply r = signIn(json{{"key", admin_key_}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  expectSecurityHeaders(r, "sign-in");
  const std::string cookie = r.header("set-cookie").value_or("");
  EXPECT_TRUE(std::regex_match(cookie, std::regex("lg_dashboard=[A-Za-z0-9_-]{43}; HttpOnly; Secure; SameSite=Strict; "
                                                  "Path=/dashboard; Max-Age=28800")))
      << cookie;
  EXPECT_EQ(r.parsed()["viewer"], json({{"role", "admin"}}));
  EXPECT_EQ(r.parsed()["expires_at"], clock_us_.load() / kUs + 8 * 3600);
  EXPECT_EQ(dashboard_->sessions().size(), 1u);
  const std::string admin_token = cookie.substr(13, 43);
  EXPECT_EQ(curl("GET", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + admin_token}).parsed()["viewer"]["role"],
            "admin");
  EXPECT_EQ(curl("GET", "/dashboard/session").parsed()["viewer"], nullptr);

  const json admin_view = overview(admin_token).parsed();
  EXPECT_EQ(admin_view["viewer"]["role"], "admin");
  EXPECT_TRUE(admin_view.contains("teams") && admin_view.contains("memory"));

  const std::string team_token = sessionFor(secrets_["alice"]);
  EXPECT_EQ(dashboard_->sessions().size(), 2u);
  const Reply tv = overview(team_token);
  ASSERT_EQ(tv.status, 200) << tv.body;
  const json team_view = tv.parsed();
  EXPECT_EQ(team_view["viewer"], json({{"role", "team"}, {"team", "team-a"}, {"key_id", ids_["alice"]}, {"key_name", "alice"}}));
  // The team lead's view: every key of the team, its idle one too.
  std::set<std::string> shown;
  for (const json& k : team_view["keys"]) shown.insert(k["key_id"]);
  EXPECT_EQ(shown, (std::set<std::string>{ids_["alice"], ids_["andy"], ids_["idle-anna"]}));
  EXPECT_FALSE(team_view.contains("teams"));
  EXPECT_FALSE(team_view.contains("memory"));
  // Scripts: the same with a Bearer key instead of the cookie.
  const Reply bearer = curl("GET", "/dashboard/api/overview?range=24h", {"-H", "Authorization: Bearer " + secrets_["alice"]});
  ASSERT_EQ(bearer.status, 200);
  json a = bearer.parsed(), b = team_view;
  for (json* o : {&a, &b}) {
    o->erase("generated_at");
    for (json& k : (*o)["keys"]) k.erase("rate_limits");  // reset_s moves with the clock
  }
  EXPECT_EQ(a, b);

  // Signing out ends the session, and the browser is told to forget the cookie.
  const Reply out = curl("DELETE", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + team_token});
  EXPECT_EQ(out.status, 200);
  EXPECT_EQ(out.parsed()["deleted"], true);
  EXPECT_EQ(out.header("set-cookie"), "lg_dashboard=; HttpOnly; Secure; SameSite=Strict; Path=/dashboard; Max-Age=0");
  expectApiError(overview(team_token), 401, "invalid_api_key");
  EXPECT_EQ(curl("DELETE", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + team_token}).parsed()["deleted"], false);
  EXPECT_EQ(dashboard_->sessions().size(), 1u);
  EXPECT_EQ(overview(admin_token).status, 200) << "another session is untouched";
}

TEST_F(DashboardTest, BadSignInsAreRefusedClearlyAndCreateNothing) {
  struct Case {
    std::string body;
    std::vector<std::string> headers;
    int status;
    std::string code;
  };
  const std::string port = std::to_string(server_->port());
  const std::vector<Case> cases = {
      {json{{"key", "lg-not-a-key-at-all"}}.dump(), {}, 401, "invalid_api_key"},
      {json{{"key", admin_key_ + "x"}}.dump(), {}, 401, "invalid_api_key"},
      {json{{"key", secrets_["alice"].substr(0, 20)}}.dump(), {}, 401, "invalid_api_key"},
      {json{{"key", ""}}.dump(), {}, 400, "invalid_value"},
      {"", {}, 400, "invalid_json"},
      {"{\"key\": ", {}, 400, "invalid_json"},
      {"[\"" + admin_key_ + "\"]", {}, 400, "invalid_json"},
      {"{\"key\": 5}", {}, 400, "invalid_json"},
      {"{}", {}, 400, "invalid_json"},
      {json{{"key", admin_key_}, {"remember", true}}.dump(), {}, 400, "invalid_json"},
      {json{{"key", std::string(9000, 'k')}}.dump(), {}, 400, "invalid_json"},
      {"key=" + admin_key_, {"-H", "content-type: application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
      {json{{"key", admin_key_}}.dump(), {"-H", "Origin: https://evil.example"}, 403, "cross_origin"},
      {json{{"key", admin_key_}}.dump(), {"-H", "Origin: https://127.0.0.1:1" + port}, 403, "cross_origin"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> extra = c.headers;
    if (c.headers.empty() || c.headers[1].rfind("Origin", 0) == 0) {
      extra.insert(extra.end(), {"-H", "content-type: application/json"});
    }
    extra.insert(extra.end(), {"--data-binary", c.body});
    const Reply r = curl("POST", "/dashboard/session", extra);
    SCOPED_TRACE(c.body.substr(0, 60));
    expectApiError(r, c.status, c.code);
    // The error names nothing the client sent.
    if (c.body.size() > 12) {
      EXPECT_EQ(r.body.find(c.body.substr(c.body.size() / 2, 8)), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(dashboard_->sessions().size(), 0u);
  // The page's own origin may sign in.
  const Reply ok = signIn(json{{"key", admin_key_}}.dump(), {"-H", "Origin: https://127.0.0.1:" + port});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(dashboard_->sessions().size(), 1u);
}

TEST_F(DashboardTest, MissingGarbageUnknownExpiredAndRevokedSessionsAre401) {
  const auto expect401 = [&](const Reply& r, const std::string& says) {
    expectApiError(r, 401, "invalid_api_key");
    EXPECT_NE(r.parsed()["error"]["message"].get<std::string>().find(says), std::string::npos) << r.body;
  };
  expect401(curl("GET", "/dashboard/api/overview"), "Not signed in");
  expect401(overview(""), "Not signed in");
  expect401(overview("garbage"), "malformed");
  expect401(overview(std::string(43, '*')), "malformed");
  expect401(overview(std::string(44, 'A')), "malformed");
  expect401(overview(std::string(43, 'A')), "expired or was signed out");
  expect401(curl("GET", "/dashboard/api/overview", {"-H", "Authorization: Bearer nope"}), "Incorrect API key");
  expect401(curl("GET", "/dashboard/api/overview", {"-H", "Authorization: " + admin_key_}), "Incorrect API key");

  const std::string token = sessionFor(admin_key_);
  EXPECT_EQ(overview(token).status, 200);
  // Another cookie beside it, quoted or not, does not confuse the lookup.
  EXPECT_EQ(curl("GET", "/dashboard/api/overview", {"-H", "Cookie: theme=dark; lg_dashboard=\"" + token + "\"; x=1"}).status,
            200);
  // 8 hours later the session is gone.
  clock_us_ += 8 * 3600 * kUs - kUs;
  EXPECT_EQ(overview(token).status, 200);
  clock_us_ += kUs;
  expect401(overview(token), "expired");
  EXPECT_EQ(dashboard_->sessions().size(), 0u);

  // A revoked key ends the sessions it opened.
  const std::string andy = sessionFor(secrets_["andy"]);
  EXPECT_EQ(overview(andy).status, 200);
  ASSERT_TRUE(keys_->revoke(ids_["andy"]).isOk());
  expect401(overview(andy), "revoked");
  EXPECT_EQ(dashboard_->sessions().size(), 0u);
}

TEST_F(DashboardTest, SessionsAreBoundedAndExpiredOnesGoFirst) {
  DashboardSessions sessions(3, 100);
  auto a = sessions.create(DashboardViewer{}, 0);
  auto b = sessions.create(DashboardViewer{}, 10);
  auto c = sessions.create(DashboardViewer{}, 20);
  ASSERT_TRUE(a.isOk() && b.isOk() && c.isOk());
  EXPECT_TRUE(DashboardSessions::wellFormed(*a));
  EXPECT_NE(*a, *b);
  auto d = sessions.create(DashboardViewer{}, 30);  // full: the oldest (a) goes
  EXPECT_EQ(sessions.size(), 3u);
  EXPECT_FALSE(sessions.find(*a, 30).has_value());
  EXPECT_TRUE(sessions.find(*b, 30).has_value());
  auto e = sessions.create(DashboardViewer{}, 115);  // b expired at 110: it goes, c stays
  EXPECT_FALSE(sessions.find(*b, 115).has_value());
  EXPECT_TRUE(sessions.find(*c, 115).has_value());
  EXPECT_TRUE(sessions.find(*d, 115).has_value());
  EXPECT_TRUE(sessions.find(*e, 115).has_value());
  EXPECT_FALSE(sessions.find(*e, 215).has_value());  // expired on lookup
  EXPECT_EQ(sessions.size(), 2u);
}

// ------------------------------------------------------------------- numbers

// The usage API's fields of a dashboard row (the dashboard adds its own).
json usageFields(json row) {
  for (const char* extra : {"revoked", "created", "budget", "rate_limits", "keys"}) row.erase(extra);
  return row;
}

TEST_F(DashboardTest, TheNumbersAreTheUsageApisForTheSameRange) {
  const std::string admin = sessionFor(admin_key_);
  for (const std::string range : {"24h", "7d", "30d"}) {
    SCOPED_TRACE(range);
    const json o = overview(admin, "range=" + range).parsed();
    const std::string span = "from=" + std::to_string(o["from"].get<int64_t>()) + "&to=" + std::to_string(o["to"].get<int64_t>());
    EXPECT_EQ(o["to"].get<int64_t>() - o["from"].get<int64_t>(), range == "24h" ? 86400 : range == "7d" ? 7 * 86400 : 30 * 86400);
    EXPECT_EQ(o["totals"], adminGet("/admin/usage?" + span)["totals"]);
    EXPECT_EQ(o["series"], adminGet("/admin/usage?" + span + "&granularity=" + o["granularity"].get<std::string>())["data"]);
    std::map<std::string, json> keys, teams, prompts;
    for (const json& k : o["keys"]) keys[k["key_id"]] = usageFields(k);
    for (const json& t : o["teams"]) teams[t["team"]] = usageFields(t);
    for (const json& p : o["system_prompts"]) prompts[p["system_prompt"]] = p;
    for (const json& row : adminGet("/admin/usage?" + span + "&group_by=key")["data"]) EXPECT_EQ(keys.at(row["key_id"]), row);
    for (const json& row : adminGet("/admin/usage?" + span + "&group_by=team")["data"]) EXPECT_EQ(teams.at(row["team"]), row);
    for (const json& row : adminGet("/admin/usage?" + span + "&group_by=system_prompt")["data"]) {
      if (!row["system_prompt"].is_null()) {
        EXPECT_EQ(prompts.at(row["system_prompt"]), row);
      }
    }
    // Keys without usage are listed with zeros.
    EXPECT_EQ(keys.at(ids_["idle-anna"])["requests"], 0);
    EXPECT_EQ(keys.at(ids_["idle-anna"])["cost_total"], "0");
  }
  // Two days ago: in the 7 days, not in the 24 hours.
  EXPECT_EQ(overview(admin, "range=24h").parsed()["totals"]["requests"], 7);
  EXPECT_EQ(overview(admin, "range=7d").parsed()["totals"]["requests"], 8);

  // A team's numbers are /admin/usage with its team.
  const json t = overview(sessionFor(secrets_["bob"])).parsed();
  const std::string span = "from=" + std::to_string(t["from"].get<int64_t>()) + "&to=" + std::to_string(t["to"].get<int64_t>());
  EXPECT_EQ(t["totals"], adminGet("/admin/usage?" + span + "&team=team-b")["totals"]);
  EXPECT_EQ(t["series"], adminGet("/admin/usage?" + span + "&team=team-b&granularity=hour")["data"]);
  EXPECT_EQ(usageFields(t["keys"][0]), adminGet("/admin/usage?" + span + "&team=team-b&group_by=key")["data"][0]);
  EXPECT_EQ(t["totals"]["requests"], 3);
  EXPECT_EQ(t["totals"]["refused_requests"], 1);

  // Custom ranges: from/to/granularity as /admin/usage takes them; bad ones are 400s.
  const json c = overview(admin, span + "&granularity=day").parsed();
  EXPECT_EQ(c["range"], "custom");
  EXPECT_EQ(c["granularity"], "day");
  EXPECT_EQ(c["totals"], adminGet("/admin/usage?" + span)["totals"]);
  expectApiError(overview(admin, "range=1y"), 400, "invalid_value");
  expectApiError(overview(admin, "from=yesterday"), 400, "invalid_value");
  expectApiError(overview(admin, "granularity=week"), 400, "invalid_value");
}

TEST_F(DashboardTest, ATeamSeesItsTeamOnlyAndTheAdminEverything) {
  const json a = overview(sessionFor(secrets_["alice"])).parsed();
  const std::string raw_b = overview(sessionFor(secrets_["bob"])).body;
  const std::string raw_a = a.dump();
  const std::string fp_a = fingerprints_->fingerprint({{"system", kPromptA}});
  const std::string fp_b = fingerprints_->fingerprint({{"system", kPromptB}});
  for (const std::string& other : {ids_["bob"], std::string("\"bob\""), std::string("team-b"), fp_b}) {
    EXPECT_EQ(raw_a.find(other), std::string::npos) << other;
  }
  for (const std::string& other : {ids_["alice"], ids_["andy"], ids_["idle-anna"], std::string("team-a"), fp_a}) {
    EXPECT_EQ(raw_b.find(other), std::string::npos) << other;
  }
  for (const char* section : {"keys", "system_prompts", "recent"}) {
    ASSERT_FALSE(a[section].empty()) << section;
    for (const json& row : a[section]) EXPECT_EQ(row["team"], "team-a") << section;
  }
  EXPECT_EQ(a["system_prompts"].size(), 1u);
  EXPECT_EQ(a["system_prompts"][0]["system_prompt"], fp_a);
  EXPECT_EQ(a["recent"].size(), 4u);  // alice's and andy's in the 24 hours
  // The team's budget (BudgetView) and each key's limits left (the limiter's peek).
  // /v1/usage's budget object (its fields beyond these may grow with budgets).
  const json want = {{"scope", "team"}, {"period", "month"}, {"period_end", 1800000000}, {"limit", "5"},
                     {"spent", "1"}, {"reserved", "0.00025"}, {"remaining", "3.99975"}};
  for (const auto& [field, value] : want.items()) EXPECT_EQ(a["budget"][field], value) << field;
  const Reply usage = curl("GET", "/v1/usage", {"-H", "Authorization: Bearer " + secrets_["alice"]});
  EXPECT_EQ(a["budget"], usage.parsed()["budget"]) << "the dashboard shows a budget as /v1/usage does";
  for (const json& k : a["keys"]) {
    EXPECT_EQ(k["budget"]["remaining"], "3.99975");
    EXPECT_EQ(k["rate_limits"]["requests"]["limit"], 3);
    EXPECT_EQ(k["rate_limits"]["requests"]["remaining"], k["key_id"] == ids_["alice"] ? 2 : 3);
    EXPECT_EQ(k["rate_limits"]["tokens"]["remaining"], k["key_id"] == ids_["alice"] ? 3 : 6);
  }
  EXPECT_EQ(json::parse(raw_b)["budget"], nullptr);
  EXPECT_EQ(a["budgets_enabled"], true);
  EXPECT_EQ(a["limits"], json::parse(R"({"per_key": {"requests_per_minute": 3, "tokens_per_minute": 6},
                                         "per_team": {"requests_per_minute": 0, "tokens_per_minute": 50000}})"));

  const json admin = overview(sessionFor(admin_key_)).parsed();
  std::set<std::string> teams, key_teams;
  for (const json& t : admin["teams"]) teams.insert(t["team"]);
  for (const json& k : admin["keys"]) key_teams.insert(k["team"]);
  EXPECT_EQ(teams, (std::set<std::string>{"team-a", "team-b"}));
  EXPECT_EQ(key_teams, teams);
  EXPECT_EQ(admin["keys"].size(), 4u);
  EXPECT_EQ(admin["system_prompts"].size(), 2u);
  EXPECT_EQ(admin["recent"].size(), 7u);
  // Newest first, with their TTFT and cost.
  EXPECT_EQ(admin["recent"][0]["status"], "refused");
  EXPECT_EQ(admin["recent"][0]["cost_total"], "0");
  EXPECT_EQ(admin["recent"][1]["ttft_ms"], 12.5);
  for (size_t i = 1; i < admin["recent"].size(); ++i) {
    EXPECT_GE(admin["recent"][i - 1]["start_us"].get<int64_t>(), admin["recent"][i]["start_us"].get<int64_t>());
  }
  // The memory picture: the snapshots as they are, the error text of the disk tier never.
  EXPECT_EQ(admin["memory"], json::parse(R"({
    "weights_bytes": 123456,
    "latent_pool": {"block_bytes": 1000, "capacity_blocks": 100, "capacity_bytes": 100000,
                    "running_blocks": 10, "running_bytes": 10000, "cached_blocks": 30, "cached_bytes": 30000,
                    "free_blocks": 60, "free_bytes": 60000, "reserved_blocks": 5},
    "disk_tier": {"blocks": 7, "bytes": 7000, "occupied_bytes": 9000, "state": "ok"},
    "scheduler": {"queued": 2, "looking_up": 0, "prefilling": 0, "decoding": 1}})"));
}

TEST_F(DashboardTest, NoSecretInAnyPageOrAnswer) {
  for (const char* path : {"/dashboard", "/dashboard/app.js", "/dashboard/app.css", "/dashboard/favicon.svg"}) curl("GET", path);
  const std::string admin = sessionFor(admin_key_);
  const std::string alice = sessionFor(secrets_["alice"]);
  for (const std::string range : {"24h", "7d"}) {
    overview(admin, "range=" + range);
    overview(alice, "range=" + range);
  }
  curl("GET", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + alice});
  curl("GET", "/dashboard/api/overview", {"-H", "Authorization: Bearer " + secrets_["bob"]});
  signIn(json{{"key", "lg-wrong"}}.dump());
  curl("DELETE", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + alice});
  // Keys never; session tokens only in the Set-Cookie that created them.
  std::string without_set_cookie;
  std::istringstream lines(seen_);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("set-cookie:", 0) != 0) without_set_cookie += line + "\n";
  }
  for (const std::string& secret : {admin_key_, secrets_["alice"], secrets_["andy"], secrets_["bob"], secrets_["idle-anna"]}) {
    EXPECT_EQ(seen_.find(secret), std::string::npos);
    EXPECT_EQ(seen_.find(secret.substr(0, 12)), std::string::npos) << "a prefix of a key";
  }
  for (const std::string& token : tokens_) EXPECT_EQ(without_set_cookie.find(token), std::string::npos);
  EXPECT_EQ(seen_.find("/secret/path"), std::string::npos);
  EXPECT_EQ(seen_.find("\"hint\":"), std::string::npos) << "no part of a key, not even /admin/keys' hint";
}

TEST_F(DashboardTest, WithoutBudgetsLimitsOrAnEngineTheirSectionsSayNone) {
  // As serve wires it today: no BudgetView yet; a process without a scheduler has no memory picture.
  Dashboard bare(*ledger_, *keys_, *admin_, nullptr, nullptr, DashboardMemorySources{});
  const int64_t now_s = unixMicros() / kUs;
  auto body = bare.overviewJson(DashboardViewer{}, "24h", now_s - 86400, now_s + 3600, 3600);
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  const json o = json::parse(*body);
  EXPECT_EQ(o["budget"], nullptr);
  EXPECT_EQ(o["budgets_enabled"], false);
  EXPECT_EQ(o["limits"], nullptr);
  EXPECT_FALSE(o.contains("memory"));
  ASSERT_EQ(o["keys"].size(), 4u);
  for (const json& k : o["keys"]) {
    EXPECT_EQ(k["budget"], nullptr);
    EXPECT_EQ(k["rate_limits"], nullptr);
  }
  EXPECT_EQ(o["totals"]["requests"], 7);
}

// ------------------------------------------------- the isolation check itself

TEST(DashboardIsolationTest, RowsOfAnotherTeamAreDroppedEvenIfAQueryLetThemThrough) {
  std::vector<billing::UsageRow> rows = {{"key_1", "team-a", -1, {}}, {"key_2", "team-b", -1, {}}, {"key_3", "team-a", -1, {}}};
  EXPECT_EQ(dropOtherTeams(rows, "team-a", "key row"), 1u);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].group, "key_1");
  EXPECT_EQ(rows[1].group, "key_3");
  std::vector<billing::LedgerEntry> entries(3);
  entries[0].team = "team-b";
  entries[1].team = "team-a";
  entries[2].team = "";
  EXPECT_EQ(dropOtherTeams(entries, "team-a", "ledger entry"), 2u);
  EXPECT_EQ(entries.size(), 1u);
  std::vector<billing::ApiKeyInfo> keys = {{"key_1", "team-a", "a", 0, ""}, {"key_2", "team-ab", "b", 0, ""}};
  EXPECT_EQ(dropOtherTeams(keys, "team-a", "key"), 1u);
  EXPECT_EQ(keys.size(), 1u);
}

TEST(DashboardCookieTest, TheSessionCookieIsFoundAmongOthers) {
  HttpHeaders h{{"cookie", "a=1; lg_dashboardx=no; lg_dashboard=yes"}, {"Cookie", "lg_dashboard=second"}};
  EXPECT_EQ(cookieValue(h, "lg_dashboard"), "yes");
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", "x=1"}}, "lg_dashboard"), std::nullopt);
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", " lg_dashboard = padded ;"}}, "lg_dashboard"), std::nullopt);
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", "lg_dashboard=\"q\""}}, "lg_dashboard"), "q");
}

// ------------------------------------- what the dashboard relies on in billing/

TEST(LedgerRecentEntriesTest, NewestFirstByTeamWithinTheRangeAndBoundedByWhatItReads) {
  test::TempDir dir("lg_dashboard_ledger");
  auto db = billing::BillingDb::open(dir.path() + "/billing");
  ASSERT_TRUE(db.isOk());
  auto ledger = billing::Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  constexpr int64_t kT0 = int64_t{1767225600} * kUs;
  std::atomic<int> committed = 0;
  for (int i = 0; i < 40; ++i) {
    billing::LedgerEntry e;
    e.request_id = "req_" + std::to_string(i);
    e.key_id = "key_" + std::to_string(i % 4);
    e.team = i % 4 == 3 ? "team-rare" : "team-busy";
    e.start_us = kT0 + i * kUs;
    (*ledger)->commit(std::move(e), std::nullopt, [&](Status s) { committed += s.isOk(); });
  }
  while (committed < 40) std::this_thread::sleep_for(1ms);
  auto all = (*ledger)->recentEntries(5, "", 0, kT0 + 100 * kUs);
  ASSERT_TRUE(all.isOk());
  ASSERT_EQ(all->size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*all)[i].request_id, "req_" + std::to_string(39 - i));
  // [from, to): the entry at `to` is not in it, the one at `from` is.
  auto ranged = (*ledger)->recentEntries(100, "", kT0 + 10 * kUs, kT0 + 20 * kUs);
  ASSERT_TRUE(ranged.isOk());
  ASSERT_EQ(ranged->size(), 10u);
  EXPECT_EQ(ranged->front().request_id, "req_19");
  EXPECT_EQ(ranged->back().request_id, "req_10");
  auto rare = (*ledger)->recentEntries(100, "team-rare", 0, kT0 + 100 * kUs);
  ASSERT_TRUE(rare.isOk());
  EXPECT_EQ(rare->size(), 10u);
  for (const billing::LedgerEntry& e : *rare) EXPECT_EQ(e.team, "team-rare");
  // Reading at most 8 entries finds the rare team's 2 among them.
  auto bounded = (*ledger)->recentEntries(100, "team-rare", 0, kT0 + 100 * kUs, 8);
  ASSERT_TRUE(bounded.isOk());
  EXPECT_EQ(bounded->size(), 2u);
  EXPECT_TRUE((*ledger)->recentEntries(0, "", 0, kT0 + 100 * kUs)->empty());
  EXPECT_TRUE((*ledger)->recentEntries(5, "", 0, kT0)->empty());
}

TEST(RateLimiterPeekTest, ShowsWhatAdmitWouldLeaveWithoutCharging) {
  billing::RateLimitOptions o;
  o.per_key = {60, 0};
  o.per_team = {0, 1'000};
  billing::RateLimiter limiter(o);
  const auto t0 = billing::RateLimiter::Clock::now();
  billing::RateLimiter::Remaining fresh = limiter.peek("k", "t", t0);
  EXPECT_EQ(fresh.requests.limit, 60);
  EXPECT_EQ(fresh.requests.remaining, 60);
  EXPECT_EQ(fresh.tokens.limit, 1'000);
  EXPECT_EQ(fresh.tokens.remaining, 1'000);
  billing::RateDecision d = limiter.admit("k", "t", 300, t0);
  ASSERT_TRUE(d.allowed);
  for (int i = 0; i < 3; ++i) {  // peeking charges nothing
    billing::RateLimiter::Remaining r = limiter.peek("k", "t", t0);
    EXPECT_EQ(r.requests.remaining, d.requests.remaining);
    EXPECT_EQ(r.tokens.remaining, d.tokens.remaining);
    EXPECT_EQ(r.tokens.remaining, 700);
  }
  EXPECT_EQ(limiter.peek("k2", "t", t0).tokens.remaining, 700) << "the team's bucket is shared";
  EXPECT_EQ(limiter.peek("k", "t", t0 + 2s).requests.remaining, 60) << "refilled one per second";
  billing::RateLimiter unlimited(billing::RateLimitOptions{});
  EXPECT_EQ(unlimited.peek("k", "t").requests.limit, 0);
}

}  // namespace
}  // namespace lg::proxy

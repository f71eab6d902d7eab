// The cost dashboard (proxy/dashboard/dashboard.h) through the whole server
// as `latentgate serve` builds it (the integration harness, harness.h), over
// TLS: entries committed through the server's own ledger (so the counters
// and budgets are the ones the gateway would have moved), a team budget set
// through its budgets, per-minute limits from the configuration, and the
// memory picture of its real scheduler and cache. Requests go through curl,
// as a browser's would (cookies in headers).
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

#include "billing/ledger.h"
#include "billing/prices.h"
#include "common/unix_time.h"
#include "proxy/admin/budget_api.h"
#include "proxy/admin/cache_curves.h"
#include "proxy/dashboard/dashboard.h"
#include "serving/serving_metrics.h"
#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int64_t kUs = 1'000'000;
constexpr const char* kSourceDir = LG_ASSETS_DIR "/..";

struct Reply : testing::CurlReply {
  json parsed() const { return json::parse(body, nullptr, false); }
};

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_us_ = unixMicros();
    test::HarnessOptions options;
    // Small limits refill slowly (tokens 0.1/s, requests 0.05/s): what they
    // leave stays a whole number for the few seconds the test takes.
    if (small_limits_) {
      options.config.limits.key_requests_per_minute = 3;
      options.config.limits.key_tokens_per_minute = 6;
      options.config.limits.team_tokens_per_minute = 50'000;
    }
    options.hooks.clock_us = [this] { return clock_us_.load(); };
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    admin_key_ = harness_->adminKey();
    for (const auto& [team, name] : {std::pair{"team-a", "alice"}, {"team-a", "andy"}, {"team-b", "bob"},
                                     {"team-a", "idle-anna"}}) {
      auto created = server().keys().create(team, name);
      ASSERT_TRUE(created.isOk()) << created.status().toString();
      ids_[name] = created->first.id;
      secrets_[name] = created->second;
    }
    // Team A spends against $5 in total.
    BudgetSetting budget;
    budget.enabled = true;
    budget.limit = 5'000'000'000'000;
    budget.period = BudgetPeriodSetting::kTotal;
    budget.soft_limit = budget.limit;
    ASSERT_TRUE(server().budgets().set(billing::BudgetScope::kTeam, "team-a", budget).isOk());

    // Usage: alice and andy (team-a) with prompt A, bob (team-b) with prompt
    // B; one of alice's two days ago (in 7d, not in 24h); a refused one.
    const int64_t now = clock_us_.load();
    // Each with its miss anatomy (why its miss tokens missed), but alice's
    // without a prompt and the refused one, as entries written before
    // anatomies were.
    using billing::MissCause;
    using billing::PromptRegion;
    commit("alice", kPromptA, now - 20 * 60 * kUs, 0, 900, 5, billing::EntryStatus::kCompleted,
           anatomy({{MissCause::kNew, 896}, {MissCause::kPartialBlock, 4}}, 0, 0, PromptRegion::kSystem));
    commit("alice", kPromptA, now - 10 * 60 * kUs, 896, 13, 4, billing::EntryStatus::kCompleted,
           anatomy({{MissCause::kPartialBlock, 13}}, 896, 2, PromptRegion::kInput));
    billing::MissAnatomy evicted = anatomy({{MissCause::kEvicted, 16}, {MissCause::kPartialBlock, 4}}, 896, 1,
                                           PromptRegion::kHistory);
    evicted.evicted_tier = "pool";
    evicted.evicted_ago_ms = 90'000;
    commit("andy", kPromptA, now - 5 * 60 * kUs, 896, 20, 7, billing::EntryStatus::kCompleted, evicted);
    commit("alice", "", now - 3 * 60 * kUs, 0, 40, 3);
    commit("bob", kPromptB, now - 15 * 60 * kUs, 0, 850, 4, billing::EntryStatus::kCompleted,
           anatomy({{MissCause::kNew, 848}, {MissCause::kPartialBlock, 2}}, 0, 0, PromptRegion::kSystem));
    commit("bob", kPromptB, now - 2 * 60 * kUs, 832, 16, 4, billing::EntryStatus::kCompleted,
           anatomy({{MissCause::kPartialBlock, 16}}, 832, 3, PromptRegion::kInput));
    commit("bob", kPromptB, now - 60 * kUs, 0, 30, 0, billing::EntryStatus::kRefused);
    commit("alice", kPromptA, now - 2 * 86400 * kUs, 512, 100, 9, billing::EntryStatus::kCompleted,
           anatomy({{MissCause::kModelChanged, 100}}, 512, 1, PromptRegion::kHistory));
    ASSERT_TRUE(server().rateLimiter().admit(ids_["alice"], "team-a", 3).allowed);
  }

  Server& server() { return harness_->server(); }
  std::string fingerprint(const std::string& team, const std::string& prompt) {
    return server().metering().systemPromptFingerprint(team, {{"system", prompt}});
  }

  // A miss anatomy whose first miss is the first cause's.
  static billing::MissAnatomy anatomy(std::vector<std::pair<billing::MissCause, int64_t>> tokens, int64_t first_token,
                                      int32_t first_message, billing::PromptRegion region) {
    billing::MissAnatomy m;
    for (const auto& [cause, n] : tokens) m.tokens_by_cause[static_cast<size_t>(cause)] = n;
    m.first_miss_token = first_token;
    m.first_miss_message = first_message;
    m.first_miss_region = region;
    m.first_miss_cause = tokens.front().first;
    return m;
  }

  void commit(const std::string& who, const std::string& prompt_text, int64_t start_us, int64_t hit, int64_t miss,
              int64_t output, billing::EntryStatus status = billing::EntryStatus::kCompleted,
              billing::MissAnatomy anatomy = {}) {
    billing::LedgerEntry e;
    e.request_id = "req_" + std::to_string(++entries_);
    e.response_id = "chatcmpl-" + std::to_string(entries_);
    e.key_id = ids_[who];
    e.team = who == "bob" ? "team-b" : "team-a";
    e.model = "demo";
    e.requested_model = "deepseek-chat";
    e.endpoint = "/v1/chat/completions";
    e.system_prompt =
        prompt_text.empty() ? "" : fingerprint(e.team, prompt_text);
    e.start_us = start_us;
    e.end_us = start_us + 40'000;
    e.ttft_us = 12'500;
    e.hit_tokens_tier0 = hit;
    e.miss_tokens = miss;
    e.prompt_tokens = hit + miss;
    e.output_tokens = output;
    e.prices = server().prices().at("demo", start_us);
    e.status = status;
    e.finish_reason = status == billing::EntryStatus::kRefused ? "refused:queue_full" : "length";
    e.miss = anatomy;
    e.price();
    std::promise<Status> done;
    if (e.team == "team-a") team_a_spent_ += e.cost.total();
    server().ledger().commit(std::move(e), std::nullopt, [&](Status s) { done.set_value(std::move(s)); });
    Status s = done.get_future().get();
    ASSERT_TRUE(s.isOk()) << s.toString();
  }

  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra = {}) {
    Reply reply{testing::curlOverTls(harness_->caFile(), harness_->port(), method, path, extra, 60)};
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

  bool small_limits_ = true;  // false: no per-minute limits (requests through the server)
  std::unique_ptr<test::Harness> harness_;
  std::string admin_key_;
  std::map<std::string, std::string> ids_, secrets_;
  std::atomic<int64_t> clock_us_{0};
  Int128 team_a_spent_ = 0;
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
  EXPECT_EQ(server().dashboardSessions().size(), 1u);
  const std::string admin_token = cookie.substr(13, 43);
  EXPECT_EQ(curl("GET", "/dashboard/session", {"-H", "Cookie: lg_dashboard=" + admin_token}).parsed()["viewer"]["role"],
            "admin");
  EXPECT_EQ(curl("GET", "/dashboard/session").parsed()["viewer"], nullptr);

  const json admin_view = overview(admin_token).parsed();
  EXPECT_EQ(admin_view["viewer"]["role"], "admin");
  EXPECT_TRUE(admin_view.contains("teams") && admin_view.contains("memory"));

  const std::string team_token = sessionFor(secrets_["alice"]);
  EXPECT_EQ(server().dashboardSessions().size(), 2u);
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
  EXPECT_EQ(server().dashboardSessions().size(), 1u);
  EXPECT_EQ(overview(admin_token).status, 200) << "another session is untouched";
}

TEST_F(DashboardTest, BadSignInsAreRefusedClearlyAndCreateNothing) {
  struct Case {
    std::string body;
    std::vector<std::string> headers;
    int status;
    std::string code;
  };
  const std::string port = std::to_string(harness_->port());
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
  EXPECT_EQ(server().dashboardSessions().size(), 0u);
  // The page's own origin may sign in.
  const Reply ok = signIn(json{{"key", admin_key_}}.dump(), {"-H", "Origin: https://127.0.0.1:" + port});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(server().dashboardSessions().size(), 1u);
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
  EXPECT_EQ(server().dashboardSessions().size(), 0u);

  // A revoked key ends the sessions it opened.
  const std::string andy = sessionFor(secrets_["andy"]);
  EXPECT_EQ(overview(andy).status, 200);
  ASSERT_TRUE(server().keys().revoke(ids_["andy"]).isOk());
  expect401(overview(andy), "revoked");
  EXPECT_EQ(server().dashboardSessions().size(), 0u);
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
  const std::string fp_a = fingerprint("team-a", kPromptA);
  const std::string fp_b = fingerprint("team-b", kPromptB);
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
  // The team's budget and each key's limits left (the limiter's peek), as
  // /v1/usage shows them: what the committed entries of team A cost.
  ASSERT_GT(team_a_spent_, 0);
  const std::string remaining = billing::usd(Int128{5'000'000'000'000} - team_a_spent_);
  const json want = {{"scope", "team"}, {"period", "total"}, {"period_end", nullptr}, {"limit", "5"},
                     {"spent", billing::usd(team_a_spent_)}, {"reserved", "0"}, {"remaining", remaining}};
  for (const auto& [field, value] : want.items()) EXPECT_EQ(a["budget"][field], value) << field;
  const Reply usage = curl("GET", "/v1/usage", {"-H", "Authorization: Bearer " + secrets_["alice"]});
  EXPECT_EQ(a["budget"], usage.parsed()["budget"]) << "the dashboard shows a budget as /v1/usage does";
  for (const json& k : a["keys"]) {
    EXPECT_EQ(k["budget"]["remaining"], remaining);
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
  // The memory picture: the server's own scheduler and cache, as /metrics reads them.
  const serving::SchedulerStats st = server().scheduler().schedulerStats();
  const engine::Backend& backend = harness_->backend();
  const uint64_t block = backend.latentLayout().blockBytes();
  const json m = admin["memory"];
  EXPECT_EQ(m["weights_bytes"], backend.model().checkpointBytes());
  EXPECT_EQ(m["latent_pool"]["block_bytes"], block);
  EXPECT_EQ(m["latent_pool"]["capacity_blocks"], 256);
  EXPECT_EQ(m["latent_pool"]["capacity_bytes"], 256 * block);
  EXPECT_EQ(m["latent_pool"]["running_blocks"], 0);
  EXPECT_EQ(m["latent_pool"]["cached_blocks"].get<int64_t>() + m["latent_pool"]["free_blocks"].get<int64_t>(), 256);
  EXPECT_EQ(m["latent_pool"]["free_blocks"], st.pool_free_blocks);
  EXPECT_EQ(m["disk_tier"], nullptr);  // tier 0 only
  EXPECT_EQ(m["scheduler"], json::parse(R"({"queued": 0, "looking_up": 0, "prefilling": 0, "decoding": 0})"));
}

// Why requests missed (issue 25, point 1): the entries' anatomies in every
// usage row (by cause, by the region of the first miss), pivoted by
// group_by=miss_cause under the usage API's filters, in the CSV export, the
// ledger route and the dashboard's recent requests.
TEST_F(DashboardTest, MissAnatomiesReachTheUsageRowsTheLedgerAndTheOverview) {
  const json o = overview(sessionFor(secrets_["alice"])).parsed();
  const std::string span = "from=" + std::to_string(o["from"].get<int64_t>()) + "&to=" + std::to_string(o["to"].get<int64_t>());
  // Team A in the 24 hours: alice's two with prompt A and andy's (alice's
  // without a prompt has no anatomy and counts in no cause).
  EXPECT_EQ(o["totals"]["miss_tokens_by_cause"],
            json::parse(R"({"new": 896, "evicted": 16, "model_changed": 0, "in_flight": 0, "recomputed": 0,
                            "partial_block": 21, "uncached": 0})"));
  EXPECT_EQ(o["totals"]["miss_tokens_by_first_region"],
            json::parse(R"({"system": 900, "tools": 0, "history": 20, "input": 13})"));
  EXPECT_EQ(o["totals"]["prompt_cache_miss_tokens"], 973);  // 40 of them without an anatomy
  for (const json& k : o["keys"]) {
    if (k["key_id"] == ids_["andy"]) {
      EXPECT_EQ(k["miss_tokens_by_cause"]["evicted"], 16);
    }
  }
  ASSERT_EQ(o["system_prompts"].size(), 1u);
  EXPECT_EQ(o["system_prompts"][0]["miss_tokens_by_cause"]["new"], 896);

  // group_by=miss_cause: a row per cause, every cause, in the enum's order,
  // each with its share of the miss tokens that have a cause (933).
  const json by_cause = adminGet("/admin/usage?" + span + "&team=team-a&group_by=miss_cause");
  EXPECT_EQ(by_cause["group_by"], "miss_cause");
  ASSERT_EQ(by_cause["data"].size(), billing::kMissCauses);
  EXPECT_EQ(by_cause["data"][0], json::parse(R"({"miss_cause": "new", "prompt_cache_miss_tokens": 896, "share": 0.9603})"));
  EXPECT_EQ(by_cause["data"][1], json::parse(R"({"miss_cause": "evicted", "prompt_cache_miss_tokens": 16, "share": 0.0171})"));
  EXPECT_EQ(by_cause["data"][5]["miss_cause"], "partial_block");
  EXPECT_EQ(by_cause["data"][5]["share"], 0.0225);
  EXPECT_EQ(by_cause["data"][6], json::parse(R"({"miss_cause": "uncached", "prompt_cache_miss_tokens": 0, "share": 0.0})"));
  EXPECT_EQ(by_cause["totals"], o["totals"]);
  // A key's rows (andy: 16 evicted, 4 in the last block).
  const json andy = adminGet("/admin/usage?" + span + "&key_id=" + ids_["andy"] + "&group_by=miss_cause");
  EXPECT_EQ(andy["data"][1]["share"], 0.8);
  EXPECT_EQ(andy["data"][5]["share"], 0.2);
  // A system prompt's rows: team B's prompt, and bob's refused entry (no anatomy) counts in none.
  const std::string fp_b = fingerprint("team-b", kPromptB);
  const json prompt_b = adminGet("/admin/usage?" + span + "&system_prompt=" + fp_b + "&group_by=miss_cause");
  EXPECT_EQ(prompt_b["data"][0]["prompt_cache_miss_tokens"], 848);
  EXPECT_EQ(prompt_b["data"][5]["prompt_cache_miss_tokens"], 18);
  EXPECT_EQ(prompt_b["totals"]["prompt_cache_miss_tokens"], 896);
  EXPECT_EQ(adminGet("/admin/usage?" + span + "&system_prompt=" + fp_b)["totals"], prompt_b["totals"]);
  const Reply keyed = curl("GET", "/admin/usage?system_prompt=" + fp_b + "&key_id=" + ids_["bob"],
                           {"-H", "Authorization: Bearer " + admin_key_});
  EXPECT_EQ(keyed.status, 400) << keyed.body;
  EXPECT_EQ(keyed.parsed()["error"]["param"], "system_prompt") << keyed.body;
  // With a granularity: the seven causes of each period, periods in order.
  const json weekly = adminGet("/admin/usage?from=0&team=team-a&group_by=miss_cause&granularity=day");
  ASSERT_EQ(weekly["data"].size() % billing::kMissCauses, 0u);
  ASSERT_GE(weekly["data"].size(), 2 * billing::kMissCauses);  // two days ago, and the last 24 hours
  EXPECT_EQ(weekly["data"][2]["miss_cause"], "model_changed");
  EXPECT_EQ(weekly["data"][2]["share"], 1.0);
  EXPECT_LT(weekly["data"][0]["period_start"].get<int64_t>(),
            weekly["data"][billing::kMissCauses]["period_start"].get<int64_t>());

  // The CSV export: the columns it had, then the miss counters flattened.
  const Reply csv = curl("GET", "/admin/usage.csv?" + span + "&group_by=team", {"-H", "Authorization: Bearer " + admin_key_});
  ASSERT_EQ(csv.status, 200) << csv.body;
  const std::string header = csv.body.substr(0, csv.body.find("\r\n"));
  EXPECT_EQ(header.rfind("team,requests,", 0), 0u) << header;
  EXPECT_NE(header.find(",cost_total,cache_savings,miss_tokens_by_cause_new,miss_tokens_by_cause_evicted,"), std::string::npos)
      << header;
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "miss_tokens_by_first_region_input");
  const std::string team_a_row = csv.body.substr(csv.body.find("\r\nteam-a,") + 2);
  EXPECT_NE(team_a_row.substr(0, team_a_row.find("\r\n")).find(",896,16,0,0,0,21,0,900,0,20,13"), std::string::npos)
      << team_a_row;

  // The ledger route and the dashboard's recent requests: each entry's anatomy, null without one.
  const json evicted = adminGet("/admin/ledger?request_id=req_3")["data"][0]["miss"];
  EXPECT_EQ(evicted["first_miss_cause"], "evicted");
  EXPECT_EQ(evicted["first_miss_token"], 896);
  EXPECT_EQ(evicted["first_miss_message"], 1);
  EXPECT_EQ(evicted["first_miss_region"], "history");
  EXPECT_EQ(evicted["evicted_tier"], "pool");
  EXPECT_EQ(evicted["evicted_ago_ms"], 90'000);
  EXPECT_EQ(evicted["tokens_by_cause"]["evicted"], 16);
  EXPECT_EQ(evicted["tokens_by_cause"]["in_flight"], 0);
  EXPECT_TRUE(adminGet("/admin/ledger?request_id=req_4")["data"][0]["miss"].is_null());
  std::map<std::string, json> recent;
  for (const json& r : o["recent"]) recent[r["request_id"]] = r["miss"];
  EXPECT_EQ(recent.at("req_3"), evicted);
  EXPECT_TRUE(recent.at("req_4").is_null());
  EXPECT_FALSE(recent.at("req_1").contains("evicted_tier"));
}

// What more cache would buy (issue 25, point 2): real requests reach the
// cache's miss-ratio curves; GET /admin/cache/mrc, the admin's overview and
// /metrics show them; a team key sees none of it (the curve is every team's
// traffic together).
class DashboardCurvesTest : public DashboardTest {
 protected:
  DashboardCurvesTest() { small_limits_ = false; }
};

TEST_F(DashboardCurvesTest, CacheCurvesAreTheAdminsOnly) {
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  const json body = {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", prompt}}}}, {"max_tokens", 2}};
  for (int i = 0; i < 2; ++i) {
    const Reply r = curl("POST", "/v1/chat/completions",
                         {"-H", "Authorization: Bearer " + secrets_["alice"], "-H", "content-type: application/json",
                          "--data-binary", body.dump()});
    ASSERT_EQ(r.status, 200) << r.body;
  }
  const json mrc = adminGet("/admin/cache/mrc");
  EXPECT_EQ(mrc["object"], "cache.miss_ratio_curves");
  ASSERT_EQ(mrc["tiers"].size(), 1u) << mrc.dump();  // tier 0 only: the harness has no disk tier
  const json& t0 = mrc["tiers"][0];
  EXPECT_EQ(t0["tier"], "tier0");
  EXPECT_EQ(t0["size_blocks"], 256);  // the pool
  const uint64_t block = harness_->backend().latentLayout().blockBytes();
  EXPECT_EQ(t0["block_bytes"], block);
  EXPECT_EQ(t0["size_bytes"], 256 * block);
  EXPECT_EQ(t0["sampling_rate"], 1.0);  // per tier: 1024 / 256 blocks, at most 1
  EXPECT_GT(t0["accesses"].get<int64_t>(), 0);
  EXPECT_EQ(t0["accesses"], t0["sampled_accesses"]);
  // The second request hit what the first computed: at today's size the
  // curve says half the accesses hit.
  EXPECT_DOUBLE_EQ(t0["hit_ratio_today"].get<double>(), 0.5);
  ASSERT_EQ(t0["points"].size(), 33u);
  EXPECT_EQ(t0["points"][16]["size_factor"], 1.0);
  EXPECT_EQ(t0["points"][16]["blocks"], 256);
  EXPECT_EQ(t0["points"][16]["bytes"], 256 * block);
  // What each size is worth: the served model at its rates now. The
  // prompt's blocks fit in 1/16x today's size, so every size hits the same
  // half and none is worth a token or a dollar more; the day is extrapolated
  // from seconds, so no saving is reliable.
  EXPECT_EQ(mrc["prices"]["model"], "demo");
  const billing::Rates now = server().prices().at("demo", unixMicros()).rates;
  EXPECT_EQ(mrc["prices"]["rates"]["input_cache_hit"], now.input_cache_hit);
  EXPECT_EQ(mrc["prices"]["rates"]["input_cache_miss"], now.input_cache_miss);
  EXPECT_EQ(t0["block_tokens"], harness_->backend().latentLayout().block_tokens);
  const double counted_seconds = t0["counted_seconds"].get<double>();
  ASSERT_GT(counted_seconds, 0);
  EXPECT_LT(counted_seconds, kMinCountedMsForSavings / 1000);
  EXPECT_NEAR(t0["accesses_per_day"].get<double>(), t0["accesses"].get<double>() * 86'400 / counted_seconds,
              t0["accesses_per_day"].get<double>() * 1e-9 + 1);
  for (const json& p : t0["points"]) {
    EXPECT_EQ(p["extra_hit_tokens_per_day"], 0) << p.dump();
    EXPECT_EQ(p["savings_per_day"], "0") << p.dump();
    EXPECT_EQ(p["savings_reliable"], false) << p.dump();
  }

  // Admin key only.
  EXPECT_EQ(curl("GET", "/admin/cache/mrc", {"-H", "Authorization: Bearer " + secrets_["alice"]}).status, 401);
  EXPECT_EQ(curl("GET", "/admin/cache/mrc").status, 401);

  // The dashboard: the admin's overview carries the same curves, a team's none.
  const json admin_view = overview(sessionFor(admin_key_)).parsed();
  ASSERT_TRUE(admin_view.contains("cache_curves")) << admin_view.dump();
  // Read later: only the time counted (and the traffic per day over it) moved.
  auto withoutTheClock = [](json tiers) {
    for (json& t : tiers) t.erase("counted_seconds"), t.erase("accesses_per_day");
    return tiers;
  };
  EXPECT_EQ(withoutTheClock(admin_view["cache_curves"]), withoutTheClock(mrc["tiers"]));
  EXPECT_EQ(admin_view["cache_curve_prices"], mrc["prices"]);
  const json team_view = overview(sessionFor(secrets_["alice"])).parsed();
  EXPECT_FALSE(team_view.contains("cache_curves"));
  EXPECT_FALSE(team_view.contains("cache_curve_prices"));

  // /metrics: the gauges at 0.5x .. 8x today's size.
  const Reply m = curl("GET", "/metrics", {"-H", "Authorization: Bearer " + admin_key_});
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("latentgate_cache_mrc_hit_ratio{tier=\"tier0\",size_factor=\"1\"} 0.5"), std::string::npos)
      << m.body.substr(0, 200);
  EXPECT_NE(m.body.find("latentgate_cache_mrc_sampling_rate{tier=\"tier0\"} 1"), std::string::npos);
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
  EXPECT_EQ(seen_.find("\"hint\":"), std::string::npos) << "no part of a key, not even /admin/keys' hint";
}

}  // namespace
}  // namespace lg::proxy

// Issue 21, items 7-9, through the whole server over TLS (harness.h), each
// test the attack the issue describes:
//   7. stored-response amplification: a huge reasoning item and a chain of
//      small continuations must not store the conversation again and again;
//      an oversized stored input is a 400 before generation; the admin purges
//      a key's or a team's stored responses;
//   8. a tenant flooding GET /v1/usage must not starve the admin plane: an
//      admin creates and revokes keys meanwhile, another team still gets its
//      usage, and the flood is told 429 with Retry-After;
//   9. dashboard sessions: a key holder signing in a thousand times does not
//      sign the admin out; sign-ins are throttled per key and failed ones per
//      address.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "common/unix_time.h"
#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"
#include "tests/proxy/http/test_client.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::RawClient;

constexpr const char* kModel = "demo";

struct Reply : testing::CurlReply {
  json parsed() const { return json::parse(body, nullptr, false); }
  json error() const {
    const json j = parsed();
    return j.is_object() && j.contains("error") ? j["error"] : json();
  }
};

// Bytes of every file under `dir` (RocksDB's WAL, SSTs and manifests).
int64_t bytesUnder(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

class StorageLimitsTest : public ::testing::Test {
 protected:
  void start(test::HarnessOptions options = {}) {
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
  }

  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra = {}) const {
    return {testing::curlOverTls(harness_->caFile(), harness_->port(), method, path, extra, 120)};
  }
  Reply call(const std::string& method, const std::string& path, const std::string& key,
             const std::optional<json>& body = std::nullopt) const {
    std::vector<std::string> extra = {"-H", "Authorization: Bearer " + key};
    if (body) {
      std::string data = body->dump();
      if (data.size() > 64 * 1024) {
        // Past what a command line may hold: curl reads it from a file.
        const std::string file = harness_->dataDir() + "/request-body.json";
        std::ofstream(file, std::ios::binary) << data;
        data = "@" + file;
      }
      extra.insert(extra.end(), {"-H", "content-type: application/json", "--data-binary", data});
    }
    return curl(method, path, extra);
  }
  // A stored response of 2 output tokens; its id.
  std::string respond(const std::string& key, json input, const std::optional<std::string>& previous = std::nullopt) {
    json body{{"model", kModel}, {"input", std::move(input)}, {"max_output_tokens", 2}};
    if (previous) body["previous_response_id"] = *previous;
    const Reply r = call("POST", "/v1/responses", key, body);
    EXPECT_EQ(r.status, 200) << r.body;
    const json j = r.parsed();
    return j.is_object() && j.contains("id") ? j["id"].get<std::string>() : std::string();
  }
  int64_t billingBytes() const { return bytesUnder(harness_->dataDir() + "/billing"); }
  // A key's id, as its own usage names it.
  std::string keyId(const std::string& key) const {
    const Reply r = call("GET", "/v1/usage", key);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed().value("key_id", std::string());
  }

  std::unique_ptr<test::Harness> harness_;
};

// ------------------------------------------------------------ item 7

TEST_F(StorageLimitsTest, AChainStoresEachTurnsNewInputNotTheConversationAgain) {
  start();
  const std::string key = harness_->newKey("team-a");
  // The attack: a 2 MB reasoning item (never part of the prompt) in the
  // first turn, then small continuations by previous_response_id. Stored
  // whole each time, 10 turns would write 20 MB to the billing store.
  const json reasoning{{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()},
                       {"encrypted_content", std::string(2 << 20, 'r')}};
  const int64_t before = billingBytes();
  std::string id = respond(key, json::array({reasoning, json{{"role", "user"}, {"content", "Start."}}}));
  ASSERT_FALSE(id.empty());
  const int64_t after_first = billingBytes();
  std::vector<std::string> ids{id};
  for (int turn = 1; turn < 10; ++turn) {
    id = respond(key, json::array({json{{"role", "user"}, {"content", "Turn " + std::to_string(turn) + "."}}}), id);
    ASSERT_FALSE(id.empty()) << "turn " << turn;
    ids.push_back(id);
  }
  const int64_t after_chain = billingBytes();
  std::printf("stored bytes: first turn %lld, 9 continuations %lld (billing store growth)\n",
              static_cast<long long>(after_first - before), static_cast<long long>(after_chain - after_first));
  EXPECT_LT(after_first - before, 256 << 10) << "the reasoning item was stored";
  EXPECT_LT(after_chain - after_first, 9 * (16 << 10)) << "a continuation stored more than its own turn";

  // The chain still reads as the whole conversation: each turn's prompt
  // holds every earlier turn (more input tokens each time).
  int64_t last_tokens = 0;
  for (const std::string& rid : {ids[1], ids[5], ids[9]}) {
    const Reply got = call("GET", "/v1/responses/" + rid, key);
    ASSERT_EQ(got.status, 200) << got.body;
    const int64_t tokens = got.parsed()["usage"]["input_tokens"].get<int64_t>();
    EXPECT_GT(tokens, last_tokens) << rid;
    last_tokens = tokens;
  }
  // A client's DELETE of an earlier turn: gone by id, its chain still continues.
  EXPECT_EQ(call("DELETE", "/v1/responses/" + ids[3], key).status, 200);
  EXPECT_EQ(call("GET", "/v1/responses/" + ids[3], key).status, 404);
  const Reply continued = call("POST", "/v1/responses", key,
                               json{{"model", kModel}, {"input", "More."}, {"max_output_tokens", 2},
                                    {"previous_response_id", ids[9]}, {"store", false}});
  ASSERT_EQ(continued.status, 200) << continued.body;
  EXPECT_GT(continued.parsed()["usage"]["input_tokens"].get<int64_t>(), last_tokens);
  // Another key, even of the same team, cannot continue it: the same 400 as an unknown id.
  const Reply theirs = call("POST", "/v1/responses", harness_->newKey("team-a"),
                            json{{"model", kModel}, {"input", "x"}, {"previous_response_id", ids[9]}});
  EXPECT_EQ(theirs.status, 400) << theirs.body;
  EXPECT_EQ(theirs.error()["code"], "previous_response_not_found");
}

TEST_F(StorageLimitsTest, AStoredInputOverTheLimitIs400BeforeGeneration) {
  test::HarnessOptions options;
  options.config.server.max_stored_response_bytes = 4096;
  start(std::move(options));
  const std::string key = harness_->newKey("team-a");
  // A tool output the prompt does read, 6 KB: over the 4 KB a record may hold.
  const json input = json::array({json{{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
                                  json{{"type", "function_call_output"}, {"call_id", "c1"},
                                       {"output", std::string(6000, 'a')}}});
  const Reply r = call("POST", "/v1/responses", key, json{{"model", kModel}, {"input", input}, {"max_output_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error()["code"], "stored_response_too_large") << r.body;
  EXPECT_EQ(r.error()["param"], "input");
  EXPECT_EQ(r.error()["type"], "invalid_request_error");
  // Nothing ran: no ledger entry was committed for it.
  EXPECT_EQ(harness_->server().ledger().stats().entries, 0u);
  // Small inputs are stored as before.
  EXPECT_FALSE(respond(key, "Hello").empty());
}

TEST_F(StorageLimitsTest, TheAdminPurgesAKeysAndATeamsStoredResponses) {
  start();
  const std::string a1 = harness_->newKey("team-a"), a2 = harness_->newKey("team-a"), b = harness_->newKey("team-b");
  const std::string r_a1 = respond(a1, "one"), r_a1b = respond(a1, "two", r_a1);
  const std::string r_a2 = respond(a2, "three"), r_b = respond(b, "four");
  const std::string admin = harness_->adminKey();
  // Only the admin key; exactly one of key_id and team.
  EXPECT_EQ(call("DELETE", "/admin/responses?team=team-a", a1).status, 401);
  const Reply neither = call("DELETE", "/admin/responses", admin);
  EXPECT_EQ(neither.status, 400) << neither.body;
  // By key.
  const std::string a1_id = keyId(a1);
  Reply purged = call("DELETE", "/admin/responses?key_id=" + a1_id, admin);
  ASSERT_EQ(purged.status, 200) << purged.body;
  EXPECT_EQ(purged.parsed()["purged"], 2);
  EXPECT_EQ(call("GET", "/v1/responses/" + r_a1, a1).status, 404);
  EXPECT_EQ(call("GET", "/v1/responses/" + r_a1b, a1).status, 404);
  EXPECT_EQ(call("GET", "/v1/responses/" + r_a2, a2).status, 200);
  // By team: the rest of team-a, not team-b.
  purged = call("DELETE", "/admin/responses?team=team-a", admin);
  ASSERT_EQ(purged.status, 200) << purged.body;
  EXPECT_EQ(purged.parsed()["purged"], 1);
  EXPECT_EQ(purged.parsed()["keys"], 2);
  EXPECT_EQ(call("GET", "/v1/responses/" + r_a2, a2).status, 404);
  EXPECT_EQ(call("GET", "/v1/responses/" + r_b, b).status, 200);
}

// ------------------------------------------------------------ item 8

// A ledger of `hours` hourly rows for the key: each usage query with
// granularity=hour then does real work (hours rows read and rendered).
void fillLedger(Server& server, const std::string& key_id, const std::string& team, int hours) {
  const int64_t now = unixMicros();
  std::atomic<int> pending{hours};
  std::promise<void> all;
  for (int h = 0; h < hours; ++h) {
    billing::LedgerEntry e;
    e.request_id = "req_fill_" + std::to_string(h);
    e.response_id = "chatcmpl-fill-" + std::to_string(h);
    e.key_id = key_id;
    e.team = team;
    e.model = "demo";
    e.requested_model = "demo";
    e.endpoint = "/v1/chat/completions";
    e.start_us = now - int64_t{h + 1} * 3600 * 1'000'000;
    e.end_us = e.start_us + 1000;
    e.miss_tokens = 10;
    e.prompt_tokens = 10;
    e.output_tokens = 2;
    e.prices = server.prices().at("demo", e.start_us);
    e.status = billing::EntryStatus::kCompleted;
    e.finish_reason = "length";
    e.price();
    server.ledger().commit(std::move(e), std::nullopt, [&](Status s) {
      EXPECT_TRUE(s.isOk()) << s.toString();
      if (pending.fetch_sub(1) == 1) all.set_value();
    });
  }
  all.get_future().wait();
}

TEST_F(StorageLimitsTest, AnAdminCreatesAndRevokesKeysWhileATenantFloodsTheUsageApi) {
  test::HarnessOptions options;
  // A small pool so that a flood fills it on two shared cores; the usage
  // queries' own rate limit off, so that only the pool's lanes answer it.
  options.config.server.blocking_threads = 1;
  options.config.server.blocking_max_queued = 16;
  options.config.server.blocking_max_queued_per_team = 4;
  options.config.limits.key_usage_queries_per_minute = 0;
  start(std::move(options));
  const std::string flooder = harness_->newKey("team-a"), other = harness_->newKey("team-b");
  fillLedger(harness_->server(), keyId(flooder), "team-a", 1000);

  // The flood: 24 kept-alive connections, each sending its next usage query
  // as soon as the last one is answered (a refusal at once), so the pool is
  // under pressure the whole time the admin works.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, too_many{0}, overloaded{0}, retry_after{0};
  auto flood_one = [&] {
    auto c = RawClient::connect(harness_->port());
    if (!c || !c->startTls(harness_->caFile())) return;
    size_t offset = 0;
    const std::string request = "GET /v1/usage?granularity=hour HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                                flooder + "\r\n\r\n";
    while (!stop.load()) {
      if (!c->send(request)) return;
      // One whole response: its head, then content-length bytes.
      size_t end = std::string::npos;
      while (end == std::string::npos) {
        const std::string& got = c->received();
        const size_t head_end = got.find("\r\n\r\n", offset);
        if (head_end != std::string::npos) {
          std::string head = got.substr(offset, head_end - offset);
          for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          const size_t cl = head.find("content-length: ");
          const size_t length = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
          if (got.size() >= head_end + 4 + length) {
            end = head_end + 4 + length;
            if (head.starts_with("http/1.1 200")) ok.fetch_add(1);
            if (head.starts_with("http/1.1 503")) overloaded.fetch_add(1);
            if (head.starts_with("http/1.1 429")) {
              too_many.fetch_add(1);
              if (head.find("\r\nretry-after: 1") != std::string::npos) retry_after.fetch_add(1);
            }
            break;
          }
        }
        if (c->closedByPeer() || stop.load()) return;
        c->readUntil("", 10s);
      }
      offset = end;
    }
  };
  std::vector<std::thread> flood;
  for (int i = 0; i < 24; ++i) flood.emplace_back(flood_one);
  // The flood is under way: its first requests answered.
  while (too_many.load() + ok.load() + overloaded.load() < 48) std::this_thread::sleep_for(5ms);

  const std::string admin = harness_->adminKey();
  int created = 0, revoked = 0;
  for (int i = 0; i < 9; ++i) {
    const Reply c = call("POST", "/admin/keys", admin, json{{"team", "team-c"}, {"name", "k" + std::to_string(i)}});
    EXPECT_EQ(c.status, 200) << "try " << i << ": " << c.body;
    if (c.status != 200) continue;
    ++created;
    const Reply d = call("DELETE", "/admin/keys/" + c.parsed()["id"].get<std::string>(), admin);
    EXPECT_EQ(d.status, 200) << "try " << i << ": " << d.body;
    revoked += d.status == 200;
  }
  // Another team still has its share of the tenants' lane.
  const Reply theirs = call("GET", "/v1/usage", other);
  stop = true;
  for (std::thread& t : flood) t.join();
  std::printf("flood: %d answered, %d refused 429, %d refused 503; admin: %d/9 created, %d/9 revoked\n", ok.load(),
              too_many.load(), overloaded.load(), created, revoked);
  EXPECT_EQ(theirs.status, 200) << theirs.body;
  EXPECT_GT(too_many.load(), 0) << "the flood was never held to its team's share";
  EXPECT_EQ(overloaded.load(), 0) << "one team filled the tenants' lane";
  EXPECT_EQ(retry_after.load(), too_many.load());
}

TEST_F(StorageLimitsTest, UsageQueriesAreRateLimitedPerKey) {
  test::HarnessOptions options;
  options.config.limits.key_usage_queries_per_minute = 3;
  start(std::move(options));
  const std::string a = harness_->newKey("team-a"), b = harness_->newKey("team-a");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call("GET", "/v1/usage", a).status, 200) << i;
  const Reply refused = call("GET", "/user/balance", a);
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.error()["code"], "rate_limit_exceeded");
  EXPECT_TRUE(refused.header("retry-after").has_value()) << refused.head;
  EXPECT_EQ(call("GET", "/v1/usage", b).status, 200) << "another key has its own limit";
  EXPECT_EQ(call("GET", "/admin/usage", harness_->adminKey()).status, 200) << "the admin is not limited";
}

// ------------------------------------------------------------ item 9

class DashboardSignInTest : public StorageLimitsTest {
 protected:
  void startWith(test::HarnessOptions options) {
    clock_us_ = unixMicros();
    options.hooks.clock_us = [this] { return clock_us_.load(); };
    start(std::move(options));
  }
  static std::string signInRequest(const std::string& key) {
    const std::string body = json{{"key", key}}.dump();
    return "POST /dashboard/session HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  Reply signIn(const std::string& key) {
    return curl("POST", "/dashboard/session",
                {"-H", "content-type: application/json", "--data-binary", json{{"key", key}}.dump()});
  }
  // The admin's session cookie.
  std::string adminCookie() {
    const Reply r = signIn(harness_->adminKey());
    EXPECT_EQ(r.status, 200) << r.body;
    const std::string c = r.header("set-cookie").value_or("");
    return c.substr(0, c.find(';'));
  }
  bool adminSignedIn(const std::string& cookie) {
    const Reply r = curl("GET", "/dashboard/session", {"-H", "Cookie: " + cookie});
    return r.status == 200 && r.parsed()["viewer"].is_object() && r.parsed()["viewer"]["role"] == "admin";
  }

  std::atomic<int64_t> clock_us_{0};
};

TEST_F(DashboardSignInTest, AKeyHolderSigningIn1030TimesDoesNotSignTheAdminOut) {
  test::HarnessOptions options;
  options.config.server.dashboard_sign_ins_per_key_per_minute = 0;  // the table's own bound, alone
  startWith(std::move(options));
  const std::string cookie = adminCookie();
  ASSERT_TRUE(adminSignedIn(cookie));
  const std::string key = harness_->newKey("team-a");
  // 1,030 sign-ins, more than the table's 1,024 (a connection each: what
  // was read from one is then one reply).
  int ok = 0;
  for (int i = 0; i < 1030; ++i) {
    auto c = RawClient::connect(harness_->port());
    ASSERT_TRUE(c && c->startTls(harness_->caFile()));
    ASSERT_TRUE(c->send(signInRequest(key)));
    const std::string got = c->readUntil("\"expires_at\"", 30s);
    ok += got.starts_with("HTTP/1.1 200");
  }
  EXPECT_EQ(ok, 1030);
  EXPECT_TRUE(adminSignedIn(cookie)) << "the admin's session was evicted";
  EXPECT_LE(harness_->server().dashboardSessions().size(), 1u + 8u) << "one key holds at most 8 sessions";
}

TEST_F(DashboardSignInTest, SignInsArePerKeyAndFailuresPerAddressThrottled) {
  startWith({});
  const std::string key = harness_->newKey("team-a"), other = harness_->newKey("team-a");
  // 10 sign-ins a minute with one key; the 11th waits, another key does not.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(signIn(key).status, 200) << i;
  Reply r = signIn(key);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.error()["code"], "rate_limit_exceeded");
  EXPECT_TRUE(r.header("retry-after").has_value()) << r.head;
  EXPECT_EQ(signIn(other).status, 200);
  // 20 failed sign-ins from one address; then even a right key waits, the
  // admin's too, but the API's Bearer keys from the same address do not.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(signIn("lg-wrong-key-" + std::to_string(i)).status, 401) << i;
  r = signIn(other);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_TRUE(r.header("retry-after").has_value()) << r.head;
  EXPECT_EQ(call("GET", "/v1/models", key).status, 200);
  // A minute later both have refilled.
  clock_us_ += 61 * 1'000'000;
  EXPECT_EQ(signIn(other).status, 200);
  EXPECT_EQ(signIn(key).status, 200);
}

}  // namespace
}  // namespace lg::proxy

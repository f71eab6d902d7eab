// What a request is billed when its response does not simply complete,
// through the whole server over TLS (the integration harness) and read back
// from its own ledger and budgets:
//   - a request with more prompts than can ever run together is refused whole
//     before anything runs (it used to run part and bill nothing);
//   - a multi-prompt stream is billed for every token it computed, completed
//     or cut by its client, and its team's budget is charged that amount;
//   - prompts that cannot start together wait together and time out together,
//     none of them streaming while another is refused;
//   - the server's own request timeout is failed and not billed (it used to
//     be billed as the client's cancellation);
//   - revoking a key cancels its running stream within a step, billed for
//     what it computed.
#include <chrono>
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
using Clock = std::chrono::steady_clock;
using testing::CurlReply;
using testing::RawClient;

constexpr int64_t kDollar = 1'000'000'000'000;  // pico-dollars

std::string httpPost(const std::string& path, const std::string& body, const std::string& key) {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + key +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

json prompts(int n) {
  json p = json::array();
  for (int i = 0; i < n; ++i) p.push_back("Tell me about the number " + std::to_string(i));
  return p;
}

// The last usage object of an SSE body (the one with usage.cost).
json lastUsage(const std::string& sse) {
  json usage;
  size_t at = 0;
  while ((at = sse.find("data: {", at)) != std::string::npos) {
    const size_t end = sse.find('\n', at);
    const json chunk = json::parse(sse.substr(at + 6, end - at - 6), nullptr, false);
    if (chunk.is_object() && chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    at = end;
  }
  return usage;
}

int64_t picoOf(const std::string& usd) {  // "0.00000112" -> pico-dollars
  const size_t dot = usd.find('.');
  int64_t whole = std::stoll(usd.substr(0, dot)) * kDollar;
  if (dot == std::string::npos) return whole;
  std::string frac = usd.substr(dot + 1);
  frac.resize(12, '0');
  return whole + std::stoll(frac);
}

class BillingEdgeTest : public ::testing::Test {
 protected:
  void start(Config config = test::HarnessOptions::defaultConfig()) {
    test::HarnessOptions options;
    options.config = std::move(config);
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    auto created = server().keys().create("team-a", "billing edge test");
    ASSERT_TRUE(created.isOk());
    key_id_ = created->first.id;
    key_ = created->second;
  }
  Server& server() { return harness_->server(); }

  CurlReply post(const std::string& path, const json& body, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"-H", "content-type: application/json", "-H", "Authorization: Bearer " + key_,
                               "--data-binary", body.dump()});
    return testing::curlOverTls(harness_->caFile(), harness_->port(), "POST", path, extra, 120);
  }

  // The request's ledger entry, once committed (commits are asynchronous).
  billing::LedgerEntry entryOf(const std::string& request_id) {
    std::optional<billing::LedgerEntry> e = harness_->ledgerEntry(request_id);
    if (!e) ADD_FAILURE() << "no ledger entry for " << request_id;
    return e.value_or(billing::LedgerEntry{});
  }
  static std::string requestIdOf(const CurlReply& r) { return r.header("x-request-id").value_or(""); }
  static std::string requestIdOf(const std::string& raw) {
    const size_t at = raw.find("x-request-id: ");
    return at == std::string::npos ? "" : raw.substr(at + 14, raw.find("\r\n", at) - at - 14);
  }
  Int128 teamSpent() {
    auto s = server().budgets().statusOf(billing::BudgetScope::kTeam, "team-a", unixSeconds());
    return s ? s->spent : Int128{-1};
  }
  void setTeamBudget(int64_t limit) {
    BudgetSetting b;
    b.enabled = true;
    b.limit = limit;
    b.period = BudgetPeriodSetting::kTotal;
    b.soft_limit = limit;
    ASSERT_TRUE(server().budgets().set(billing::BudgetScope::kTeam, "team-a", b).isOk());
  }
  bool waitForStats(const std::function<bool(const serving::SchedulerStats&)>& done, std::chrono::seconds timeout = 30s) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (done(server().scheduler().schedulerStats())) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }
  // A long streamed chat on a raw TLS connection, returned once it streams.
  std::unique_ptr<RawClient> startLongStream(const std::string& key, int max_tokens = 480) {
    auto c = RawClient::connect(harness_->port());
    EXPECT_TRUE(c && c->startTls(harness_->caFile()));
    if (!c) return nullptr;
    const json body = {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                       {"max_tokens", max_tokens}, {"stream", true}};
    EXPECT_TRUE(c->send(httpPost("/v1/chat/completions", body.dump(), key)));
    EXPECT_NE(c->readUntil("\"role\":\"assistant\"", 30s).find("HTTP/1.1 200"), std::string::npos);
    return c;
  }

  std::unique_ptr<test::Harness> harness_;
  std::string key_id_, key_;
};

TEST_F(BillingEdgeTest, MorePromptsThanCanRunTogetherAreRefusedWholeBeforeAnythingRuns) {
  start();  // serving.max_running 8
  const CurlReply r = post("/v1/completions", {{"model", "demo"}, {"prompt", prompts(9)}, {"max_tokens", 20},
                                                {"stream", true}});
  EXPECT_EQ(r.status, 400) << r.body;
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_EQ(e["code"], "invalid_value");
  EXPECT_NE(e["message"].get<std::string>().find("at most 8 run at once"), std::string::npos) << e;
  EXPECT_EQ(server().scheduler().schedulerStats().admitted, 0u);
  const billing::LedgerEntry entry = entryOf(requestIdOf(r));
  EXPECT_EQ(entry.status, billing::EntryStatus::kRefused);
  EXPECT_EQ(entry.finish_reason, "refused:too_many_choices");
  EXPECT_EQ(entry.cost.total(), 0);
}

TEST_F(BillingEdgeTest, AMultiPromptStreamIsBilledForEveryTokenItComputedAndItsBudgetCharged) {
  start();
  setTeamBudget(kDollar);
  // Completed: 4 prompts streamed to the end; the usage the client was shown
  // is what the ledger holds and the budget counts.
  const CurlReply done = post("/v1/completions", {{"model", "demo"}, {"prompt", prompts(4)}, {"max_tokens", 24},
                                                   {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                              {"-N"});
  ASSERT_EQ(done.status, 200) << done.body;
  const json usage = lastUsage(done.body);
  ASSERT_TRUE(usage.is_object()) << done.body;
  EXPECT_EQ(usage["completion_tokens"], 4 * 24);
  const billing::LedgerEntry e = entryOf(requestIdOf(done));
  EXPECT_EQ(e.status, billing::EntryStatus::kCompleted);
  EXPECT_EQ(e.choices, 4);
  EXPECT_EQ(e.output_tokens, 4 * 24);
  EXPECT_EQ(e.cost.total(), picoOf(usage["cost"]["total"]));
  EXPECT_EQ(teamSpent(), e.cost.total());

  // Cut by its client mid-stream: billed for what the four computed.
  auto c = RawClient::connect(harness_->port());
  ASSERT_TRUE(c && c->startTls(harness_->caFile()));
  const json body = {{"model", "demo"}, {"prompt", prompts(4)}, {"max_tokens", 400}, {"stream", true}};
  ASSERT_TRUE(c->send(httpPost("/v1/completions", body.dump(), key_)));
  const std::string got = c->readUntil("\"index\":3", 60s);
  ASSERT_NE(got.find("\"index\":3"), std::string::npos) << got.substr(0, 500);
  const std::string id = requestIdOf(got);
  c->abort();
  const billing::LedgerEntry cut = entryOf(id);
  EXPECT_EQ(cut.status, billing::EntryStatus::kCancelled);
  EXPECT_GT(cut.output_tokens, 0);
  EXPECT_LT(cut.output_tokens, 4 * 400);
  EXPECT_GT(cut.cost.total(), 0);
  EXPECT_EQ(teamSpent(), e.cost.total() + cut.cost.total());
  EXPECT_EQ(server().budgets().statusOf(billing::BudgetScope::kTeam, "team-a", unixSeconds())->reserved, 0);
}

TEST_F(BillingEdgeTest, PromptsThatCannotStartTogetherWaitAndTimeOutTogether) {
  Config config = test::HarnessOptions::defaultConfig();
  config.serving.max_running = 2;
  config.serving.max_queue_wait_ms = 500;
  start(config);
  auto busy = startLongStream(harness_->newKey("team-b"));  // holds one of the two slots for seconds
  ASSERT_TRUE(busy);
  const CurlReply r = post("/v1/completions", {{"model", "demo"}, {"prompt", prompts(2)}, {"max_tokens", 8},
                                                {"stream", true}});
  // Refused whole: one prompt could have started, none did.
  EXPECT_EQ(r.status, 200) << r.body;  // a stream starts before its prompts are admitted
  EXPECT_NE(r.body.find("server_overloaded"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("\"text\":\""), std::string::npos) << "no prompt streamed text: " << r.body;
  const billing::LedgerEntry e = entryOf(requestIdOf(r));
  EXPECT_EQ(e.status, billing::EntryStatus::kRefused);
  EXPECT_EQ(e.output_tokens, 0);
  EXPECT_EQ(e.cost.total(), 0);
  EXPECT_EQ(server().scheduler().schedulerStats().admitted, 1u);  // only the busy stream ever ran
  busy->abort();
}

TEST_F(BillingEdgeTest, TheServersOwnTimeoutIsFailedAndNotBilled) {
  Config config = test::HarnessOptions::defaultConfig();
  config.server.request_timeout_ms = 1000;
  start(config);
  setTeamBudget(kDollar);
  const CurlReply r = post("/v1/chat/completions", {{"model", "demo"},
                                                     {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                     {"max_tokens", 480}});
  EXPECT_EQ(r.status, 504) << r.body;
  const billing::LedgerEntry e = entryOf(requestIdOf(r));
  EXPECT_EQ(e.status, billing::EntryStatus::kFailed);
  EXPECT_GT(e.output_tokens, 0) << "computed, and counted";
  EXPECT_EQ(e.cost.total(), 0) << "but not billed";
  EXPECT_EQ(teamSpent(), 0);
}

TEST_F(BillingEdgeTest, RevokingAKeyCancelsItsRunningStreamBilledForWhatItComputed) {
  start();
  auto stream = startLongStream(key_);
  ASSERT_TRUE(stream);
  const std::string id = requestIdOf(stream->received());
  ASSERT_TRUE(waitForStats([](const serving::SchedulerStats& s) { return s.generated_tokens > 4; }));
  const auto t0 = Clock::now();
  const CurlReply revoked = testing::curlOverTls(
      harness_->caFile(), harness_->port(), "DELETE", "/admin/keys/" + key_id_,
      {"-H", "Authorization: Bearer " + harness_->adminKey()}, 60);
  ASSERT_EQ(revoked.status, 200) << revoked.body;
  // The stream ends (with an error event) long before its 480 tokens.
  const std::string got = stream->readUntil("data: [DONE]", 30s);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_NE(got.find("request_cancelled"), std::string::npos) << got.substr(got.size() > 600 ? got.size() - 600 : 0);
  EXPECT_LT(ms, 5000);
  const billing::LedgerEntry e = entryOf(id);
  EXPECT_EQ(e.status, billing::EntryStatus::kCancelled);
  EXPECT_EQ(e.finish_reason, "cancelled");
  EXPECT_GT(e.output_tokens, 0);
  EXPECT_LT(e.output_tokens, 480);
  EXPECT_GT(e.cost.total(), 0);
  std::printf("revoked key's stream ended %.1f ms after the revocation, %lld tokens billed\n", ms,
              static_cast<long long>(e.output_tokens));
}

}  // namespace
}  // namespace lg::proxy

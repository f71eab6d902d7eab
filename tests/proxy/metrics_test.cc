// The gateway's metric families without a server: GenerationMetrics from
// synthetic final events and RequestMetrics through a Router with a
// recording Exchange. Every text is read back by the strict parser
// (tests/support/prometheus_text.h). The scheduler's, memory's and cache's
// families have their tests beside them (tests/serving/serving_metrics_test.cc,
// tests/cache/cache_metrics_test.cc); metrics_server_test.cc scrapes them all
// from a real server.
#include "proxy/metrics.h"

#include <gtest/gtest.h>

#include "proxy/request_metrics.h"
#include "tests/support/prometheus_text.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using test::parsePrometheusText;
using test::PromText;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

serving::StreamEvent finalEvent(serving::FinishReason reason, int32_t prompt, int32_t hit0, int32_t hit_disk,
                                int32_t output, serving::Timing timing) {
  serving::StreamEvent e;
  e.final = true;
  e.finish_reason = reason;
  e.usage.prompt_tokens = prompt;
  e.usage.hit_tokens_tier0 = hit0;
  e.usage.hit_tokens_disk = hit_disk;
  e.usage.miss_tokens = prompt - hit0 - hit_disk;
  e.usage.completion_tokens = output;
  e.timing = timing;
  return e;
}

TEST(GenerationMetricsTest, LatenciesAreMeasuredFromTheRequestAndTokensCountedByKind) {
  GenerationMetrics m;
  const serving::Clock::time_point received{};
  serving::Timing t;
  t.total = 1.5;        // the engine saw 1.5 s of the 2 s: 0.5 s went before submit
  t.first_token = 0.5;  // submit -> first token
  t.decode = 0.8;       // first -> last of 5 tokens
  m.generationEnded(received, finalEvent(serving::FinishReason::kLength, 100, 64, 16, 5, t), received + 2s);
  // A cancelled generation with one token: TTFT, no TPOT.
  serving::Timing one;
  one.total = 0.3;
  one.first_token = 0.2;
  m.generationEnded(received, finalEvent(serving::FinishReason::kCancelled, 10, 0, 0, 1, one), received + 400ms);
  // Cancelled before its first token: end to end only.
  serving::Timing none;
  none.total = 0.05;
  m.generationEnded(received, finalEvent(serving::FinishReason::kCancelled, 10, 0, 0, 0, none), received + 60ms);
  // Refused in the queue: never served, no latency; no tokens.
  serving::Timing refused;
  refused.total = 30;
  m.generationEnded(received, finalEvent(serving::FinishReason::kRefused, 0, 0, 0, 0, refused), received + 30s);

  const Histogram ttft = m.timeToFirstToken();
  EXPECT_EQ(ttft.count, 2u);
  EXPECT_NEAR(ttft.sum, (2.0 - 1.5 + 0.5) + (0.4 - 0.3 + 0.2), 1e-9);
  const Histogram tpot = m.timePerOutputToken();
  EXPECT_EQ(tpot.count, 1u);
  EXPECT_NEAR(tpot.sum, 0.8 / 4, 1e-12);
  const Histogram e2e = m.endToEnd();
  EXPECT_EQ(e2e.count, 3u);
  EXPECT_NEAR(e2e.sum, 2.0 + 0.4 + 0.06, 1e-9);
  EXPECT_EQ(m.tokens(GenerationMetrics::kHitTier0), 64u);
  EXPECT_EQ(m.tokens(GenerationMetrics::kHitDisk), 16u);
  EXPECT_EQ(m.tokens(GenerationMetrics::kMiss), 20u + 10 + 10);
  EXPECT_EQ(m.tokens(GenerationMetrics::kOutput), 6u);

  metrics::ExpositionWriter w;
  m.collect(w);
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  EXPECT_EQ(p.value("latentgate_time_to_first_token_seconds_count"), 2);
  EXPECT_EQ(p.value("latentgate_time_to_first_token_seconds_bucket", {{"le", "1"}}), 2);  // 1.0 and 0.3
  EXPECT_EQ(p.value("latentgate_time_to_first_token_seconds_bucket", {{"le", "0.75"}}), 1);
  EXPECT_EQ(p.value("latentgate_time_per_output_token_seconds_count"), 1);
  EXPECT_EQ(p.value("latentgate_e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(p.value("latentgate_tokens_total", {{"kind", "prompt_hit_tier0"}}), 64);
  EXPECT_EQ(p.value("latentgate_tokens_total", {{"kind", "prompt_hit_disk"}}), 16);
  EXPECT_EQ(p.value("latentgate_tokens_total", {{"kind", "prompt_miss"}}), 40);
  EXPECT_EQ(p.value("latentgate_tokens_total", {{"kind", "output"}}), 6);
}

// An Exchange that records what the handler did.
class RecordingExchange : public Exchange {
 public:
  explicit RecordingExchange(HttpRequest r) : request_(std::move(r)) {}
  const HttpRequest& request() const override { return request_; }
  void respond(int status, HttpHeaders, std::string) override { statuses.push_back(status); }
  void startStream(int status, HttpHeaders) override { statuses.push_back(status); }
  void send(std::string data) override { sent += data; }
  void end() override { ended = true; }
  void onDisconnect(std::function<void()> cb) override { on_disconnect = std::move(cb); }
  bool disconnected() const override { return false; }

  std::vector<int> statuses;
  std::string sent;
  bool ended = false;
  std::function<void()> on_disconnect;

 private:
  HttpRequest request_;
};

TEST(RequestMetricsTest, EveryRequestIsCountedOnceByRouteAndStatus) {
  Router router;
  std::vector<std::shared_ptr<Exchange>> kept;
  router.add("GET", "/healthz", [](const HttpRequest&, std::shared_ptr<Exchange> e) { e->respond(200, {}, "ok"); });
  router.add("POST", "/v1/chat/completions", [](const HttpRequest& r, std::shared_ptr<Exchange> e) {
    if (r.body == "stream") {
      e->startStream(200, {});
      e->send("data: x\n\n");
      e->end();
    } else if (r.body == "twice") {
      e->respond(400, {}, "");
      e->respond(200, {}, "");  // a bug: counted once, as the first
    } else if (r.body == "leave") {
      // Dropped unanswered: the client went away before any response.
    } else {
      e->respond(401, {}, "");
    }
  });
  router.addPrefix("GET", "/v1/responses/", [&kept](const HttpRequest&, std::shared_ptr<Exchange> e) {
    kept.push_back(e);  // answered later
  });
  router.addPrefix("DELETE", "/v1/responses/", [](const HttpRequest&, std::shared_ptr<Exchange> e) {
    e->respond(404, {}, "");
  });
  RequestMetrics metrics(router);
  const Handler handler = metrics.handler();
  std::vector<std::shared_ptr<RecordingExchange>> inner;
  auto call = [&](std::string method, std::string path, std::string body = "") {
    HttpRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.body = std::move(body);
    auto e = std::make_shared<RecordingExchange>(r);
    inner.push_back(e);
    handler(e->request(), e);
  };
  call("GET", "/healthz");
  call("GET", "/healthz");
  call("POST", "/v1/chat/completions", "stream");
  call("POST", "/v1/chat/completions", "twice");
  call("POST", "/v1/chat/completions", "leave");
  call("POST", "/v1/chat/completions");
  call("GET", "/v1/responses/resp_123");
  call("GET", "/v1/responses/resp_456");
  call("DELETE", "/v1/responses/resp_123");
  call("GET", "/nope/../../etc/passwd");  // 404 from the router
  call("BREW", "/healthz");               // 405 from the router
  // The wrapped exchange forwards every call to the server's.
  EXPECT_EQ(inner[2]->statuses, (std::vector<int>{200}));
  EXPECT_EQ(inner[2]->sent, "data: x\n\n");
  EXPECT_TRUE(inner[2]->ended);
  EXPECT_EQ(inner[3]->statuses, (std::vector<int>{400, 200}));
  EXPECT_EQ(inner[9]->statuses, (std::vector<int>{404}));
  EXPECT_EQ(inner[10]->statuses, (std::vector<int>{405}));

  auto scrape = [&metrics] {
    metrics::ExpositionWriter w;
    metrics.collect(w);
    PromText p = parsePrometheusText(w.text());
    EXPECT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
    EXPECT_EQ(w.text().find("passwd"), std::string::npos);
    EXPECT_EQ(w.text().find("BREW"), std::string::npos);
    EXPECT_EQ(w.text().find("resp_123"), std::string::npos);
    return p;
  };
  const std::string name = "latentgate_http_requests_total";
  auto labels = [](std::string endpoint, std::string method, std::string code) {
    return std::map<std::string, std::string>{{"endpoint", endpoint}, {"method", method}, {"code", code}};
  };
  PromText p = scrape();
  EXPECT_EQ(p.value(name, labels("/healthz", "GET", "200")), 2);
  EXPECT_EQ(p.value(name, labels("/v1/chat/completions", "POST", "200")), 1);
  EXPECT_EQ(p.value(name, labels("/v1/chat/completions", "POST", "400")), 1);
  EXPECT_EQ(p.value(name, labels("/v1/chat/completions", "POST", "401")), 1);
  EXPECT_EQ(p.value(name, labels("/v1/chat/completions", "POST", "499")), 1);
  EXPECT_EQ(p.value(name, labels("/v1/responses/*", "DELETE", "404")), 1);
  EXPECT_EQ(p.value(name, labels("other", "other", "404")), 1);
  EXPECT_EQ(p.value(name, labels("other", "other", "405")), 1);
  EXPECT_EQ(p.sum(name, {{"endpoint", "/v1/responses/*"}, {"method", "GET"}}), 0);  // not answered yet
  EXPECT_EQ(p.sum(name), 9);

  kept[0]->respond(200, {}, "{}");
  kept.clear();  // the second one is dropped unanswered
  inner.clear();
  p = scrape();
  EXPECT_EQ(p.value(name, labels("/v1/responses/*", "GET", "200")), 1);
  EXPECT_EQ(p.value(name, labels("/v1/responses/*", "GET", "499")), 1);
  EXPECT_EQ(p.sum(name), 11);
}

TEST(MetricsAccessTest, AShortMetricsTokenIsRefused) {
  auto admin = billing::AdminKey::loadOrCreate("an-admin-key-of-some-length", "", nullptr);
  ASSERT_TRUE(admin.isOk());
  EXPECT_FALSE(metricsAccess(*admin, "short").isOk());
  auto none = metricsAccess(*admin, "");
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->token.has_value());
  auto some = metricsAccess(*admin, "a-metrics-token-long-enough");
  ASSERT_TRUE(some.isOk());
  ASSERT_TRUE(some->token.has_value());
  EXPECT_TRUE(some->token->matches("a-metrics-token-long-enough"));
  EXPECT_FALSE(some->token->matches("an-admin-key-of-some-length"));
}

}  // namespace
}  // namespace lg::proxy

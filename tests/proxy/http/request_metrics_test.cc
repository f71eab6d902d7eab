// Requests counted by route and status (proxy/http/request_metrics.h)
// through a Router with a recording Exchange, read back by the strict parser
// (tests/support/prometheus_text.h).
#include "proxy/http/request_metrics.h"

#include <gtest/gtest.h>

#include "proxy/http/router.h"
#include "tests/proxy/http/recording_exchange.h"
#include "tests/support/prometheus_text.h"

namespace lg::proxy {
namespace {

using test::parsePrometheusText;
using test::PromText;
using testing::RecordingExchange;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

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

}  // namespace
}  // namespace lg::proxy

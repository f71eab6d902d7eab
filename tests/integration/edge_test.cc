// The edge before authentication (issue 21 items 4, 5 and 12's nosniff),
// each attack acted out against the whole server (the integration harness,
// harness.h) over TLS with raw sockets:
//   - bodies of callers without a key are refused at their header, before
//     the body is read or 100 Continue sent, so that 96 of them uploading
//     32 MiB bodies do not raise the server's memory by more than its
//     in-flight body budget;
//   - every route has its body limit, and bodies with a key share one
//     budget (503 with Retry-After beyond it);
//   - idle connections from one address cannot take every slot; during a
//     flood from many addresses the reserved slots still let the operator
//     reach /admin and /metrics, and idle connections that never
//     authenticated are cut early.
// The numbers are the configuration's, kept small so that the tests run in
// seconds on two shared cores.
#include <csignal>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/integration/harness.h"
#include "tests/proxy/http/test_client.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::RawClient;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); the harness runs
// the server in this process.
uint64_t procStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;  // kB
  }
  return 0;
}

std::string head(const std::string& method, const std::string& path, const std::string& extra) {
  return method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n";
}

// The JSON error of a raw response, or null.
json errorOf(const std::string& response) {
  const size_t split = response.find("\r\n\r\n");
  if (split == std::string::npos) return json();
  json j = json::parse(response.substr(split + 4), nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : json();
}

class EdgeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A client still uploading when the server closes must not die of it.
    std::signal(SIGPIPE, SIG_IGN);
  }

  void start(Config config) {
    test::HarnessOptions options;
    options.config = std::move(config);
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    key_ = harness_->newKey("team-a", "edge test");
    ASSERT_FALSE(key_.empty());
  }

  std::unique_ptr<RawClient> tls(const std::string& from = "") {
    auto c = from.empty() ? RawClient::connect(harness_->port()) : RawClient::connectFrom(harness_->port(), from);
    if (!c || !c->startTls(harness_->caFile())) return nullptr;
    return c;
  }

  // GET `path` on a new TLS connection from `from` with `key` (empty: none);
  // the status, or 0 when the connection was refused or closed unanswered.
  int get(const std::string& from, const std::string& path, const std::string& key) {
    auto c = tls(from);
    if (!c) return 0;
    const std::string auth = key.empty() ? "" : "Authorization: Bearer " + key + "\r\n";
    if (!c->send(head("GET", path, auth + "Connection: close\r\n"))) return 0;
    c->waitClosed(5s);
    const std::string& r = c->received();
    return r.starts_with("HTTP/1.1 ") && r.size() >= 12 ? std::stoi(r.substr(9, 3)) : 0;
  }

  HttpServerStats stats() const { return harness_->server().httpStats(); }

  std::unique_ptr<test::Harness> harness_;
  std::string key_;
};

// Issue 21 item 4: 96 connections without a key each declare a 32 MiB body
// and send 2 MiB of it at once. Before the fix the server read and buffered
// every byte (192 MiB here; the issue measured 3.1 GB with whole bodies);
// now each gets its 401 as soon as its header is complete, 100 Continue is
// never sent, and what they send is dropped unread: the server's memory
// grows by less than its in-flight body budget (64 MiB here).
TEST_F(EdgeTest, UnauthenticatedUploadsAreRefusedAtTheirHeaderAndCostNoMemory) {
  Config config = test::HarnessOptions::defaultConfig();
  config.server.max_inflight_body_bytes = 64 * kMiB;
  config.server.max_connections_per_address = 0;  // all 96 from here: the budget is what is measured
  start(config);

  // With Expect: 100-continue the first (and only) answer is the 401.
  {
    auto c = tls();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(head("POST", "/v1/chat/completions",
                             "Content-Type: application/json\r\nContent-Length: 33554432\r\nExpect: 100-continue\r\n")));
    EXPECT_TRUE(c->waitClosed(5s));
    EXPECT_TRUE(c->received().starts_with("HTTP/1.1 401")) << c->received();
    EXPECT_EQ(c->received().find("100 Continue"), std::string::npos) << c->received();
    EXPECT_EQ(errorOf(c->received())["code"], "invalid_api_key") << c->received();
    EXPECT_NE(c->received().find("x-content-type-options: nosniff"), std::string::npos) << c->received();
  }

  const std::string part(2 * kMiB, 'x');
  const uint64_t rss_before = procStatusBytes("VmRSS");
  std::vector<std::unique_ptr<RawClient>> uploads;
  const auto t0 = Clock::now();
  for (int i = 0; i < 96; ++i) {
    auto c = tls();
    ASSERT_TRUE(c) << i;
    const std::string auth = i % 2 == 0 ? "" : "Authorization: Bearer lg-not-a-key\r\n";  // none, or a wrong one
    ASSERT_TRUE(c->send(head("POST", "/v1/chat/completions",
                             auth + "Content-Type: application/json\r\nContent-Length: 33554432\r\n")));
    c->send(part);  // may fail once the server closed: it is not reading it
    uploads.push_back(std::move(c));
  }
  const uint64_t rss_during = procStatusBytes("VmRSS");
  const uint64_t growth = rss_during > rss_before ? rss_during - rss_before : 0;
  std::printf("96 unauthenticated uploads of 2 MiB (of 32 MiB declared) in %lld ms: RSS %.1f -> %.1f MiB (+%.1f MiB)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()),
              rss_before / double(kMiB), rss_during / double(kMiB), growth / double(kMiB));
  EXPECT_LT(growth, 64 * kMiB) << "the server buffered bodies of callers without a key";
  int refused = 0;
  const auto deadline = Clock::now() + 5s;  // for all: before the fix none is answered
  for (auto& c : uploads) {
    c->readUntil("\r\n\r\n", std::max(1ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
    refused += c->received().starts_with("HTTP/1.1 401");
    EXPECT_EQ(c->received().find("100 Continue"), std::string::npos);
  }
  EXPECT_EQ(refused, 96);
  EXPECT_GE(stats().preflight_unauthenticated, 97u);
  EXPECT_EQ(stats().inflight_body_bytes, 0u);
  uploads.clear();
  EXPECT_EQ(get("", "/v1/models", key_), 200);
}

// Item 4's other two limits: a route's own body limit (admin routes take
// 64 KiB), an unknown route refused at its header, and one budget that
// bodies with a key share: beyond it 503 with Retry-After, and the budget
// comes back when a request ends.
TEST_F(EdgeTest, RouteBodyLimitsAndTheInflightBudgetApplyAtTheHeader) {
  Config config = test::HarnessOptions::defaultConfig();
  config.server.max_inflight_body_bytes = 64 * kMiB;
  start(config);
  const std::string admin = "Authorization: Bearer " + harness_->adminKey() + "\r\n";
  const std::string key = "Authorization: Bearer " + key_ + "\r\n";

  // An admin route with a body over 64 KiB: 413 at once, no 100 Continue.
  auto big_admin = tls();
  ASSERT_TRUE(big_admin);
  ASSERT_TRUE(big_admin->send(head("POST", "/admin/keys",
                                   admin + "Content-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n")));
  EXPECT_TRUE(big_admin->waitClosed(5s));
  EXPECT_TRUE(big_admin->received().starts_with("HTTP/1.1 413")) << big_admin->received();
  EXPECT_EQ(big_admin->received().find("100 Continue"), std::string::npos);
  EXPECT_NE(errorOf(big_admin->received())["message"].get<std::string>().find("65536"), std::string::npos)
      << big_admin->received();

  // No such route: 404 before the body.
  auto nowhere = tls();
  ASSERT_TRUE(nowhere);
  ASSERT_TRUE(nowhere->send(head("POST", "/v1/nowhere", key + "Content-Length: 33554432\r\nExpect: 100-continue\r\n")));
  EXPECT_TRUE(nowhere->waitClosed(5s));
  EXPECT_TRUE(nowhere->received().starts_with("HTTP/1.1 404")) << nowhere->received();
  EXPECT_EQ(nowhere->received().find("100 Continue"), std::string::npos);

  // Two uploads of 30 MiB with a key hold 60 MiB of the 64 MiB budget.
  const std::string upload = key + "Content-Type: application/json\r\nContent-Length: 31457280\r\nExpect: 100-continue\r\n";
  std::vector<std::unique_ptr<RawClient>> holding;
  for (int i = 0; i < 2; ++i) {
    auto c = tls();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(head("POST", "/v1/chat/completions", upload)));
    EXPECT_TRUE(c->readUntil("\r\n\r\n", 5s).starts_with("HTTP/1.1 100 Continue")) << c->received();
    holding.push_back(std::move(c));
  }
  EXPECT_EQ(stats().inflight_body_bytes, 60 * kMiB);
  // A third does not fit: 503, OpenAI's error, Retry-After, closed.
  auto third = tls();
  ASSERT_TRUE(third);
  ASSERT_TRUE(third->send(head("POST", "/v1/chat/completions", upload)));
  EXPECT_TRUE(third->waitClosed(5s));
  EXPECT_TRUE(third->received().starts_with("HTTP/1.1 503")) << third->received();
  EXPECT_NE(third->received().find("retry-after: 1\r\n"), std::string::npos) << third->received();
  EXPECT_EQ(errorOf(third->received())["code"], "server_overloaded") << third->received();
  EXPECT_EQ(stats().bodies_over_budget, 1u);
  // One upload goes away: its reservation is given back, and a new one fits.
  holding[0]->abort();
  for (int i = 0; i < 200 && stats().inflight_body_bytes != 30 * kMiB; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(stats().inflight_body_bytes, 30 * kMiB);
  auto fourth = tls();
  ASSERT_TRUE(fourth);
  ASSERT_TRUE(fourth->send(head("POST", "/v1/chat/completions", upload)));
  EXPECT_TRUE(fourth->readUntil("\r\n\r\n", 5s).starts_with("HTTP/1.1 100 Continue")) << fourth->received();
  holding.clear();
  fourth.reset();
  for (int i = 0; i < 200 && stats().inflight_body_bytes != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(stats().inflight_body_bytes, 0u);
  EXPECT_EQ(get("", "/v1/models", key_), 200);
}

// Issue 21 item 5: more idle keep-alive connections from one address than
// the server has slots. Before the fix they took every slot and shut out
// everyone; now the per-address cap closes the excess at accept and another
// address is served.
TEST_F(EdgeTest, AnIdleFloodFromOneAddressDoesNotShutOutAnother) {
  Config config = test::HarnessOptions::defaultConfig();
  config.server.max_connections = 32;
  config.server.max_connections_per_address = 8;
  config.server.reserved_connections = 4;
  start(config);
  std::vector<std::unique_ptr<RawClient>> flood;
  int served = 0;
  for (int i = 0; i < 40; ++i) {
    auto c = RawClient::connectFrom(harness_->port(), "127.0.0.1");
    if (!c) continue;
    if (c->startTls(harness_->caFile()) && c->send(head("GET", "/healthz", ""))) {
      served += c->readUntil("\"ok\"}", 2s).starts_with("HTTP/1.1 200");
    }
    flood.push_back(std::move(c));  // held open, idle
  }
  EXPECT_EQ(served, 8);
  EXPECT_EQ(stats().connections_refused_per_address, 32u);
  EXPECT_EQ(get("127.0.0.2", "/healthz", ""), 200) << "another address was shut out";
  EXPECT_EQ(get("127.0.0.2", "/v1/models", key_), 200);
}

// Item 5 with many addresses: 32 idle connections from four addresses fill
// the 28 general slots (the 4 that reach the reserved slots without a key
// get 503). The operator still reaches /admin and /metrics through the
// reserve; the server, under pressure, cuts the idle connections that never
// authenticated after pressure_idle_timeout (3 s here) instead of
// idle_timeout (20 s here), and then serves anyone again.
TEST_F(EdgeTest, TheOperatorGetsInDuringAFloodFromManyAddresses) {
  Config config = test::HarnessOptions::defaultConfig();
  config.server.max_connections = 32;
  config.server.max_connections_per_address = 8;
  config.server.reserved_connections = 4;
  config.server.idle_timeout_ms = 20000;
  config.server.pressure_idle_timeout_ms = 3000;
  start(config);
  std::vector<std::unique_ptr<RawClient>> flood;
  int served = 0, refused_in_reserve = 0;
  const auto t0 = Clock::now();
  for (int a = 3; a <= 6; ++a) {
    for (int i = 0; i < 8; ++i) {
      auto c = tls("127.0.0." + std::to_string(a));
      ASSERT_TRUE(c);
      ASSERT_TRUE(c->send(head("GET", "/healthz", "")));
      const std::string r = c->readUntil("}", 2s);
      served += r.starts_with("HTTP/1.1 200");
      refused_in_reserve += r.starts_with("HTTP/1.1 503");
      // The refused ones leave (the server lingers on them otherwise); the
      // served ones stay, idle.
      if (r.starts_with("HTTP/1.1 200")) flood.push_back(std::move(c));
    }
  }
  EXPECT_EQ(served, 28);
  EXPECT_EQ(refused_in_reserve, 4);
  EXPECT_EQ(stats().connections_refused_reserve, 4u);
  for (int i = 0; i < 200 && stats().connections_open > 28; ++i) std::this_thread::sleep_for(10ms);
  // The operator, from an address of its own, during the flood.
  EXPECT_EQ(get("127.0.0.2", "/admin/keys", harness_->adminKey()), 200);
  EXPECT_EQ(get("127.0.0.2", "/metrics", harness_->adminKey()), 200);
  EXPECT_EQ(get("127.0.0.2", "/v1/models", key_), 200);

  // Under pressure the idle flood is cut after about 3 s, not 20 s.
  int closed = 0;
  for (auto& c : flood) closed += c->waitClosed(12s);
  const auto cut_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(closed, 28);
  EXPECT_LT(cut_ms, 12000);
  EXPECT_GE(stats().connections_closed_under_pressure, 20u);
  std::printf("28 idle flood connections closed within %lld ms of the flood's start\n", static_cast<long long>(cut_ms));
  EXPECT_EQ(get("127.0.0.7", "/healthz", ""), 200);
}

}  // namespace
}  // namespace lg::proxy

// HttpServer end to end: an in-process server on port 0 with a temp data dir
// and the generated CA, driven by real clients (curl, openssl s_client) as
// subprocesses, and by raw sockets for what real clients will not do (half a
// header, random bytes, a flood, a dropped stream).
#include "proxy/http/http_server.h"

#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "proxy/http/health_routes.h"
#include "proxy/http/router.h"
#include "proxy/http/tls_material.h"
#include "tests/proxy/http/test_client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RawClient;

long long msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Decodes a chunked body strictly; returns the chunks, or nothing on bad framing.
std::optional<std::vector<std::string>> decodeChunks(std::string_view raw) {
  std::vector<std::string> chunks;
  for (;;) {
    const size_t eol = raw.find("\r\n");
    if (eol == std::string_view::npos) return std::nullopt;
    size_t size = 0;
    const std::string hex(raw.substr(0, eol));
    if (hex.empty() || hex.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
    size = std::stoul(hex, nullptr, 16);
    raw.remove_prefix(eol + 2);
    if (size == 0) return raw == "\r\n" ? std::optional(chunks) : std::nullopt;
    if (raw.size() < size + 2 || raw.substr(size, 2) != "\r\n") return std::nullopt;
    chunks.emplace_back(raw.substr(0, size));
    raw.remove_prefix(size + 2);
  }
}

std::string event(int i) { return "data: {\"i\": " + std::to_string(i) + "}\n\n"; }

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TlsMaterialOptions o;
    o.dir = tmp_.path() + "/tls";
    auto m = loadOrCreateTlsMaterial(o);
    ASSERT_TRUE(m.isOk()) << m.status().toString();
    tls_ = *m;

    addHealthRoutes(router_, [this] { return ready_ ? Readiness{true, ""} : Readiness{false, "warming up"}; });
    // Five events from another thread, 20 ms apart, then [DONE].
    router_.add("GET", "/stream", [this](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      spawn([this, ex] { produce(ex, 5, 20ms); });
    });
    router_.add("GET", "/slow-stream", [this](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      spawn([this, ex] { produce(ex, 5, 100ms); });
    });
    // Starts a stream, sends one event and holds the exchange: only the
    // client or the server can end it.
    router_.add("GET", "/forever", [this](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      ex->onDisconnect([this](DisconnectCause cause) { noteDisconnect(cause); });
      ex->startStream(200, {{"content-type", "text/event-stream"}});
      ex->send("data: first\n\n");
      hold(ex);
    });
    // Never answers.
    router_.add("GET", "/hang", [this](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      ex->onDisconnect([this](DisconnectCause cause) { noteDisconnect(cause); });
      hold(ex);
    });
    router_.add("POST", "/echo", [](const HttpRequest& r, std::shared_ptr<Exchange> ex) {
      ex->respond(200, {{"content-type", "application/octet-stream"}}, r.body);
    });
    // The producer is handed the exchange (and sends at once) before the
    // handler starts the stream: the handler's own call still comes first.
    router_.add("GET", "/start-late", [this](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      auto sent = std::make_shared<std::promise<void>>();
      auto sent_future = sent->get_future();
      spawn([ex, sent] {
        ex->send("data: early\n\n");
        ex->end();
        sent->set_value();
      });
      sent_future.wait();  // (a real handler never blocks; this forces the race's worst order)
      ex->startStream(200, {{"content-type", "text/event-stream"}});
    });
    router_.add("GET", "/throws", [](const HttpRequest&, std::shared_ptr<Exchange>) {
      throw std::runtime_error("secret internal detail /etc/passwd");
    });
    // A handler bug: send() before startStream().
    router_.add("GET", "/misuse", [](const HttpRequest&, std::shared_ptr<Exchange> ex) { ex->send("x"); });
    router_.add("HEAD", "/healthz", [](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      ex->respond(200, {{"content-type", "application/json"}}, R"({"status":"ok"})");
    });
    // A header whose value a handler copied from the client, CR LF and all.
    router_.add("GET", "/bad-header", [](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      ex->respond(200, {{"x-echo", "a\r\nset-cookie: evil=1"}, {"x-fine", "yes"}}, "ok");
    });
  }

  void TearDown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    server_.reset();
    held_.clear();
  }

  void spawn(std::function<void()> f) {
    std::lock_guard lock(mu_);
    threads_.emplace_back(std::move(f));
  }
  void noteDisconnect(DisconnectCause cause) {
    std::lock_guard lock(mu_);
    if (!disconnected_set_) {
      disconnected_set_ = true;
      disconnect_cause_ = cause;
      disconnected_.set_value(Clock::now());
    }
  }
  // Why the first exchange disconnected (after disconnected_ is ready).
  DisconnectCause disconnectCause() {
    std::lock_guard lock(mu_);
    return disconnect_cause_;
  }
  void hold(std::shared_ptr<Exchange> ex) {
    std::lock_guard lock(mu_);
    held_.push_back(std::move(ex));
    if (!got_exchange_set_) {
      got_exchange_set_ = true;
      got_exchange_.set_value();
    }
  }
  void produce(const std::shared_ptr<Exchange>& ex, int n, std::chrono::milliseconds gap) {
    ex->startStream(200, {{"content-type", "text/event-stream"}, {"cache-control", "no-cache"}});
    {
      std::lock_guard lock(mu_);
      if (!stream_started_set_) {
        stream_started_set_ = true;
        stream_started_.set_value();
      }
    }
    for (int i = 0; i < n && !ex->disconnected(); ++i) {
      std::this_thread::sleep_for(gap);
      ex->send(event(i));
    }
    ex->send("data: [DONE]\n\n");
    ex->end();
  }

  HttpServerOptions options() const {
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.cert_chain_pem = tls_.cert_chain_pem;
    o.key_pem = tls_.key_pem;
    o.io_threads = 2;
    o.header_timeout = 5s;
    o.idle_timeout = 5s;
    o.request_timeout = 10s;
    o.linger_timeout = 1s;
    return o;
  }

  void start(const HttpServerOptions& o) {
    auto s = HttpServer::start(o, router_.handler());
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    server_ = std::move(s).value();
    plain_ = o.plain_http;
  }

  std::string url(const std::string& path, const std::string& host = "127.0.0.1") const {
    return std::string(plain_ ? "http" : "https") + "://" + host + ":" + std::to_string(server_->port()) + path;
  }

  test::ProcessResult curl(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time", "20", "--cacert", tls_.ca_cert_path};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::runProcess(argv, "");
  }

  test::TempDir tmp_;
  TlsMaterial tls_;
  Router router_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<HttpServer> server_;
  bool plain_ = false;

  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<Exchange>> held_;
  std::promise<Clock::time_point> disconnected_;
  bool disconnected_set_ = false;
  DisconnectCause disconnect_cause_ = DisconnectCause::kServerError;  // guarded by mu_
  std::promise<void> got_exchange_;
  bool got_exchange_set_ = false;
  std::promise<void> stream_started_;
  bool stream_started_set_ = false;
};

TEST_F(HttpServerTest, CurlTrustsTheGeneratedCaByAddressAndByName) {
  start(options());
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    auto r = curl({"-D", "-", url("/healthz", host)});
    ASSERT_EQ(r.exit_code, 0) << host << ": " << r.err;
    EXPECT_NE(r.out.find("HTTP/1.1 200"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("x-request-id: req_"), std::string::npos) << r.out;
    EXPECT_TRUE(r.out.ends_with("\r\n\r\n{\"status\":\"ok\"}")) << r.out;
  }
  // Without the CA the certificate is not trusted: the CA is what clients need.
  auto untrusted = test::runProcess({"/usr/bin/curl", "-sS", "--max-time", "20", url("/healthz")}, "");
  EXPECT_EQ(untrusted.exit_code, 60) << untrusted.err;  // CURLE_PEER_FAILED_VERIFICATION

  auto not_ready = curl({"-w", "\n%{http_code}", url("/readyz")});
  EXPECT_NE(not_ready.out.find("\"reason\":\"warming up\""), std::string::npos) << not_ready.out;
  EXPECT_TRUE(not_ready.out.ends_with("\n503")) << not_ready.out;
  ready_ = true;
  EXPECT_TRUE(curl({"-w", "\n%{http_code}", url("/readyz")}).out.ends_with("\n200"));
}

TEST_F(HttpServerTest, UnknownPathsAndWrongMethodsGetOpenAiErrors) {
  start(options());
  auto r = curl({"-w", "\n%{http_code}", url("/v1/nothing")});
  ASSERT_TRUE(r.out.ends_with("\n404")) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(0, r.out.rfind('\n')));
  EXPECT_EQ(j["error"]["message"], "Invalid URL (GET /v1/nothing)");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");

  r = curl({"-X", "DELETE", "-D", "-", url("/healthz")});
  EXPECT_NE(r.out.find("HTTP/1.1 405"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allow: GET"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"code\":\"method_not_allowed\""), std::string::npos) << r.out;
}

TEST_F(HttpServerTest, OnlyTls12And13AreSpoken) {
  start(options());
  // SECLEVEL=0 makes the client really offer TLS 1.1 (OpenSSL 3 would not
  // otherwise), so the refusal is the server's.
  auto old = curl({"--tlsv1.1", "--tls-max", "1.1", "--ciphers", "DEFAULT@SECLEVEL=0", url("/healthz")});
  EXPECT_NE(old.exit_code, 0) << old.out;
  auto s_client = test::runProcess({"/usr/bin/openssl", "s_client", "-connect",
                                    "127.0.0.1:" + std::to_string(server_->port()), "-tls1_1", "-cipher",
                                    "DEFAULT@SECLEVEL=0"},
                                   "");
  EXPECT_NE(s_client.exit_code, 0);
  EXPECT_NE((s_client.out + s_client.err).find("alert protocol version"), std::string::npos)
      << s_client.out << s_client.err;

  for (const char* v : {"1.2", "1.3"}) {
    auto r = curl({std::string("--tlsv") + v, "--tls-max", v, url("/healthz")});
    EXPECT_EQ(r.exit_code, 0) << v << ": " << r.err;
    EXPECT_EQ(r.out, "{\"status\":\"ok\"}") << v;
  }
}

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  start(options());
  auto r = curl({"-w", "|%{num_connects}\n", url("/healthz"), url("/readyz")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"status\":\"ok\"}|1\n{\"status\":\"not_ready\",\"reason\":\"warming up\"}|0\n");
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
  EXPECT_EQ(server_->stats().requests, 2u);
}

// A request that arrives while the previous response is still being written
// waits in the buffer, with a read pending meanwhile, and is parsed once the
// response is done. The gateway's tests found the request after it parsed
// from stale bytes: parsing the waiting one consumed the buffer under the
// pending read, whose bytes then landed where the buffer no longer read.
// Here request 2 is sent while an 8 MiB response is being written (the
// client does not read it yet), and request 3 after both answers: each
// echo must come back whole.
TEST_F(HttpServerTest, ARequestAfterOneThatWaitedForAResponseIsParsedWhole) {
  router_.add("GET", "/big", [](const HttpRequest&, std::shared_ptr<Exchange> ex) {
    ex->respond(200, {{"content-type", "application/octet-stream"}}, std::string(8 << 20, 'b'));
  });
  start(options());
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  auto echo = [](const std::string& body) {
    return "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
           body;
  };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    ASSERT_TRUE(c->send("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    ASSERT_TRUE(c->readUntil("HTTP/1.1 200", 5s).starts_with("HTTP/1.1 200"));
    const std::string second = "second " + std::to_string(round) + std::string(40, 's');
    ASSERT_TRUE(c->send(echo(second)));  // while the 8 MiB are still on their way
    std::string got = c->readUntil("\r\n\r\n" + second, 10s);
    ASSERT_NE(got.find("\r\n\r\n" + second), std::string::npos) << got.size() << " bytes";
    const std::string third = "third " + std::to_string(round);
    ASSERT_TRUE(c->send(echo(third)));
    got = c->readUntil("\r\n\r\n" + third, 5s);
    ASSERT_TRUE(got.starts_with("HTTP/1.1 200") && got.ends_with("\r\n\r\n" + third)) << got;
  }
  EXPECT_EQ(server_->stats().requests, 9u);
  EXPECT_EQ(server_->stats().connections_accepted, 1u);
}

TEST_F(HttpServerTest, StreamsServerSentEventsFromAnotherThread) {
  start(options());
  auto r = curl({"-N", "--raw", "-D", "-", url("/stream")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t split = r.out.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos) << r.out;
  const std::string head = r.out.substr(0, split + 2);
  EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  EXPECT_NE(head.find("transfer-encoding: chunked"), std::string::npos) << head;
  EXPECT_NE(head.find("content-type: text/event-stream"), std::string::npos) << head;
  EXPECT_NE(head.find("x-request-id: req_"), std::string::npos) << head;
  auto chunks = decodeChunks(std::string_view(r.out).substr(split + 4));
  ASSERT_TRUE(chunks.has_value()) << r.out;
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(event(i));
  expected.push_back("data: [DONE]\n\n");
  EXPECT_EQ(*chunks, expected);

  // Events leave as they are produced, not when the stream ends.
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send("GET /slow-stream HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  const auto t0 = Clock::now();
  c->readUntil(event(0), 5s);
  const long long first_ms = msSince(t0);
  EXPECT_EQ(c->received().find("[DONE]"), std::string::npos);
  c->readUntil("0\r\n\r\n", 5s);
  EXPECT_NE(c->received().find("[DONE]"), std::string::npos);
  EXPECT_LT(first_ms + 250, msSince(t0)) << "first event after " << first_ms << " ms";
  // The connection is kept: another request on it.
  ASSERT_TRUE(c->send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_NE(c->readUntil("{\"status\":\"ok\"}", 5s).find("{\"status\":\"ok\"}"), std::string::npos);
}

TEST_F(HttpServerTest, TheHandlersOwnCallsComeBeforeAProducersEvenWhenLater) {
  start(options());
  auto r = curl({"-N", url("/start-late")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "data: early\n\n");
}

TEST_F(HttpServerTest, AClientThatLeavesMidStreamIsNoticedAtOnce) {
  start(options());
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send("GET /forever HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  ASSERT_NE(c->readUntil("data: first", 5s).find("data: first"), std::string::npos);
  auto when = disconnected_.get_future();
  const auto t0 = Clock::now();
  c->abort();  // no close_notify: the process died, say
  ASSERT_EQ(when.wait_for(2s), std::future_status::ready);
  const auto ms = std::chrono::duration<double, std::milli>(when.get() - t0).count();
  std::printf("onDisconnect %.2f ms after the client closed mid-stream\n", ms);
  EXPECT_LT(ms, 100.0);
  EXPECT_EQ(disconnectCause(), DisconnectCause::kClientClosed);  // the client's doing: billed as cancelled
  EXPECT_TRUE(held_.back()->disconnected());
  // Calls after the disconnect are ignored.
  held_.back()->send("data: late\n\n");
  held_.back()->end();
  EXPECT_EQ(server_->stats().disconnects, 1u);
}

TEST_F(HttpServerTest, AClientThatLeavesWhileWaitingIsNoticedToo) {
  start(options());
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send("GET /hang HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  ASSERT_EQ(got_exchange_.get_future().wait_for(5s), std::future_status::ready);
  auto when = disconnected_.get_future();
  const auto t0 = Clock::now();
  c->abort();
  ASSERT_EQ(when.wait_for(2s), std::future_status::ready);
  const double ms = std::chrono::duration<double, std::milli>(when.get() - t0).count();
  EXPECT_LT(ms, 100.0);
  EXPECT_EQ(disconnectCause(), DisconnectCause::kClientClosed);
}

TEST_F(HttpServerTest, AHugeBodyGets413WithAnOpenAiError) {
  HttpServerOptions o = options();
  o.limits.max_body_bytes = 64 * 1024;
  start(o);
  const std::string file = tmp_.file("big.json");
  std::ofstream(file) << std::string(2 << 20, 'x');
  // With Expect: 100-continue (curl's default for a body this size), without
  // it (the body is on its way while the server answers), and chunked.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"-H", "Expect:"}, {"-H", "Transfer-Encoding: chunked"}}) {
    std::vector<std::string> args = {"-X", "POST", "--data-binary", "@" + file, "-H", "content-type: application/json",
                                     "-w", "\n%{http_code}", url("/echo")};
    args.insert(args.begin(), extra.begin(), extra.end());
    auto r = curl(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(r.out.ends_with("\n413")) << r.out;
    auto j = nlohmann::json::parse(r.out.substr(0, r.out.rfind('\n')));
    EXPECT_EQ(j["error"]["code"], "request_too_large");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("65536"), std::string::npos);
  }
  // Under the limit the body arrives whole.
  std::ofstream(tmp_.file("ok.bin")) << std::string(60000, 'y');
  auto ok = curl({"-X", "POST", "--data-binary", "@" + tmp_.file("ok.bin"), url("/echo")});
  EXPECT_EQ(ok.out, std::string(60000, 'y'));
}

TEST_F(HttpServerTest, ExpectContinueIsAnsweredAtOnce) {
  start(options());
  std::ofstream(tmp_.file("body.bin")) << std::string(3 << 20, 'z');  // curl asks 100-continue beyond 1 MiB
  auto r = curl({"-X", "POST", "--data-binary", "@" + tmp_.file("body.bin"), "-H", "Expect: 100-continue", "-o",
                 tmp_.file("out.bin"), "-w", "%{http_code} %{time_total}", url("/echo")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("200 ")) << r.out;
  // curl waits a whole second for a 100 that never comes.
  EXPECT_LT(std::stod(r.out.substr(4)), 0.9) << r.out;
  std::ifstream in(tmp_.file("out.bin"), std::ios::binary);
  const std::string echoed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(echoed, std::string(3 << 20, 'z'));
}

// Issue 21 item 6, request smuggling: a request whose framing a proxy in
// front could read another way is 400 (501 for a coding under chunked) and
// ends the connection; what follows it is never parsed as a request. Before
// the fix `Transfer-Encoding: gzip` was taken as "no body", and the body,
// here a whole GET /hang, was served as a second request.
TEST_F(HttpServerTest, AmbiguousFramingIsRefusedAndNothingAfterItIsParsed) {
  start(options());
  const std::string smuggled = "GET /hang HTTP/1.1\r\nHost: localhost\r\n\r\n";
  struct Case {
    std::string what;
    std::string fields;
    int status;
  };
  for (const Case& c : std::vector<Case>{
           {"a final coding that is not chunked", "Transfer-Encoding: gzip\r\n", 400},
           {"chunked, then identity", "Transfer-Encoding: chunked, identity\r\n", 400},
           {"chunked, then another field", "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", 400},
           {"Transfer-Encoding with Content-Length", "Transfer-Encoding: gzip\r\nContent-Length: 42\r\n", 400},
           {"Content-Length with Transfer-Encoding", "Content-Length: 42\r\nTransfer-Encoding: chunked\r\n", 400},
           {"chunked twice", "Transfer-Encoding: chunked, chunked\r\n", 400},
           {"obs-fold", "X-Folded: a\r\n b\r\nContent-Length: 42\r\n", 400},
           {"obs-fold with a tab", "X-Folded: a\r\n\tTransfer-Encoding: chunked\r\n", 400},
           {"a coding under chunked", "Transfer-Encoding: gzip, chunked\r\n", 501},
       }) {
    SCOPED_TRACE(c.what);
    auto client = RawClient::connect(server_->port());
    ASSERT_TRUE(client && client->startTls(tls_.ca_cert_path));
    ASSERT_TRUE(client->send("POST /echo HTTP/1.1\r\nHost: localhost\r\n" + c.fields + "\r\n" + smuggled));
    EXPECT_TRUE(client->waitClosed(5s));
    const std::string& got = client->received();
    EXPECT_TRUE(got.starts_with("HTTP/1.1 " + std::to_string(c.status))) << got;
    const size_t first_id = got.find("\r\nx-request-id: ");  // one per response
    EXPECT_NE(first_id, std::string::npos) << got;
    EXPECT_EQ(got.find("\r\nx-request-id: ", first_id + 1), std::string::npos) << "a second response: " << got;
    EXPECT_NE(got.find("connection: close"), std::string::npos) << got;
    const size_t split = got.find("\r\n\r\n");
    ASSERT_NE(split, std::string::npos) << got;
    auto j = nlohmann::json::parse(got.substr(split + 4), nullptr, false);
    EXPECT_TRUE(j.is_object() && j["error"].is_object()) << got;
  }
  // HTTP/1.0 has no chunked coding.
  auto old = RawClient::connect(server_->port());
  ASSERT_TRUE(old && old->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(old->send("POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"));
  EXPECT_TRUE(old->waitClosed(5s));
  EXPECT_TRUE(old->received().starts_with("HTTP/1.1 400")) << old->received();
  EXPECT_EQ(server_->stats().requests, 0u) << "a refused request reached a handler";
  // A plain chunked body is still served.
  auto fine = RawClient::connect(server_->port());
  ASSERT_TRUE(fine && fine->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(fine->send("POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "5\r\nhello\r\n0\r\n\r\n"));
  EXPECT_TRUE(fine->readUntil("hello", 5s).ends_with("\r\n\r\nhello")) << fine->received();
}

// Issue 21 item 12: no response may be sniffed as another type (a JSON error
// that quotes a client's path, read by a browser as HTML): every response
// says nosniff, once, whatever its handler set.
TEST_F(HttpServerTest, EveryResponseSaysNosniffOnce) {
  router_.add("GET", "/own-nosniff", [](const HttpRequest&, std::shared_ptr<Exchange> ex) {
    ex->respond(200, {{"content-type", "text/html"}, {"X-Content-Type-Options", "nosniff"}}, "<p>hi</p>");
  });
  start(options());
  for (const std::string path : {"/healthz", "/v1/nothing", "/own-nosniff", "/stream"}) {
    auto r = curl({"-D", "-", "-o", "/dev/null", url(path)});
    ASSERT_EQ(r.exit_code, 0) << path << ": " << r.err;
    const size_t at = r.out.find("x-content-type-options: nosniff\r\n");
    EXPECT_NE(at, std::string::npos) << path << ": " << r.out;
    EXPECT_EQ(r.out.find("ontent-type-options", at + 10), std::string::npos) << path << ": twice: " << r.out;
  }
}

TEST_F(HttpServerTest, HandlerBugsNeverLeakOrCorruptResponses) {
  start(options());
  // An exception: a bare 500, the text only in the log.
  auto r = curl({"-w", "\n%{http_code}", url("/throws")});
  ASSERT_TRUE(r.out.ends_with("\n500")) << r.out;
  EXPECT_EQ(r.out.find("passwd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"type\":\"server_error\""), std::string::npos) << r.out;
  // An Exchange used out of order: the connection is closed, nothing malformed is sent.
  auto misuse = curl({url("/misuse")});
  EXPECT_NE(misuse.exit_code, 0);
  // A header value with CR LF is dropped, the rest is sent.
  auto h = curl({"-D", "-", url("/bad-header")});
  EXPECT_EQ(h.out.find("evil"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("x-fine: yes"), std::string::npos) << h.out;
  // HEAD: the length of the body, not the body.
  auto head = curl({"-I", url("/healthz")});
  EXPECT_NE(head.out.find("content-length: 15"), std::string::npos) << head.out;
  EXPECT_EQ(head.out.find("status"), std::string::npos) << head.out;
  EXPECT_EQ(curl({url("/healthz")}).out, "{\"status\":\"ok\"}");
}

TEST_F(HttpServerTest, OversizedHeadersGet431) {
  start(options());
  auto r = curl({"-H", "x-big: " + std::string(20000, 'a'), "-w", "\n%{http_code}", url("/healthz")});
  ASSERT_TRUE(r.out.ends_with("\n431")) << r.out;
  EXPECT_NE(r.out.find("\"code\":\"request_header_fields_too_large\""), std::string::npos) << r.out;
}

TEST_F(HttpServerTest, SlowClientsAreCutOffWhileOthersAreServed) {
  HttpServerOptions o = options();
  o.header_timeout = 500ms;
  start(o);
  const auto t0 = Clock::now();
  auto silent = RawClient::connect(server_->port());  // never starts TLS
  auto half = RawClient::connect(server_->port());
  ASSERT_TRUE(silent && half && half->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(half->send("GET /healthz HTTP/1.1\r\nHo"));  // and waits
  auto r = curl({url("/healthz")});
  EXPECT_EQ(r.out, "{\"status\":\"ok\"}") << r.err;

  EXPECT_TRUE(silent->waitClosed(5s));
  const long long silent_ms = msSince(t0);
  EXPECT_TRUE(half->waitClosed(5s));
  const long long half_ms = msSince(t0);
  EXPECT_GE(silent_ms, 400);
  EXPECT_LT(silent_ms, 2500);
  EXPECT_LT(half_ms, 2500);
  EXPECT_TRUE(half->received().starts_with("HTTP/1.1 408")) << half->received();
  EXPECT_NE(half->received().find("\"code\":\"request_timeout\""), std::string::npos) << half->received();
  EXPECT_EQ(server_->stats().header_timeouts, 2u);
  std::printf("slow clients cut off after %lld ms (silent) and %lld ms (half a header)\n", silent_ms, half_ms);
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionsAreClosed) {
  HttpServerOptions o = options();
  o.idle_timeout = 300ms;
  start(o);
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  c->readUntil("{\"status\":\"ok\"}", 5s);
  const auto t0 = Clock::now();
  EXPECT_TRUE(c->waitClosed(5s));
  EXPECT_GE(msSince(t0), 250);
  EXPECT_EQ(server_->stats().header_timeouts, 0u);  // idleness is not a slow client
}

TEST_F(HttpServerTest, TlsGarbageDoesNotHurtTheServer) {
  start(options());
  std::mt19937 rng(7);
  for (int i = 0; i < 6; ++i) {
    auto c = RawClient::connect(server_->port());
    ASSERT_TRUE(c);
    std::string junk(4096, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    // Half of them look like the start of a TLS handshake record.
    if (i % 2 == 1) junk.replace(0, 5, std::string("\x16\x03\x01\x02\x00", 5));
    c->send(junk);
    EXPECT_TRUE(c->waitClosed(5s)) << i;
  }
  // Garbage inside a good TLS connection is a bad request.
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send(std::string("\x01\xff\x00 nonsense\r\n\r\n", 16)));
  EXPECT_TRUE(c->waitClosed(5s));
  EXPECT_TRUE(c->received().starts_with("HTTP/1.1 400")) << c->received();

  EXPECT_EQ(curl({url("/healthz")}).out, "{\"status\":\"ok\"}");
  EXPECT_EQ(server_->stats().tls_handshake_failures, 6u);
}

TEST_F(HttpServerTest, AFloodBeyondTheCapIsClosedQuicklyAndServiceResumes) {
  HttpServerOptions o = options();
  o.max_connections = 4;
  start(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) held.push_back(RawClient::connect(server_->port()));
  for (int i = 0; i < 200 && server_->stats().connections_open < 4; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server_->stats().connections_open, 4u);

  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 50; ++i) {
    auto c = RawClient::connect(server_->port());
    if (c) flood.push_back(std::move(c));
  }
  int closed = 0;
  for (auto& c : flood) closed += c->waitClosed(3s);
  const long long flood_ms = msSince(t0);
  EXPECT_EQ(closed, static_cast<int>(flood.size()));
  EXPECT_LT(flood_ms, 3000);
  EXPECT_GE(server_->stats().connections_refused, flood.size());
  std::printf("%zu connections over the cap closed within %lld ms\n", flood.size(), flood_ms);

  held.clear();
  for (int i = 0; i < 300 && server_->stats().connections_open > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->stats().connections_open, 0u);
  EXPECT_EQ(curl({url("/healthz")}).out, "{\"status\":\"ok\"}");
}

TEST_F(HttpServerTest, ANonStreamedResponseLateBeyondTheRequestTimeoutIs504) {
  HttpServerOptions o = options();
  o.request_timeout = 300ms;
  start(o);
  auto r = curl({"-w", "\n%{http_code}", url("/hang")});
  ASSERT_TRUE(r.out.ends_with("\n504")) << r.out;
  EXPECT_NE(r.out.find("\"code\":\"timeout\""), std::string::npos) << r.out;
  // The producer was told to stop; its late answer is ignored.
  auto when = disconnected_.get_future();
  EXPECT_EQ(when.wait_for(1s), std::future_status::ready);
  // The server's own limit, not the client's doing: never billed.
  EXPECT_EQ(disconnectCause(), DisconnectCause::kRequestTimeout);
  EXPECT_FALSE(clientCaused(disconnectCause()));
  held_.back()->respond(200, {}, "late");
  EXPECT_EQ(server_->stats().request_timeouts, 1u);
  EXPECT_EQ(curl({url("/healthz")}).out, "{\"status\":\"ok\"}");
}

TEST_F(HttpServerTest, GracefulStopLetsAStreamInFlightFinish) {
  start(options());
  test::ProcessResult result;
  std::thread client([&] { result = curl({"-N", url("/slow-stream")}); });
  ASSERT_EQ(stream_started_.get_future().wait_for(10s), std::future_status::ready);
  const auto t0 = Clock::now();
  server_->stop(Clock::now() + 5s);
  const long long stop_ms = msSince(t0);
  client.join();
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::string all;
  for (int i = 0; i < 5; ++i) all += event(i);
  EXPECT_EQ(result.out, all + "data: [DONE]\n\n");
  EXPECT_GE(stop_ms, 300);
  EXPECT_LT(stop_ms, 4000);
  // Stopped: nothing is served any more.
  auto late = RawClient::connect(server_->port());
  EXPECT_TRUE(!late || late->waitClosed(2s));
}

TEST_F(HttpServerTest, StopClosesWhatOutlivesTheDeadline) {
  start(options());
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send("GET /forever HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  ASSERT_NE(c->readUntil("data: first", 5s).find("data: first"), std::string::npos);
  const auto t0 = Clock::now();
  server_->stop(Clock::now() + 200ms);
  EXPECT_LT(msSince(t0), 2000);
  auto when = disconnected_.get_future();
  EXPECT_EQ(when.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(disconnectCause(), DisconnectCause::kShutdown);
  EXPECT_TRUE(c->waitClosed(2s));
  // The producer may go on calling the exchange after the server is gone.
  held_.back()->send("data: after stop\n\n");
  held_.back()->end();
  server_.reset();
  held_.back()->send("data: after destruction\n\n");
  EXPECT_TRUE(held_.back()->disconnected());
}

TEST_F(HttpServerTest, PlainHttpWhenAskedPipeliningAndHttp10) {
  HttpServerOptions o = options();
  o.plain_http = true;
  o.cert_chain_pem.clear();
  o.key_pem.clear();
  start(o);
  EXPECT_EQ(curl({url("/healthz")}).out, "{\"status\":\"ok\"}");

  // Two requests in one write: two responses, in order.
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string both = c->readUntil("Invalid URL", 5s);
  const size_t ok = both.find("HTTP/1.1 200"), missing = both.find("HTTP/1.1 404");
  ASSERT_NE(ok, std::string::npos) << both;
  ASSERT_NE(missing, std::string::npos) << both;
  EXPECT_LT(ok, missing);

  // HTTP/1.0 has no chunked encoding: the stream's end is the connection's.
  auto old = RawClient::connect(server_->port());
  ASSERT_TRUE(old);
  ASSERT_TRUE(old->send("GET /stream HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(old->waitClosed(5s));
  const std::string& r = old->received();
  const size_t split = r.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos) << r;
  EXPECT_EQ(r.find("transfer-encoding"), std::string::npos) << r;
  EXPECT_NE(r.find("connection: close"), std::string::npos) << r;
  std::string all;
  for (int i = 0; i < 5; ++i) all += event(i);
  EXPECT_EQ(r.substr(split + 4), all + "data: [DONE]\n\n");

  // Garbage is a 400 in OpenAI's format.
  auto bad = RawClient::connect(server_->port());
  ASSERT_TRUE(bad && bad->send("NOT HTTP AT ALL\r\n\r\n"));
  EXPECT_TRUE(bad->waitClosed(5s));
  EXPECT_TRUE(bad->received().starts_with("HTTP/1.1 400")) << bad->received();
  EXPECT_NE(bad->received().find("\"type\":\"invalid_request_error\""), std::string::npos);
}

TEST_F(HttpServerTest, PlainHttpOverTheCapGetsA503) {
  HttpServerOptions o = options();
  o.plain_http = true;
  o.max_connections = 1;
  start(o);
  auto held = RawClient::connect(server_->port());
  for (int i = 0; i < 200 && server_->stats().connections_open < 1; ++i) std::this_thread::sleep_for(10ms);
  auto refused = RawClient::connect(server_->port());
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->waitClosed(3s));
  EXPECT_TRUE(refused->received().starts_with("HTTP/1.1 503")) << refused->received();
  EXPECT_NE(refused->received().find("retry-after: 1"), std::string::npos);
}

TEST_F(HttpServerTest, StartFailsCleanlyOnABusyPortOrBadMaterial) {
  start(options());
  HttpServerOptions o = options();
  o.port = server_->port();
  auto busy = HttpServer::start(o, router_.handler());
  ASSERT_FALSE(busy.isOk());
  EXPECT_NE(busy.status().message().find(std::to_string(o.port)), std::string::npos) << busy.status().message();
  o = options();
  o.key_pem = "not a key";
  EXPECT_FALSE(HttpServer::start(o, router_.handler()).isOk());
  o = options();
  o.host = "no-such-host.invalid";
  EXPECT_FALSE(HttpServer::start(o, router_.handler()).isOk());
}

}  // namespace
}  // namespace lg::proxy

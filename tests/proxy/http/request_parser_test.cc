// RequestParser (the bytes -> HttpRequest step the server and the fuzz target
// share), Router, and the OpenAI error objects, without sockets.
#include "proxy/http/request_parser.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "proxy/http/health_routes.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/router.h"

namespace lg::proxy {
namespace {

// Feeds `bytes` in pieces of `step`, keeping unconsumed bytes as the server does.
RequestParser::State feedInPieces(RequestParser& p, std::string_view bytes, size_t step, std::string* rest = nullptr) {
  std::string pending;
  for (size_t i = 0; i < bytes.size(); i += step) {
    pending.append(bytes.substr(i, step));
    pending.erase(0, p.feed(pending));
    if (p.state() == RequestParser::State::kComplete || p.state() == RequestParser::State::kFailed) break;
  }
  if (rest != nullptr) *rest = pending;
  return p.state();
}

TEST(RequestParserTest, ParsesARequestFedByteByByte) {
  const std::string text =
      "POST /v1/chat/completions?stream=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "X-Twice: a\r\nx-twice: b\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
  for (size_t step : {size_t{1}, size_t{7}, text.size()}) {
    RequestParser p({});
    ASSERT_EQ(feedInPieces(p, text, step), RequestParser::State::kComplete) << step;
    EXPECT_TRUE(p.keepAlive());
    HttpRequest r = p.take();
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.target, "/v1/chat/completions?stream=1");
    EXPECT_EQ(r.path, "/v1/chat/completions");
    EXPECT_EQ(r.query, "stream=1");
    EXPECT_EQ(r.version, 11);
    EXPECT_EQ(r.body, "{\"a\":1}");
    EXPECT_EQ(r.headers.get("content-type"), "application/json");
    EXPECT_EQ(r.headers.get("CONTENT-TYPE"), "application/json");
    EXPECT_EQ(r.headers.get("x-twice"), "a");  // the first occurrence; both are kept
    int twice = 0;
    for (const auto& [name, value] : r.headers.fields()) twice += equalsIgnoreCase(name, "x-twice");
    EXPECT_EQ(twice, 2);
    EXPECT_FALSE(r.headers.has("missing"));
  }
}

TEST(RequestParserTest, ChunkedBodiesPipelinedRequestsAndAbsoluteTargets) {
  const std::string chunked =
      "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  const std::string next = "GET / HTTP/1.1\r\n\r\n";
  RequestParser p({});
  std::string rest;
  ASSERT_EQ(feedInPieces(p, chunked + next, 5, &rest), RequestParser::State::kComplete);
  EXPECT_EQ(p.take().body, "abcde");
  // What follows a complete request is left for the next parser.
  EXPECT_TRUE(next.starts_with(rest)) << rest;

  RequestParser absolute({});
  absolute.feed("GET https://example.com:8443/v1/models?x=1 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(absolute.state(), RequestParser::State::kComplete);
  const HttpRequest r = absolute.take();
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1");

  RequestParser v10({});
  v10.feed("GET / HTTP/1.0\r\n\r\n");
  ASSERT_EQ(v10.state(), RequestParser::State::kComplete);
  EXPECT_FALSE(v10.keepAlive());
  EXPECT_EQ(v10.version(), 10);
}

TEST(RequestParserTest, LimitsAndMalformedInputBecomeStatuses) {
  ParserLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 100;

  RequestParser big_header(limits);
  const std::string header = "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n";
  EXPECT_EQ(feedInPieces(big_header, header, 512), RequestParser::State::kFailed);
  EXPECT_EQ(big_header.failure().status, 431);

  // The limit covers the request line and the fields together, whether the
  // header arrives at once or a byte at a time (Beast alone bounds each part
  // on its own when it has the whole header: found by the fuzz target).
  const std::string split_header = "GET /" + std::string(600, 'p') + " HTTP/1.1\r\nX-A: " + std::string(600, 'a') + "\r\n\r\n";
  for (size_t step : {size_t{1}, size_t{100}, split_header.size()}) {
    RequestParser p(limits);
    EXPECT_EQ(feedInPieces(p, split_header, step), RequestParser::State::kFailed) << step;
    EXPECT_EQ(p.failure().status, 431) << step;
  }
  const std::string at_limit = "GET / HTTP/1.1\r\nX-A: " + std::string(1024 - 16 - 9, 'a') + "\r\n\r\n";
  ASSERT_EQ(at_limit.size(), 1024u);
  for (size_t step : {size_t{1}, size_t{100}, at_limit.size()}) {
    RequestParser p(limits);
    EXPECT_EQ(feedInPieces(p, at_limit, step), RequestParser::State::kComplete) << step;
    RequestParser over(limits);
    EXPECT_EQ(feedInPieces(over, "GET /x" + at_limit.substr(5), step), RequestParser::State::kFailed) << step;
  }

  // A declared length over the limit fails before any body byte arrives.
  RequestParser declared(limits);
  declared.feed("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n");
  EXPECT_EQ(declared.state(), RequestParser::State::kFailed);
  EXPECT_EQ(declared.failure().status, 413);

  RequestParser chunked(limits);
  std::string body = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) body += "a\r\n0123456789\r\n";
  EXPECT_EQ(feedInPieces(chunked, body, 64), RequestParser::State::kFailed);
  EXPECT_EQ(chunked.failure().status, 413);

  for (const char* bad : {"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", "GE T / HTTP/1.1\r\n\r\n",
                          "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    RequestParser p(limits);
    p.feed(bad);
    EXPECT_EQ(p.state(), RequestParser::State::kFailed) << bad;
    EXPECT_EQ(p.failure().status, 400) << bad;
  }

  RequestParser h2(limits);
  h2.feed("GET / HTTP/2.0\r\n\r\n");
  EXPECT_EQ(h2.state(), RequestParser::State::kFailed);
  EXPECT_EQ(h2.failure().status, 505);

  RequestParser truncated(limits);
  truncated.feed("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
  EXPECT_EQ(truncated.state(), RequestParser::State::kBody);
  truncated.feedEof();
  EXPECT_EQ(truncated.state(), RequestParser::State::kFailed);
  EXPECT_EQ(truncated.failure().status, 400);
}

TEST(RequestParserTest, ExpectContinueIsReportedOnceTheHeaderIsDone) {
  RequestParser p({});
  p.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  ASSERT_EQ(p.state(), RequestParser::State::kBody);
  EXPECT_TRUE(p.expectsContinue());
  EXPECT_EQ(p.feed("abc"), 3u);
  EXPECT_EQ(p.state(), RequestParser::State::kComplete);
  EXPECT_FALSE(p.expectsContinue());
}

// Records what a handler answered.
class FakeExchange final : public Exchange {
 public:
  explicit FakeExchange(HttpRequest r) : request_(std::move(r)) {}
  const HttpRequest& request() const override { return request_; }
  void respond(int s, HttpHeaders h, std::string b) override {
    status = s;
    headers = std::move(h);
    body = std::move(b);
  }
  void startStream(int, HttpHeaders) override {}
  void send(std::string) override {}
  void end() override {}
  void onDisconnect(std::function<void(DisconnectCause)>) override {}
  bool disconnected() const override { return false; }

  int status = 0;
  HttpHeaders headers;
  std::string body;

 private:
  HttpRequest request_;
};

std::shared_ptr<FakeExchange> call(const Router& router, std::string method, std::string path) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  auto ex = std::make_shared<FakeExchange>(r);
  router.handle(ex->request(), ex);
  return ex;
}

TEST(RouterTest, ExactThenLongestPrefixThenMethod) {
  Router router;
  std::string hit;
  auto mark = [&hit](std::string name) {
    return [&hit, name](const HttpRequest&, std::shared_ptr<Exchange> ex) {
      hit = name;
      ex->respond(200, {}, "");
    };
  };
  router.add("GET", "/admin/keys", mark("list"));
  router.add("POST", "/admin/keys", mark("create"));
  router.addPrefix("DELETE", "/admin/keys/", mark("delete"));
  router.addPrefix("GET", "/admin/", mark("admin"));

  EXPECT_EQ(call(router, "GET", "/admin/keys")->status, 200);
  EXPECT_EQ(hit, "list");
  EXPECT_EQ(call(router, "POST", "/admin/keys")->status, 200);
  EXPECT_EQ(hit, "create");
  EXPECT_EQ(call(router, "DELETE", "/admin/keys/key_123")->status, 200);
  EXPECT_EQ(hit, "delete");
  EXPECT_EQ(call(router, "GET", "/admin/usage")->status, 200);
  EXPECT_EQ(hit, "admin");

  auto wrong = call(router, "PUT", "/admin/keys");
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->headers.get("allow"), "GET, POST");
  auto j = nlohmann::json::parse(wrong->body);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "method_not_allowed");

  auto unknown = call(router, "GET", "/v1/nothing");
  EXPECT_EQ(unknown->status, 404);
  j = nlohmann::json::parse(unknown->body);
  EXPECT_EQ(j["error"]["message"], "Invalid URL (GET /v1/nothing)");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(RouterTest, HealthAndReadiness) {
  Router router;
  std::atomic<bool> ready{false};
  addHealthRoutes(router, [&ready] { return ready ? Readiness{true, ""} : Readiness{false, "loading the model"}; });
  auto h = call(router, "GET", "/healthz");
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->body, R"({"status":"ok"})");
  auto r = call(router, "GET", "/readyz");
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(nlohmann::json::parse(r->body)["reason"], "loading the model");
  ready = true;
  EXPECT_EQ(call(router, "GET", "/readyz")->status, 200);
  EXPECT_EQ(call(router, "POST", "/healthz")->status, 405);
}

TEST(ApiErrorTest, BodyShapeRetryAfterAndBadUtf8) {
  ApiError e = overloadedError(3);
  // OpenAI's field order, compact.
  EXPECT_EQ(apiErrorBody(e), R"({"error":{"message":"The server is overloaded; retry later","type":"server_error",)"
                             R"("param":null,"code":"server_overloaded"}})");
  auto j = nlohmann::json::parse(apiErrorBody(e));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"].size(), 4u);
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_EQ(j["error"]["code"], "server_overloaded");
  EXPECT_EQ(apiErrorHeaders(e).get("retry-after"), "3");

  e = badRequestError("bad field");
  e.param = "messages";
  j = nlohmann::json::parse(apiErrorBody(e));
  EXPECT_EQ(j["error"]["param"], "messages");
  EXPECT_FALSE(apiErrorHeaders(e).has("retry-after"));

  // A client's invalid UTF-8 in a quoted path never breaks the JSON.
  e = unknownUrlError("GET", "/\xff\xfe" + std::string(1000, 'a'));
  j = nlohmann::json::parse(apiErrorBody(e));
  EXPECT_LT(j["error"]["message"].get<std::string>().size(), 300u);
}

}  // namespace
}  // namespace lg::proxy

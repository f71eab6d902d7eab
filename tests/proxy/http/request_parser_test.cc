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

// With hold_body the parser stops at the end of the header and reads no
// body byte until admitBody(): the server decides about the request first
// (issue 21 item 4).
TEST(RequestParserTest, AHeldBodyIsReadOnlyOnceAdmitted) {
  const std::string text = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /next";
  RequestParser p({}, /*hold_body=*/true);
  std::string pending = text;
  pending.erase(0, p.feed(pending));
  ASSERT_EQ(p.state(), RequestParser::State::kBody);
  EXPECT_EQ(pending, "helloGET /next");  // nothing of the body consumed
  EXPECT_EQ(p.head().path, "/x");
  EXPECT_EQ(p.declaredLength(), 5u);
  EXPECT_FALSE(p.chunked());
  EXPECT_EQ(p.feed(pending), 0u);  // still held
  p.admitBody(1024);
  pending.erase(0, p.feed(pending));
  ASSERT_EQ(p.state(), RequestParser::State::kComplete);
  EXPECT_EQ(pending, "GET /next");
  EXPECT_EQ(p.take().body, "hello");

  // A declared body over the route's limit fails at admission, unread.
  RequestParser over({}, true);
  over.feed("POST /x HTTP/1.1\r\nContent-Length: 2000\r\n\r\n");
  over.admitBody(1000);
  ASSERT_EQ(over.state(), RequestParser::State::kFailed);
  EXPECT_EQ(over.failure().status, 413);
  // A chunked one fails when it passes the limit.
  RequestParser chunked({}, true);
  std::string c = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  c.erase(0, chunked.feed(c));
  EXPECT_TRUE(chunked.chunked());
  chunked.admitBody(8);
  chunked.feed("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
  ASSERT_EQ(chunked.state(), RequestParser::State::kFailed);
  EXPECT_EQ(chunked.failure().status, 413);
}

// Issue 21 item 6: framing a proxy in front could read another way.
TEST(RequestParserTest, AmbiguousFramingAndObsFoldAreRefused) {
  for (const auto& [fields, status] : std::vector<std::pair<std::string, int>>{
           {"Transfer-Encoding: gzip\r\n", 400},
           {"Transfer-Encoding: chunked, identity\r\n", 400},
           {"Transfer-Encoding: chunked,chunked\r\n", 400},
           {"Transfer-Encoding: identity\r\nContent-Length: 3\r\n", 400},
           {"X-A: 1\r\n folded\r\n", 400},
           {"X-A: 1\r\n\tfolded\r\n", 400},
           {"Transfer-Encoding: gzip, chunked\r\n", 501},
       }) {
    for (bool hold : {false, true}) {
      RequestParser p({}, hold);
      p.feed("POST /x HTTP/1.1\r\nHost: x\r\n" + fields + "\r\nabc");
      ASSERT_EQ(p.state(), RequestParser::State::kFailed) << fields;
      EXPECT_EQ(p.failure().status, status) << fields;
    }
  }
  RequestParser http10({});
  http10.feed("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(http10.state(), RequestParser::State::kFailed);
  // Chunked alone, in any case, is fine; so is white space inside a value.
  RequestParser fine({});
  fine.feed("POST /x HTTP/1.1\r\nX-A: a b\t c\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  ASSERT_EQ(fine.state(), RequestParser::State::kComplete);
  EXPECT_EQ(fine.take().body, "abc");
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

// At header time: 404 and 405 as handle() answers them, the route's body
// size class, and a guarded route's header check (issue 21 item 4).
TEST(RouterTest, PreflightAnswersRoutesGuardsAndBodyLimits) {
  Router router;
  auto nothing = [](const HttpRequest&, std::shared_ptr<Exchange>) {};
  router.add("GET", "/open", nothing);
  router.add("POST", "/big", nothing, Runs::kOnIoThread, BodySize::kLarge);
  GuardedHandler guarded{nothing, [](const HttpRequest& head) -> std::optional<ApiError> {
                           if (head.headers.get("x-pass") == "yes") return std::nullopt;
                           ApiError e;
                           e.http_status = 401;
                           e.message = "no";
                           return e;
                         }};
  router.add("POST", "/guarded", guarded);
  router.setBodyLimits(1000, 10);
  auto ask = [&](std::string method, std::string path, HttpHeaders headers = {}) {
    HttpRequest head;
    head.method = std::move(method);
    head.path = std::move(path);
    head.headers = std::move(headers);
    return router.preflight(head);
  };
  EXPECT_EQ(ask("GET", "/nope").refusal->http_status, 404);
  const HeadDecision wrong = ask("DELETE", "/open");
  EXPECT_EQ(wrong.refusal->http_status, 405);
  EXPECT_EQ(wrong.refusal_headers.get("allow"), "GET");
  const HeadDecision open = ask("GET", "/open");
  EXPECT_FALSE(open.refusal);
  EXPECT_FALSE(open.authenticated);
  EXPECT_EQ(open.max_body_bytes, 10u);
  EXPECT_EQ(ask("POST", "/big").max_body_bytes, 1000u);
  EXPECT_EQ(ask("POST", "/guarded").refusal->http_status, 401);
  const HeadDecision passed = ask("POST", "/guarded", {{"X-Pass", "yes"}});
  EXPECT_FALSE(passed.refusal);
  EXPECT_TRUE(passed.authenticated);
  EXPECT_EQ(router.find("POST", "/guarded"), 2);
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

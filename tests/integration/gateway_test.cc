// The gateway end to end with bad input (issue 11): the whole server as
// `latentgate serve` builds it (the integration harness, harness.h) over TLS
// with the generated CA, on a small random-weight model. Every refusal is
// checked as a client reads it (status, OpenAI error object, Retry-After, no
// internals), and after each one the server still answers a real generation
// request.
//
// The model: the `demo` preset's architecture cut to 2 layers (harness.h),
// which keeps the real tokenizer's 129,280 ids: every chat prompt the
// DeepSeek-V3 template renders holds ids far above the 2,048 of the fixture
// checkpoints. The context is 512 tokens, so that an overlong prompt is
// short to send. No end-of-sequence token is configured, so a reply has
// exactly max_tokens tokens.
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "proxy/openai/chat_request.h"
#include "proxy/openai/prompt_encoder.h"
#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"
#include "tests/proxy/http/test_client.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::RawClient;
using Clock = std::chrono::steady_clock;

constexpr const char* kModel = "demo";
constexpr int kBlockTokens = 16;  // the harness's cache.block_tokens
constexpr int32_t kMaxContext = 512;  // and engine.max_context
// The stream that runs during an attack: as long as the context allows, about
// 2.5 s on two shared cores, longer than any attack below (each checks it).
constexpr int kLongStream = 480;

// What a client reads back.
struct Reply : testing::CurlReply {
  json error() const {
    json j = json::parse(body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"] : json();
  }
};

// What an error message must never hold: file paths, exception text, the
// Status codes internal errors carry. (Client input a message quotes is the
// client's own; the bodies below quote none of these.)
void expectNoInternals(const std::string& body, const std::string& data_dir) {
  for (const std::string& bad : {data_dir, test::integrationModelDir(), std::string("/tmp/"), std::string("/work"),
                                 std::string(".cc"), std::string("exception"), std::string("what()"),
                                 std::string("std::"), std::string("nlohmann"), std::string("InvalidArgument"),
                                 std::string("NotFound:"), std::string("Unavailable"), std::string("Internal:"),
                                 std::string("DataLoss")}) {
    EXPECT_EQ(body.find(bad), std::string::npos) << "'" << bad << "' in " << body;
  }
}

json chatBody(int max_tokens, bool stream = false, std::string content = "Hello") {
  json b = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", std::move(content)}}}},
            {"max_tokens", max_tokens}};
  if (stream) b["stream"] = true;
  return b;
}

std::string httpPost(const std::string& path, const std::string& body, const std::string& key) {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + key +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// What a test may change before start(): the configuration `serve` would
// read (server.*, serving.*, limits.*, cache.shared_namespaces, ...).
struct GatewaySetup {
  Config config = test::HarnessOptions::defaultConfig();
};

class GatewayTest : public ::testing::Test {
 protected:
  void start(const GatewaySetup& setup = {}) {
    test::HarnessOptions options;
    options.config = setup.config;
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    admin_key_ = harness_->adminKey();
    key_ = newKey("team-a");
  }

  std::string newKey(const std::string& team) {
    const std::string key = harness_->newKey(team, "gateway test");
    EXPECT_FALSE(key.empty());
    return key;
  }

  std::string url(const std::string& path) const { return harness_->url(path); }
  serving::Scheduler& scheduler() const { return harness_->server().scheduler(); }
  const std::string& caFile() const { return harness_->caFile(); }
  uint16_t port() const { return harness_->port(); }

  // curl with the CA; the reply's head, body and status. `extra` comes
  // before the URL. Expect: 100-continue is off unless `extra` sets it.
  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra) const {
    return {testing::curlOverTls(caFile(), port(), method, path, extra, 120)};
  }

  Reply post(const std::string& path, const std::string& body, const std::optional<std::string>& key) const {
    std::vector<std::string> extra = {"-H", "content-type: application/json", "--data-binary", body};
    if (key) extra.insert(extra.end(), {"-H", "Authorization: Bearer " + *key});
    return curl("POST", path, extra);
  }
  Reply chat(const json& body, const std::string& key) const { return post("/v1/chat/completions", body.dump(), key); }
  Reply chat(const json& body) const { return chat(body, key_); }
  Reply chatText(const std::string& body) const { return post("/v1/chat/completions", body, key_); }

  // The error a client reads: status, OpenAI's object with type, code and
  // param (nullopt: null), a request id, and nothing internal.
  void expectError(const Reply& r, int status, const std::string& type, const std::optional<std::string>& code,
                   const std::optional<std::string>& param, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(r.status, status) << r.head << "\n" << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json") << r.head;
    EXPECT_TRUE(r.header("x-request-id").has_value()) << r.head;
    const json e = r.error();
    ASSERT_TRUE(e.is_object()) << r.body;
    EXPECT_EQ(e.size(), 4u) << r.body;
    EXPECT_EQ(e["type"], type) << r.body;
    EXPECT_EQ(e["code"], code ? json(*code) : json(nullptr)) << r.body;
    EXPECT_EQ(e["param"], param ? json(*param) : json(nullptr)) << r.body;
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    expectNoInternals(r.body, harness_->dataDir());
  }

  // A real generation: 4 tokens of a chat reply, served whole.
  void expectServes(const std::string& what) {
    SCOPED_TRACE(what);
    const Reply r = chat(chatBody(4));
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 4);
    EXPECT_TRUE(r.header("server-timing").has_value()) << r.head;
  }

  // A streamed chat request on a raw TLS connection, so that the test decides
  // when it goes away; returns once the stream has started (the role chunk).
  std::unique_ptr<RawClient> startStream(int max_tokens) {
    auto c = RawClient::connect(port());
    EXPECT_TRUE(c && c->startTls(caFile()));
    if (!c) return nullptr;
    EXPECT_TRUE(c->send(httpPost("/v1/chat/completions", chatBody(max_tokens, true).dump(), key_)));
    const std::string got = c->readUntil("\"role\":\"assistant\"", 30s);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200")) << got;
    return c;
  }

  // Waits until `done` holds for the scheduler's stats.
  bool waitForStats(const std::function<bool(const serving::SchedulerStats&)>& done,
                    std::chrono::milliseconds timeout = 30s) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (done(scheduler().schedulerStats())) return true;
      std::this_thread::sleep_for(2ms);
    }
    return done(scheduler().schedulerStats());
  }
  static bool idle(const serving::SchedulerStats& s) {
    return s.queued + s.looking_up + s.prefilling + s.decoding == 0;
  }
  static uint64_t finished(const serving::SchedulerStats& s, serving::FinishReason reason) {
    return s.finished[static_cast<size_t>(reason)];
  }

  // Reads a stream to its end and checks that it ended well: [DONE] after a
  // chunk with finish_reason "length", no error chunk.
  static void expectStreamCompletes(RawClient& c, const std::string& what) {
    SCOPED_TRACE(what);
    const std::string got = c.readUntil("data: [DONE]", 120s);
    EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got.substr(0, 2000);
    EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_EQ(got.find("\"error\""), std::string::npos);
  }

  std::unique_ptr<test::Harness> harness_;
  std::string admin_key_;
  std::string key_;  // team-a's
};

TEST_F(GatewayTest, AChatRequestIsServedAndAnAliasToo) {
  start();
  expectServes("the served model's name");
  json alias = chatBody(3);
  alias["model"] = "deepseek-chat";
  const Reply r = chat(alias);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["model"], "deepseek-chat");
}

TEST_F(GatewayTest, MalformedJsonIs400InvalidJson) {
  start();
  for (const std::string& body : {std::string(R"({"model": "demo", "messages": [)"), std::string("not json at all"),
                                 std::string(R"({"model": "demo"} trailing)"), std::string("[1, 2, 3]"),
                                 std::string("\"a string\""), std::string(""), std::string(200, '[')}) {
    for (const std::string path : {"/v1/chat/completions", "/v1/completions", "/v1/responses"}) {
      expectError(post(path, body, key_), 400, "invalid_request_error", "invalid_json", std::nullopt,
                  path + " <- " + body.substr(0, 40));
    }
  }
  // Invalid UTF-8 inside a string is not JSON either.
  expectError(chatText(std::string(R"({"model": "demo", "messages": [{"role": "user", "content": "a)") + "\xff\xfe" +
                       "\"}]}"),
              400, "invalid_request_error", "invalid_json", std::nullopt, "invalid UTF-8");
  expectServes("after malformed JSON");
}

TEST_F(GatewayTest, WrongTypesAndValuesNameTheParam) {
  start();
  struct Case {
    std::string path;
    json body;
    std::string param;
    std::string code;
  };
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  const std::vector<Case> cases = {
      {"/v1/chat/completions", {{"model", kModel}, {"messages", "hello"}}, "messages", "invalid_type"},
      {"/v1/chat/completions", {{"model", 7}, {"messages", msgs}}, "model", "invalid_type"},
      {"/v1/chat/completions", {{"model", kModel}}, "messages", "missing_required_parameter"},
      {"/v1/chat/completions",
       {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", 5}}}}},
       "messages[0].content",
       "invalid_type"},
      {"/v1/chat/completions",
       {{"model", kModel}, {"messages", {{{"role", "wizard"}, {"content", "hi"}}}}},
       "messages[0].role",
       "invalid_value"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"max_tokens", "ten"}}, "max_tokens", "invalid_type"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"max_tokens", 0}}, "max_tokens", "integer_below_min_value"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"temperature", "hot"}}, "temperature", "invalid_type"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"temperature", 5}}, "temperature", "invalid_value"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"stream", "yes"}}, "stream", "invalid_type"},
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"n", 200}}, "n", "integer_above_max_value"},
      {"/v1/completions", {{"model", kModel}, {"prompt", {{"a", 1}}}}, "prompt", "invalid_type"},
      {"/v1/completions", {{"model", kModel}, {"prompt", "hi"}, {"max_tokens", -1}}, "max_tokens", "integer_below_min_value"},
      {"/v1/responses", {{"model", kModel}, {"input", 5}}, "input", "invalid_type"},
  };
  for (const Case& c : cases) {
    expectError(post(c.path, c.body.dump(), key_), 400, "invalid_request_error", c.code, c.param,
                c.path + " <- " + c.body.dump());
  }
  // A token id the model does not have: the scheduler's refusal, named as the request's field.
  expectError(post("/v1/completions", json{{"model", kModel}, {"prompt", {5, 999999999}}, {"max_tokens", 2}}.dump(), key_),
              400, "invalid_request_error", "invalid_value", "prompt", "token id out of range");
  expectServes("after wrong types");
}

TEST_F(GatewayTest, AnUnknownModelIs404ModelNotFound) {
  start();
  for (const std::string path : {"/v1/chat/completions", "/v1/completions", "/v1/responses"}) {
    json body = {{"model", "gpt-4o"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"prompt", "hi"},
                 {"input", "hi"}};
    if (path != "/v1/chat/completions") body.erase("messages");
    if (path != "/v1/completions") body.erase("prompt");
    if (path != "/v1/responses") body.erase("input");
    const Reply r = post(path, body.dump(), key_);
    expectError(r, 404, "invalid_request_error", "model_not_found", "model", path);
    EXPECT_NE(r.error()["message"].get<std::string>().find("gpt-4o"), std::string::npos) << r.body;
  }
  expectServes("after an unknown model");
}

TEST_F(GatewayTest, MissingWrongAndRevokedKeysAre401) {
  start();
  const std::string body = chatBody(2).dump();
  expectError(post("/v1/chat/completions", body, std::nullopt), 401, "invalid_request_error", "invalid_api_key",
              std::nullopt, "no Authorization");
  expectError(post("/v1/chat/completions", body, "lg-not-a-key"), 401, "invalid_request_error", "invalid_api_key",
              std::nullopt, "an unknown key");
  expectError(post("/v1/chat/completions", body, ""), 401, "invalid_request_error", "invalid_api_key", std::nullopt,
              "an empty bearer token");
  expectError(curl("POST", "/v1/chat/completions",
                   {"-H", "content-type: application/json", "-H", "Authorization: Basic " + key_, "--data-binary", body}),
              401, "invalid_request_error", "invalid_api_key", std::nullopt, "the key, but not as a Bearer token");
  expectError(curl("GET", "/v1/models", {}), 401, "invalid_request_error", "invalid_api_key", std::nullopt,
              "/v1/models without a key");
  // A user's key is not the admin key.
  expectError(curl("GET", "/admin/keys", {"-H", "Authorization: Bearer " + key_}), 401, "invalid_request_error",
              "invalid_api_key", std::nullopt, "a user key on the admin API");

  // Revoked through the admin API: refused from the next request on.
  const std::string doomed = newKey("team-b");
  ASSERT_EQ(chat(chatBody(2), doomed).status, 200);
  const Reply listed = curl("GET", "/admin/keys", {"-H", "Authorization: Bearer " + admin_key_});
  ASSERT_EQ(listed.status, 200) << listed.body;
  std::string doomed_id;
  const json keys = json::parse(listed.body);
  for (const json& k : keys["data"]) {
    if (k["team"] == "team-b") doomed_id = k["id"].get<std::string>();
  }
  ASSERT_FALSE(doomed_id.empty()) << listed.body;
  ASSERT_EQ(curl("DELETE", "/admin/keys/" + doomed_id, {"-H", "Authorization: Bearer " + admin_key_}).status, 200);
  expectError(chat(chatBody(2), doomed), 401, "invalid_request_error", "invalid_api_key", std::nullopt,
              "a revoked key");
  expectServes("after bad keys");
}

TEST_F(GatewayTest, AnOverlongPromptIs400ContextLengthExceededNamingBothNumbers) {
  start();
  // The prompt alone is over the context.
  json body = chatBody(4, false, [] {
    std::string s;
    for (int i = 0; i < 700; ++i) s += "word" + std::to_string(i) + " ";
    return s;
  }());
  body.erase("max_tokens");
  // Counted by the same encoder as the server's.
  const openai::PromptEncoder encoder(harness_->chatTemplate(), harness_->tokenizer());
  auto parsed = openai::parseChatCompletionRequest(body, {});
  ASSERT_TRUE(parsed.isOk());
  auto encoded = encoder.encodeChat(parsed->prompt, "messages");
  ASSERT_TRUE(encoded.isOk());
  const size_t prompt_tokens = encoded->ids.size();
  ASSERT_GT(prompt_tokens, static_cast<size_t>(kMaxContext));
  Reply r = chat(body);
  expectError(r, 400, "invalid_request_error", "context_length_exceeded", "messages", "the prompt alone");
  std::string message = r.error()["message"];
  EXPECT_NE(message.find(std::to_string(prompt_tokens) + " in the prompt"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kMaxContext)), std::string::npos) << message;

  // A short prompt asking for more than the context leaves.
  body = chatBody(1000);
  parsed = openai::parseChatCompletionRequest(body, {});
  encoded = encoder.encodeChat(parsed->prompt, "messages");
  ASSERT_TRUE(encoded.isOk());
  r = chat(body);
  expectError(r, 400, "invalid_request_error", "context_length_exceeded", "messages", "prompt + max_tokens");
  message = r.error()["message"];
  EXPECT_NE(message.find(std::to_string(encoded->ids.size()) + " in the prompt"), std::string::npos) << message;
  EXPECT_NE(message.find("1000"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kMaxContext)), std::string::npos) << message;

  // Token ids on /v1/completions: the count is the client's own.
  r = post("/v1/completions", json{{"model", kModel}, {"prompt", std::vector<int>(600, 42)}, {"max_tokens", 1}}.dump(),
           key_);
  expectError(r, 400, "invalid_request_error", "context_length_exceeded", "prompt", "600 ids");
  message = r.error()["message"];
  EXPECT_NE(message.find("600 in the prompt"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kMaxContext)), std::string::npos) << message;
  expectServes("after overlong prompts");
}

TEST_F(GatewayTest, AHugeBodyIs413) {
  GatewaySetup setup;
  setup.config.server.max_body_bytes = 64 * 1024;
  start(setup);
  // A well-formed request whose message is 2 MiB, declared and chunked.
  const std::string file = harness_->dataDir() + "/big.json";
  std::ofstream(file) << chatBody(4, false, std::string(2 << 20, 'x')).dump();
  for (const std::vector<std::string>& framing :
       {std::vector<std::string>{}, {"-H", "Transfer-Encoding: chunked"}}) {
    std::vector<std::string> args = {"-H", "content-type: application/json", "-H", "Authorization: Bearer " + key_,
                                     "--data-binary", "@" + file};
    args.insert(args.end(), framing.begin(), framing.end());
    const Reply r = curl("POST", "/v1/chat/completions", args);
    expectError(r, 413, "invalid_request_error", "request_too_large", std::nullopt,
                framing.empty() ? "declared" : "chunked");
    EXPECT_NE(r.error()["message"].get<std::string>().find("65536"), std::string::npos) << r.body;
  }
  expectServes("after huge bodies");
}

TEST_F(GatewayTest, AFullQueueIs429WithRetryAfter) {
  GatewaySetup setup;
  setup.config.serving.max_running = 1;
  setup.config.serving.max_queued = 1;
  start(setup);
  // One request runs (a long stream), one waits: the queue is full.
  auto running = startStream(400);
  ASSERT_TRUE(running);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  auto queued = RawClient::connect(port());
  ASSERT_TRUE(queued && queued->startTls(caFile()));
  ASSERT_TRUE(queued->send(httpPost("/v1/chat/completions", chatBody(4).dump(), key_)));
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.queued == 1; }));

  const Reply refused = chat(chatBody(4));
  expectError(refused, 429, "rate_limit_error", "rate_limit_exceeded", std::nullopt, "queue full");
  EXPECT_EQ(refused.header("retry-after"), "1") << refused.head;
  const Reply refused_stream = chat(chatBody(4, true));  // a stream is refused before it starts
  expectError(refused_stream, 429, "rate_limit_error", "rate_limit_exceeded", std::nullopt, "queue full, streamed");
  EXPECT_EQ(refused_stream.header("retry-after"), "1");

  // The waiting client leaves: its place in the queue is given back.
  queued->abort();
  ASSERT_TRUE(waitForStats([](const auto& s) {
    return s.queued == 0 && finished(s, serving::FinishReason::kCancelled) == 1;
  }));
  auto waiting = std::async(std::launch::async, [&] { return chat(chatBody(4)); });
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.queued == 1; }));
  // The running client leaves; the waiting request is served.
  running->abort();
  const Reply served = waiting.get();
  EXPECT_EQ(served.status, 200) << served.body;
  expectServes("after the queue was full");
}

TEST_F(GatewayTest, ShuttingDownIs503WithRetryAfter) {
  GatewaySetup setup;
  setup.config.serving.max_running = 1;
  start(setup);
  auto running = startStream(400);
  ASSERT_TRUE(running);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  auto waiting = std::async(std::launch::async, [&] { return chat(chatBody(4)); });
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.queued == 1; }));

  scheduler().shutdown(0ms);  // as serve does on SIGTERM, with no grace
  // The queued request is refused, the running stream cut with an error chunk.
  const Reply queued = waiting.get();
  expectError(queued, 503, "server_error", "server_shutting_down", std::nullopt, "queued at shutdown");
  EXPECT_EQ(queued.header("retry-after"), "10") << queued.head;
  const std::string cut = running->readUntil("data: [DONE]", 30s);
  EXPECT_NE(cut.find("\"code\":\"request_cancelled\""), std::string::npos) << cut.substr(cut.size() > 2000 ? cut.size() - 2000 : 0);
  EXPECT_NE(cut.find("data: [DONE]"), std::string::npos);
  // A new request is refused at once.
  const Reply late = chat(chatBody(4));
  expectError(late, 503, "server_error", "server_shutting_down", std::nullopt, "after shutdown");
  EXPECT_EQ(late.header("retry-after"), "10") << late.head;
  // The server itself still answers: what needs no generation is served.
  EXPECT_EQ(curl("GET", "/healthz", {}).status, 200);
  const Reply models = curl("GET", "/v1/models", {"-H", "Authorization: Bearer " + key_});
  EXPECT_EQ(models.status, 200) << models.body;
}

TEST_F(GatewayTest, AClientLeavingMidStreamCancelsItsGeneration) {
  start();
  constexpr int kMaxTokens = 400;
  auto c = startStream(kMaxTokens);
  ASSERT_TRUE(c);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1 && s.generated_tokens >= 2; }));
  const auto t0 = Clock::now();
  c->abort();
  ASSERT_TRUE(waitForStats([](const auto& s) { return finished(s, serving::FinishReason::kCancelled) == 1 && idle(s); },
                           10s));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const serving::SchedulerStats stats = scheduler().schedulerStats();
  EXPECT_LT(stats.generated_tokens, static_cast<uint64_t>(kMaxTokens));
  EXPECT_EQ(finished(stats, serving::FinishReason::kLength), 0u);
  EXPECT_EQ(harness_->server().httpStats().disconnects, 1u);
  std::printf("generation cancelled and the engine idle %.1f ms after the client left (%llu tokens generated)\n", ms,
              static_cast<unsigned long long>(stats.generated_tokens));
  expectServes("after a client left mid-stream");
  EXPECT_EQ(finished(scheduler().schedulerStats(), serving::FinishReason::kLength), 1u);

  // Not streamed: a client that gives up waiting for the whole reply.
  auto waiting = RawClient::connect(port());
  ASSERT_TRUE(waiting && waiting->startTls(caFile()));
  ASSERT_TRUE(waiting->send(httpPost("/v1/chat/completions", chatBody(kMaxTokens).dump(), key_)));
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  waiting->abort();
  ASSERT_TRUE(waitForStats([](const auto& s) { return finished(s, serving::FinishReason::kCancelled) == 2 && idle(s); },
                           10s));
  EXPECT_EQ(finished(scheduler().schedulerStats(), serving::FinishReason::kLength), 1u);
  expectServes("after a client left a non-streamed request");
}

TEST_F(GatewayTest, SlowClientsAreCutOffWhileAGenerationStreams) {
  GatewaySetup setup;
  setup.config.server.header_timeout_ms = 500;
  setup.config.server.body_timeout_ms = 1000;
  start(setup);
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  const auto t0 = Clock::now();
  auto silent = RawClient::connect(port());  // never starts TLS
  auto half = RawClient::connect(port());    // half a header, then nothing
  auto body = RawClient::connect(port());    // a header promising a body that trickles
  ASSERT_TRUE(silent && half && body && half->startTls(caFile()) && body->startTls(caFile()));
  ASSERT_TRUE(half->send("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthor"));
  const std::string request = httpPost("/v1/chat/completions", chatBody(4).dump(), key_);
  ASSERT_TRUE(body->send(request.substr(0, request.size() - 10)));
  EXPECT_TRUE(silent->waitClosed(5s));
  EXPECT_TRUE(half->waitClosed(5s));
  EXPECT_TRUE(body->waitClosed(5s));
  const auto cut_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_TRUE(half->received().starts_with("HTTP/1.1 408")) << half->received();
  EXPECT_TRUE(body->received().starts_with("HTTP/1.1 408")) << body->received();
  EXPECT_NE(body->received().find("\"code\":\"request_timeout\""), std::string::npos) << body->received();
  EXPECT_EQ(harness_->server().httpStats().header_timeouts, 3u);  // a slow body counts as a slow header
  EXPECT_EQ(finished(scheduler().schedulerStats(), serving::FinishReason::kLength), 0u)
      << "the stream ended before the attack did";
  std::printf("slow clients cut off within %lld ms\n", static_cast<long long>(cut_ms));
  expectStreamCompletes(*stream, "the stream that ran meanwhile");
  EXPECT_EQ(scheduler().schedulerStats().submitted, 1u);  // the trickling body never reached the scheduler
  expectServes("after slow clients");
}

TEST_F(GatewayTest, TlsGarbageIsRefusedWhileAGenerationStreams) {
  start();
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  std::mt19937 rng(11);
  for (int i = 0; i < 6; ++i) {
    auto c = RawClient::connect(port());
    ASSERT_TRUE(c);
    std::string junk(4096, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    if (i % 2 == 1) junk.replace(0, 5, std::string("\x16\x03\x01\x02\x00", 5));  // looks like a ClientHello record
    c->send(junk);
    EXPECT_TRUE(c->waitClosed(5s)) << i;
  }
  // Garbage inside a good TLS connection: a bad request, never a handler call.
  auto c = RawClient::connect(port());
  ASSERT_TRUE(c && c->startTls(caFile()));
  ASSERT_TRUE(c->send(std::string("\x01\xff\x00 POST /v1/chat/completions\r\n\r\n", 36)));
  EXPECT_TRUE(c->waitClosed(5s));
  EXPECT_TRUE(c->received().starts_with("HTTP/1.1 400")) << c->received();
  expectNoInternals(c->received(), harness_->dataDir());
  EXPECT_EQ(harness_->server().httpStats().tls_handshake_failures, 6u);
  // The stream was decoding when the flood began (above); on a loaded
  // machine its 480 tokens may end before the last flood connection is
  // closed: whether it outlasted the flood is reported, not required. It
  // must end whole either way.
  std::printf("the stream %s the flood\n",
              finished(scheduler().schedulerStats(), serving::FinishReason::kLength) == 0 ? "outlasted" : "ended during");
  expectStreamCompletes(*stream, "the stream that ran meanwhile");
  expectServes("after TLS garbage");
}

TEST_F(GatewayTest, AConnectionFloodIsShedWhileAGenerationStreams) {
  GatewaySetup setup;
  setup.config.server.max_connections = 8;
  setup.config.server.header_timeout_ms = 1000;
  start(setup);
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 60; ++i) {
    if (auto c = RawClient::connect(port())) flood.push_back(std::move(c));
  }
  int closed = 0;
  for (auto& c : flood) closed += c->waitClosed(5s);
  const auto flood_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(closed, static_cast<int>(flood.size()));
  // At most 7 of them fit beside the stream; those were cut at the header timeout.
  EXPECT_GE(harness_->server().httpStats().connections_refused, flood.size() - 7);
  std::printf("%zu flood connections closed within %lld ms\n", flood.size(), static_cast<long long>(flood_ms));
  // The stream was decoding when the flood began (above); on a loaded
  // machine its 480 tokens may end before the last flood connection is
  // closed: whether it outlasted the flood is reported, not required. It
  // must end whole either way.
  std::printf("the stream %s the flood\n",
              finished(scheduler().schedulerStats(), serving::FinishReason::kLength) == 0 ? "outlasted" : "ended during");
  expectStreamCompletes(*stream, "the stream that ran meanwhile");
  flood.clear();
  expectServes("after the flood");
}

// cache.shared_namespaces end to end: the admin publishes a system prompt into
// "company", granted to team-a only. team-a's first request with that system
// prompt hits it; team-b (no grant) and team-c (granted another namespace)
// compute it all. A token-id prompt published into "other" is hit by team-c.
TEST_F(GatewayTest, AGrantedTeamHitsAPublishedSharedPrefixAndOthersDoNot) {
  GatewaySetup setup;
  setup.config.cache.shared_namespaces = {{"company", {"team-a"}}, {"other", {"team-c"}}};
  start(setup);
  const std::string team_b = newKey("team-b");
  const std::string team_c = newKey("team-c");
  std::string system = "You are the assistant of a company. Follow these rules:";
  for (int i = 0; i < 40; ++i) system += " rule " + std::to_string(i) + " is to be kind;";
  auto publish = [&](const json& body, const std::string& key) {
    return curl("POST", "/admin/shared-prefixes",
                {"-H", "Authorization: Bearer " + key, "-H", "content-type: application/json", "--data-binary",
                 body.dump()});
  };
  const json system_message = {{"role", "system"}, {"content", system}};
  const Reply published = publish({{"namespace", "company"}, {"messages", {system_message}}}, admin_key_);
  ASSERT_EQ(published.status, 200) << published.body;
  const json p = json::parse(published.body);
  EXPECT_EQ(p["object"], "shared_prefix");
  EXPECT_EQ(p["namespace"], "company");
  const int64_t shared_tokens = p["cached_tokens"];
  EXPECT_GE(shared_tokens, 4 * kBlockTokens) << published.body;
  EXPECT_EQ(shared_tokens % kBlockTokens, 0);
  EXPECT_LE(shared_tokens, p["prompt_tokens"].get<int64_t>());

  const json ask = {{"model", kModel},
                    {"messages", {system_message, {{"role", "user"}, {"content", "What are the rules?"}}}},
                    {"max_tokens", 2}};
  auto cachedTokens = [](const Reply& r) -> int64_t {
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return -1;
    return json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"];
  };
  EXPECT_EQ(cachedTokens(chat(ask, team_b)), 0) << "team-b has no grant";
  EXPECT_EQ(cachedTokens(chat(ask, team_c)), 0) << "team-c is granted another namespace";
  const int64_t hit = cachedTokens(chat(ask, key_));
  // Everything published up to the block where the two prompts part.
  EXPECT_GE(hit, shared_tokens - kBlockTokens) << "team-a is granted company";
  EXPECT_LE(hit, shared_tokens);

  // A prompt of token ids, published into "other", read by team-c only.
  std::vector<int> ids;
  for (int i = 0; i < 5 * kBlockTokens; ++i) ids.push_back(1000 + 7 * i);
  const Reply other = publish({{"namespace", "other"}, {"prompt", ids}}, admin_key_);
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(json::parse(other.body)["cached_tokens"], 5 * kBlockTokens);
  std::vector<int> longer = ids;
  longer.insert(longer.end(), {5, 6, 7});
  const json completion = {{"model", kModel}, {"prompt", longer}, {"max_tokens", 2}};
  auto completionHit = [&](const std::string& key) -> int64_t {
    const Reply r = post("/v1/completions", completion.dump(), key);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>() : -1;
  };
  EXPECT_EQ(completionHit(key_), 0) << "team-a is not granted other";
  EXPECT_EQ(completionHit(team_c), 5 * kBlockTokens);

  // What the admin endpoint refuses.
  expectError(publish({{"namespace", "company"}, {"messages", {system_message}}}, key_), 401, "invalid_request_error",
              "invalid_api_key", std::nullopt, "a user key");
  expectError(publish({{"namespace", "elsewhere"}, {"messages", {system_message}}}, admin_key_), 400,
              "invalid_request_error", "invalid_value", "namespace", "a namespace not configured");
  expectError(publish({{"messages", {system_message}}}, admin_key_), 400, "invalid_request_error",
              "missing_required_parameter", "namespace", "no namespace");
  expectError(publish({{"namespace", "company"}, {"messages", {system_message}}, {"prompt", "x"}}, admin_key_), 400,
              "invalid_request_error", "invalid_value", "prompt", "both messages and prompt");
  expectError(publish({{"namespace", "company"}}, admin_key_), 400, "invalid_request_error",
              "missing_required_parameter", "messages", "neither messages nor prompt");
  expectError(publish({{"namespace", "company"}, {"prompt", {1, 2, 3}}}, admin_key_), 400, "invalid_request_error",
              "invalid_value", "prompt", "shorter than a block");
  expectError(publish({{"namespace", "company"}, {"messages", "hi"}}, admin_key_), 400, "invalid_request_error",
              "invalid_type", "messages", "bad messages");
  expectServes("after publishing");
}

// A /v1/completions request whose second prompt the scheduler refuses, after
// the first was submitted: the client gets the refusal, and the first
// prompt's generation (cancelled) must not write to the exchange afterwards
// (a second response, or stream bytes after it, would close the connection).
// On one kept-alive connection, each refusal is followed by a served request.
TEST_F(GatewayTest, ARefusalAfterAnEarlierPromptWasSubmittedLeavesTheConnectionUsable) {
  start();
  auto c = RawClient::connect(port());
  ASSERT_TRUE(c && c->startTls(caFile()));
  const std::string ok = json{{"model", kModel}, {"prompt", {5, 6, 7}}, {"max_tokens", 2}}.dump();
  for (int i = 0; i < 100; ++i) {
    SCOPED_TRACE(i);
    json body = {{"model", kModel}, {"prompt", {{5, 6, 7, 8}, {999999999}}}, {"max_tokens", 20}};
    if (i % 2 == 1) body["stream"] = true;
    ASSERT_TRUE(c->send(httpPost("/v1/completions", body.dump(), key_)));
    std::string got = c->readUntil("}}", 10s);
    ASSERT_TRUE(got.starts_with("HTTP/1.1 400")) << got;
    EXPECT_NE(got.find("\"param\":\"prompt\""), std::string::npos) << got;
    ASSERT_TRUE(c->send(httpPost("/v1/completions", ok, key_)));
    got = c->readUntil("\"total_tokens\"", 10s);
    ASSERT_TRUE(got.starts_with("HTTP/1.1 200")) << got << (c->closedByPeer() ? " (closed by the server)" : "");
  }
  EXPECT_EQ(harness_->server().httpStats().disconnects, 0u);
}

// Bad input of every kind: whatever the server says, it names no file, no
// exception and no internal status. (expectError checks each body above
// too; these are the inputs most likely to reach a library's own message.)
TEST_F(GatewayTest, ErrorsNeverLeakInternals) {
  start();
  std::vector<Reply> replies;
  replies.push_back(chatText(R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1e400})"));
  replies.push_back(chatText(R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "seed": "x"})"));
  replies.push_back(chatText(R"({"model": "demo", "messages": [{"role": "user", "content": "x"}], "stop": [""]})"));
  replies.push_back(chatText(R"({"model": "demo", "messages": [{"role": "tool", "content": "x"}]})"));
  replies.push_back(chatText(R"({"model": "demo", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]})"));
  replies.push_back(post("/v1/completions", R"({"model": "demo", "prompt": [[]]})", key_));
  replies.push_back(post("/v1/completions", R"({"model": "demo", "prompt": [-1]})", key_));
  replies.push_back(post("/v1/responses", R"({"model": "demo", "input": [{"type": "item_reference", "id": "x"}]})", key_));
  replies.push_back(curl("POST", "/admin/keys", {"-H", "Authorization: Bearer " + admin_key_, "--data-binary", "{oops"}));
  replies.push_back(curl("POST", "/admin/keys",
                         {"-H", "Authorization: Bearer " + admin_key_, "--data-binary", R"({"team": "no spaces!", "name": "x"})"}));
  replies.push_back(curl("DELETE", "/admin/keys/key_0000000000000000", {"-H", "Authorization: Bearer " + admin_key_}));
  replies.push_back(curl("GET", "/v1/nothing", {"-H", "Authorization: Bearer " + key_}));
  replies.push_back(curl("PUT", "/v1/chat/completions", {"-H", "Authorization: Bearer " + key_}));
  for (const Reply& r : replies) {
    SCOPED_TRACE(r.body);
    EXPECT_GE(r.status, 400);
    EXPECT_LT(r.status, 500);
    EXPECT_TRUE(r.error().is_object());
    expectNoInternals(r.body, harness_->dataDir());
  }
  expectServes("after all of it");
}

// ------------------------------------------------------------- rate limits

class GatewayRateLimitTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewaySetup setup;
    setup.config.limits.key_requests_per_minute = 3;
    setup.config.limits.team_tokens_per_minute = 400;
    start(setup);
  }
};

TEST_F(GatewayRateLimitTest, RequestsPerMinuteAre429WithRetryAfterAndHeaders) {
  for (int i = 0; i < 3; ++i) {
    const Reply r = chat(chatBody(4));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "3") << r.head;
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), std::to_string(2 - i)) << r.head;
    EXPECT_TRUE(r.header("x-ratelimit-reset-requests").has_value()) << r.head;
    EXPECT_EQ(r.header("x-ratelimit-limit-tokens"), "400") << r.head;
  }
  const Reply refused = chat(chatBody(4));
  expectError(refused, 429, "requests", "rate_limit_exceeded", std::nullopt, "the fourth request in a minute");
  ASSERT_TRUE(refused.header("retry-after").has_value()) << refused.head;
  const int retry = std::stoi(*refused.header("retry-after"));
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 20);  // one request refills in 20 s
  EXPECT_EQ(refused.header("x-ratelimit-remaining-requests"), "0") << refused.head;
  EXPECT_NE(refused.error()["message"].get<std::string>().find("3 requests per minute"), std::string::npos);
  // Streams are refused before they start, as plain JSON.
  expectError(chat(chatBody(4, true)), 429, "requests", "rate_limit_exceeded", std::nullopt, "a stream");
  // Another key of the same team has its own requests (the team has only a token limit).
  EXPECT_EQ(chat(chatBody(4), newKey("team-a")).status, 200);
}

TEST_F(GatewayRateLimitTest, TokensAreTheCapAtAdmissionAndTheUseAfterwards) {
  // A request whose prompt + max_tokens can never fit the team's 400 tokens: no Retry-After.
  const Reply huge = chat(chatBody(450));
  expectError(huge, 429, "tokens", "rate_limit_exceeded", std::nullopt, "larger than a minute's tokens");
  EXPECT_FALSE(huge.header("retry-after").has_value()) << huge.head;
  EXPECT_NE(huge.error()["message"].get<std::string>().find("Request too large"), std::string::npos);
  // 300 reserved, 4 generated: what was not used comes back at the end. The
  // bucket refills at 400 / 60 tokens per second meanwhile: each check allows
  // what the elapsed time refilled.
  const auto start_time = Clock::now();
  auto refilled = [&] { return std::chrono::duration<double>(Clock::now() - start_time).count() * 400 / 60 + 1; };
  const Reply first = chat(chatBody(4));
  ASSERT_EQ(first.status, 200) << first.body;
  const int64_t prompt = json::parse(first.body)["usage"]["prompt_tokens"];
  // The 300-token request must stop early for anything to come back: the
  // same greedy request, asked by another team (its own bucket), shows the
  // first character the reply will generate, which then serves as its stop string.
  json greedy = chatBody(4);
  greedy["temperature"] = 0;
  const Reply probe = chat(greedy, newKey("team-probe"));
  ASSERT_EQ(probe.status, 200) << probe.body;
  const std::string reply = json::parse(probe.body)["choices"][0]["message"]["content"];
  ASSERT_FALSE(reply.empty()) << probe.body;
  size_t first_char = 1;
  while (first_char < reply.size() && (static_cast<unsigned char>(reply[first_char]) & 0xC0) == 0x80) ++first_char;
  json stops_early = chatBody(300);
  stops_early["temperature"] = 0;
  stops_early["stop"] = {reply.substr(0, first_char)};
  const Reply big = chat(stops_early, newKey("team-a"));
  ASSERT_EQ(big.status, 200) << big.body;
  ASSERT_LT(json::parse(big.body)["usage"]["completion_tokens"].get<int>(), 300) << big.body;
  const int64_t used = json::parse(big.body)["usage"]["total_tokens"];
  const int64_t remaining_at_admission = std::stoll(*big.header("x-ratelimit-remaining-tokens"));
  const int64_t expected_at_admission = 400 - (prompt + 4) - (prompt + 300);
  EXPECT_GE(remaining_at_admission, expected_at_admission);
  EXPECT_LE(remaining_at_admission, expected_at_admission + refilled());
  // The next request sees the unused part of the 300 returned.
  const Reply after = chat(chatBody(4), newKey("team-a"));
  ASSERT_EQ(after.status, 200) << after.body;
  const int64_t remaining_after = std::stoll(*after.header("x-ratelimit-remaining-tokens"));
  const int64_t expected_after = 400 - (prompt + 4) - used - (prompt + 4);
  EXPECT_GE(remaining_after, expected_after);
  EXPECT_LE(remaining_after, expected_after + refilled());
  EXPECT_GT(remaining_after, remaining_at_admission) << "the unused part of the 300 came back";
  // Other teams are not charged for team-a's tokens.
  EXPECT_EQ(chat(chatBody(300), newKey("team-b")).status, 200);
}

// 24 concurrent requests of 6 keys against 3 requests per key: exactly 3 of
// each key's are admitted (no refill fits in the test's few seconds).
TEST_F(GatewayRateLimitTest, ConcurrentRequestsNeverExceedTheLimit) {
  std::vector<std::string> keys;
  for (int k = 0; k < 6; ++k) keys.push_back(newKey("team-" + std::to_string(k)));
  std::vector<std::future<Reply>> replies;
  const auto start = Clock::now();
  for (int i = 0; i < 24; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] { return chat(chatBody(2), keys[i % 6]); }));
  }
  std::map<int, int> by_status;
  std::map<std::string, int> admitted;
  for (int i = 0; i < 24; ++i) {
    const Reply r = replies[i].get();
    ++by_status[r.status];
    if (r.status == 200) ++admitted[keys[i % 6]];
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_LT(elapsed_s, 20.0) << "a refill (one request per 20 s) could have been admitted";
  EXPECT_EQ(by_status[200], 18);
  EXPECT_EQ(by_status[429], 6);
  for (const std::string& k : keys) EXPECT_EQ(admitted[k], 3);
}

}  // namespace
}  // namespace lg::proxy

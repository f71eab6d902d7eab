// The gateway end to end with bad input (issue 11): the real HttpServer over
// TLS with the generated CA, the real Gateway, KeyStore and AdminKey over a
// BillingDb in a temp dir, and a real Scheduler with a tier-0 prefix cache
// on a small random-weight model. Every refusal is checked as a client reads
// it (status, OpenAI error object, Retry-After, no internals), and after each
// one the server still answers a real generation request.
//
// The model: the `demo` preset's architecture cut to 2 layers, written once
// for the suite. The fixture checkpoints under tests/fixtures have a
// vocabulary of 2,048, and every chat prompt the real DeepSeek-V3 tokenizer
// renders holds ids far above that (BOS aside, <｜User｜> is 128803), so a
// chat request on them could only ever be refused; the preset keeps the
// real tokenizer's 129,280 ids. The context is cut to 512 tokens so that an
// overlong prompt is short to send. No end-of-sequence token is configured,
// so a reply has exactly max_tokens tokens.
#include "proxy/gateway.h"

#include <fstream>
#include <future>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "cache/cache_config.h"
#include "cache/fingerprint.h"
#include "config/config.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/presets.h"
#include "proxy/blocking_pool.h"
#include "proxy/health_routes.h"
#include "proxy/http_server.h"
#include "proxy/openai/chat_request.h"
#include "proxy/shared_prefixes.h"
#include "proxy/tls_material.h"
#include "tests/proxy/curl_client.h"
#include "tests/proxy/test_client.h"
#include "tests/support/temp_dir.h"
#include "text/chat/chat_template.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::RawClient;
using Clock = std::chrono::steady_clock;

constexpr int32_t kMaxContext = 512;
constexpr int kBlockTokens = 16;
constexpr const char* kModel = "demo";
// The stream that runs during an attack: as long as the context allows, about
// 2.5 s on two shared cores, longer than any attack below (each checks it).
constexpr int kLongStream = 480;

// The model for every test: written once, loaded by each test's backend.
struct SuiteModel {
  std::unique_ptr<test::TempDir> dir;
  std::string path;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;
};
SuiteModel* suite_model = nullptr;

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
  for (const std::string& bad : {data_dir, suite_model->path, std::string("/tmp/"), std::string("/work"),
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

serving::SchedulerOptions defaultScheduler() {
  serving::SchedulerOptions o;
  o.step_tokens = 256;
  o.max_running = 8;
  o.eos_token_ids = {};  // random weights: replies run to max_tokens
  return o;
}

HttpServerOptions defaultServer() {
  HttpServerOptions o;  // host, port, TLS material and io_threads are set by start()
  o.header_timeout = 5s;
  o.idle_timeout = 5s;
  o.request_timeout = 60s;
  o.linger_timeout = 1s;
  return o;
}

// What a test may change before start().
struct GatewaySetup {
  serving::SchedulerOptions scheduler = defaultScheduler();
  HttpServerOptions server = defaultServer();
  SharedNamespaceGrants shared_namespaces;  // as cache.shared_namespaces: namespace -> teams
  billing::RateLimitOptions rate_limits;    // as limits.*: unlimited by default
};

class GatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = std::make_unique<SuiteModel>();
    m->dir = std::make_unique<test::TempDir>("lg_gateway_model");
    m->path = m->dir->path() + "/" + kModel;
    auto config = engine::presetConfig("demo");
    ASSERT_TRUE(config.isOk());
    config->num_hidden_layers = 2;  // one dense layer, one MoE layer
    ASSERT_TRUE(engine::writeRandomCheckpoint(*config, m->path, {}).isOk());
    auto tokenizer = text::Tokenizer::loadFromDir(m->path);
    ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().toString();
    m->tokenizer = std::move(tokenizer).value();
    auto chat_template = text::ChatTemplate::loadFromDir(m->path);
    ASSERT_TRUE(chat_template.isOk()) << chat_template.status().toString();
    m->chat_template = std::make_unique<text::ChatTemplate>(std::move(chat_template).value());
    suite_model = m.release();
  }
  static void TearDownTestSuite() {
    delete suite_model;
    suite_model = nullptr;
  }

  void start(const GatewaySetup& setup = {}) {
    ASSERT_NE(suite_model, nullptr);
    auto model = engine::Model::load(suite_model->path);
    ASSERT_TRUE(model.isOk()) << model.status().toString();
    engine::BackendOptions bo;
    bo.threads = 2;
    bo.block_tokens = kBlockTokens;
    bo.num_blocks = 256;
    bo.max_context = kMaxContext;
    auto backend = engine::createCpuBackend(std::move(model).value(), bo);
    ASSERT_TRUE(backend.isOk()) << backend.status().toString();
    backend_ = std::move(backend).value();
    auto cache = cache::PrefixCache::create(backend_->latentPool(), nullptr, cache::sha256("gateway test model"), {});
    ASSERT_TRUE(cache.isOk()) << cache.status().toString();
    cache_ = std::move(cache).value();
    // The grants as serve makes them from the configuration.
    Config config;
    config.cache.shared_namespaces = setup.shared_namespaces;
    ASSERT_TRUE(validateConfig(config).isOk());
    auto grants = cache::sharedGrants(config);
    ASSERT_TRUE(grants.isOk()) << grants.status().toString();
    const auto team_namespaces = cache::applySharedGrants(*grants, *cache_);
    auto scheduler = serving::Scheduler::create(*backend_, cache_.get(), *suite_model->tokenizer, setup.scheduler);
    ASSERT_TRUE(scheduler.isOk()) << scheduler.status().toString();
    scheduler_ = std::move(scheduler).value();

    auto db = billing::BillingDb::open(data_.path() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto keys = billing::KeyStore::open(*db_);
    ASSERT_TRUE(keys.isOk()) << keys.status().toString();
    keys_ = std::move(keys).value();
    auto admin = billing::AdminKey::loadOrCreate("", data_.path() + "/admin.key", nullptr);
    ASSERT_TRUE(admin.isOk()) << admin.status().toString();
    admin_ = std::move(admin).value();
    std::ifstream admin_file(data_.path() + "/admin.key");
    std::getline(admin_file, admin_key_);
    ASSERT_FALSE(admin_key_.empty());
    key_ = newKey("team-a");

    TlsMaterialOptions to;
    to.dir = data_.path() + "/tls";
    auto tls = loadOrCreateTlsMaterial(to);
    ASSERT_TRUE(tls.isOk()) << tls.status().toString();
    tls_ = *tls;

    GatewayOptions go;
    go.model_id = kModel;
    go.aliases = {"deepseek-chat", "deepseek-reasoner"};
    go.max_context = backend_->maxContext();
    go.shared_namespaces = team_namespaces;
    go.rate_limits = setup.rate_limits;
    encoder_ = std::make_unique<openai::PromptEncoder>(*suite_model->chat_template, *suite_model->tokenizer);
    gateway_ = std::make_unique<Gateway>(go, *scheduler_, *suite_model->tokenizer, *encoder_, *keys_, *admin_);
    SharedPrefixOptions po;
    po.model_id = kModel;
    po.block_tokens = kBlockTokens;
    for (const cache::SharedGrant& g : *grants) po.namespaces.push_back(g.shared);
    publisher_ = std::make_unique<SharedPrefixPublisher>(po, *scheduler_, *cache_, *encoder_, *admin_);
    addHealthRoutes(router_, [] { return Readiness{true, ""}; });
    router_.setBlockingPool(&blocking_pool_);
    gateway_->addRoutes(router_);
    publisher_->addRoutes(router_);

    HttpServerOptions so = setup.server;
    so.host = "127.0.0.1";
    so.port = 0;
    so.cert_chain_pem = tls_.cert_chain_pem;
    so.key_pem = tls_.key_pem;
    so.io_threads = 2;
    server_options_ = so;
    auto server = HttpServer::start(so, router_.handler());
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    server_ = std::move(server).value();
  }

  void TearDown() override {
    // The server first (its exchanges hold the sinks' targets), then the
    // scheduler (its engine thread uses the backend and the cache).
    server_.reset();
    scheduler_.reset();
    publisher_.reset();
    gateway_.reset();
    cache_.reset();
    backend_.reset();
  }

  std::string newKey(const std::string& team) {
    auto created = keys_->create(team, "gateway test");
    EXPECT_TRUE(created.isOk()) << created.status().toString();
    return created.isOk() ? created->second : "";
  }

  std::string url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  // curl with the CA; the reply's head, body and status. `extra` comes
  // before the URL. Expect: 100-continue is off unless `extra` sets it.
  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra) const {
    return {testing::curlOverTls(tls_.ca_cert_path, server_->port(), method, path, extra, 120)};
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
    expectNoInternals(r.body, data_.path());
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
    auto c = RawClient::connect(server_->port());
    EXPECT_TRUE(c && c->startTls(tls_.ca_cert_path));
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
      if (done(scheduler_->schedulerStats())) return true;
      std::this_thread::sleep_for(2ms);
    }
    return done(scheduler_->schedulerStats());
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

  test::TempDir data_{"lg_gateway"};
  TlsMaterial tls_;
  std::unique_ptr<engine::Backend> backend_;
  std::unique_ptr<cache::PrefixCache> cache_;
  std::unique_ptr<serving::Scheduler> scheduler_;
  std::unique_ptr<billing::BillingDb> db_;
  std::unique_ptr<billing::KeyStore> keys_;
  std::optional<billing::AdminKey> admin_;
  std::string admin_key_;
  std::string key_;  // team-a's
  std::unique_ptr<openai::PromptEncoder> encoder_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<SharedPrefixPublisher> publisher_;
  BlockingPool blocking_pool_;  // as in `latentgate serve`: the admin routes run on it
  Router router_;
  HttpServerOptions server_options_;
  std::unique_ptr<HttpServer> server_;
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
      {"/v1/chat/completions", {{"model", kModel}, {"messages", msgs}, {"n", 3}}, "n", "unsupported_value"},
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
  auto parsed = openai::parseChatCompletionRequest(body, {});
  ASSERT_TRUE(parsed.isOk());
  auto encoded = encoder_->encodeChat(parsed->prompt, "messages");
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
  encoded = encoder_->encodeChat(parsed->prompt, "messages");
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
  setup.server.limits.max_body_bytes = 64 * 1024;
  start(setup);
  // A well-formed request whose message is 2 MiB, declared and chunked.
  const std::string file = data_.file("big.json");
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
  setup.scheduler.max_running = 1;
  setup.scheduler.max_queued = 1;
  start(setup);
  // One request runs (a long stream), one waits: the queue is full.
  auto running = startStream(400);
  ASSERT_TRUE(running);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  auto queued = RawClient::connect(server_->port());
  ASSERT_TRUE(queued && queued->startTls(tls_.ca_cert_path));
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
  setup.scheduler.max_running = 1;
  start(setup);
  auto running = startStream(400);
  ASSERT_TRUE(running);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  auto waiting = std::async(std::launch::async, [&] { return chat(chatBody(4)); });
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.queued == 1; }));

  scheduler_->shutdown(0ms);  // as serve does on SIGTERM, with no grace
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
  const serving::SchedulerStats stats = scheduler_->schedulerStats();
  EXPECT_LT(stats.generated_tokens, static_cast<uint64_t>(kMaxTokens));
  EXPECT_EQ(finished(stats, serving::FinishReason::kLength), 0u);
  EXPECT_EQ(server_->stats().disconnects, 1u);
  std::printf("generation cancelled and the engine idle %.1f ms after the client left (%llu tokens generated)\n", ms,
              static_cast<unsigned long long>(stats.generated_tokens));
  expectServes("after a client left mid-stream");
  EXPECT_EQ(finished(scheduler_->schedulerStats(), serving::FinishReason::kLength), 1u);

  // Not streamed: a client that gives up waiting for the whole reply.
  auto waiting = RawClient::connect(server_->port());
  ASSERT_TRUE(waiting && waiting->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(waiting->send(httpPost("/v1/chat/completions", chatBody(kMaxTokens).dump(), key_)));
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  waiting->abort();
  ASSERT_TRUE(waitForStats([](const auto& s) { return finished(s, serving::FinishReason::kCancelled) == 2 && idle(s); },
                           10s));
  EXPECT_EQ(finished(scheduler_->schedulerStats(), serving::FinishReason::kLength), 1u);
  expectServes("after a client left a non-streamed request");
}

TEST_F(GatewayTest, SlowClientsAreCutOffWhileAGenerationStreams) {
  GatewaySetup setup;
  setup.server.header_timeout = 500ms;
  setup.server.body_timeout = 1s;
  start(setup);
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  const auto t0 = Clock::now();
  auto silent = RawClient::connect(server_->port());  // never starts TLS
  auto half = RawClient::connect(server_->port());    // half a header, then nothing
  auto body = RawClient::connect(server_->port());    // a header promising a body that trickles
  ASSERT_TRUE(silent && half && body && half->startTls(tls_.ca_cert_path) && body->startTls(tls_.ca_cert_path));
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
  EXPECT_EQ(server_->stats().header_timeouts, 3u);  // a slow body counts as a slow header
  EXPECT_EQ(finished(scheduler_->schedulerStats(), serving::FinishReason::kLength), 0u)
      << "the stream ended before the attack did";
  std::printf("slow clients cut off within %lld ms\n", static_cast<long long>(cut_ms));
  expectStreamCompletes(*stream, "the stream that ran meanwhile");
  EXPECT_EQ(scheduler_->schedulerStats().submitted, 1u);  // the trickling body never reached the scheduler
  expectServes("after slow clients");
}

TEST_F(GatewayTest, TlsGarbageIsRefusedWhileAGenerationStreams) {
  start();
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  std::mt19937 rng(11);
  for (int i = 0; i < 6; ++i) {
    auto c = RawClient::connect(server_->port());
    ASSERT_TRUE(c);
    std::string junk(4096, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    if (i % 2 == 1) junk.replace(0, 5, std::string("\x16\x03\x01\x02\x00", 5));  // looks like a ClientHello record
    c->send(junk);
    EXPECT_TRUE(c->waitClosed(5s)) << i;
  }
  // Garbage inside a good TLS connection: a bad request, never a handler call.
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
  ASSERT_TRUE(c->send(std::string("\x01\xff\x00 POST /v1/chat/completions\r\n\r\n", 36)));
  EXPECT_TRUE(c->waitClosed(5s));
  EXPECT_TRUE(c->received().starts_with("HTTP/1.1 400")) << c->received();
  expectNoInternals(c->received(), data_.path());
  EXPECT_EQ(server_->stats().tls_handshake_failures, 6u);
  EXPECT_EQ(finished(scheduler_->schedulerStats(), serving::FinishReason::kLength), 0u)
      << "the stream ended before the attack did";
  expectStreamCompletes(*stream, "the stream that ran meanwhile");
  expectServes("after TLS garbage");
}

TEST_F(GatewayTest, AConnectionFloodIsShedWhileAGenerationStreams) {
  GatewaySetup setup;
  setup.server.max_connections = 8;
  setup.server.header_timeout = 1s;
  start(setup);
  auto stream = startStream(kLongStream);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(waitForStats([](const auto& s) { return s.decoding == 1; }));
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 60; ++i) {
    if (auto c = RawClient::connect(server_->port())) flood.push_back(std::move(c));
  }
  int closed = 0;
  for (auto& c : flood) closed += c->waitClosed(5s);
  const auto flood_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(closed, static_cast<int>(flood.size()));
  // At most 7 of them fit beside the stream; those were cut at the header timeout.
  EXPECT_GE(server_->stats().connections_refused, flood.size() - 7);
  std::printf("%zu flood connections closed within %lld ms\n", flood.size(), static_cast<long long>(flood_ms));
  EXPECT_EQ(finished(scheduler_->schedulerStats(), serving::FinishReason::kLength), 0u)
      << "the stream ended before the attack did";
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
  setup.shared_namespaces = {{"company", {"team-a"}}, {"other", {"team-c"}}};
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
  auto c = RawClient::connect(server_->port());
  ASSERT_TRUE(c && c->startTls(tls_.ca_cert_path));
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
  EXPECT_EQ(server_->stats().disconnects, 0u);
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
    expectNoInternals(r.body, data_.path());
  }
  expectServes("after all of it");
}

// ------------------------------------------------------------- rate limits

class GatewayRateLimitTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewaySetup setup;
    setup.rate_limits.per_key = {3, 0};     // 3 requests per minute per key
    setup.rate_limits.per_team = {0, 400};  // 400 tokens per minute per team
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

// What routers that speak vLLM's protocols (llm-d, the Gateway API Inference
// Extension) read from a replica, through the whole server over TLS (the
// integration harness, harness.h):
//   - POST /v1/chat/completions/render and /v1/completions/render: the token
//     ids a request would run, which must be exactly what the server's
//     tokenizer and chat template make of it, and what /v1/chat/completions
//     then counts as its prompt; authenticated by an API key, the admin key
//     or the metrics token; never charged to the limits;
//   - vLLM's metric names on /metrics (vllm:num_requests_waiting, ...), read
//     by Prometheus' own Python parser, following a request in flight.
//
// The harness here: 64-token cache blocks (the block size llm-d hashes
// with), a 2,048-token context (so that a stream lasts several seconds: the
// test cuts it), two requests a minute per key (which renders must not use
// up), and for the metrics one running sequence (so that a second request
// waits).
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"
#include "tests/proxy/http/test_client.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/subprocess.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::CurlReply;
using testing::RawClient;

constexpr const char* kModel = "demo";
constexpr const char* kMetricsToken = "a-metrics-token-the-router-holds-0123";
constexpr int kBlockTokens = 64;
constexpr int kMaxContext = 2048;
constexpr int64_t kMaxBody = 256 << 10;  // server.max_body_bytes; the control routes' limit is 64 KiB

const json kWeatherTools = json::array({{{"type", "function"},
                                         {"function",
                                          {{"name", "get_weather"},
                                           {"description", "Current weather for a city."},
                                           {"parameters",
                                            {{"type", "object"},
                                             {"properties", {{"city", {{"type", "string"}}}}},
                                             {"required", json::array({"city"})}}}}}}});

json conversation() {
  return json::array({{{"role", "system"}, {"content", "You are terse."}},
                      {{"role", "user"}, {"content", "What is the capital of France?"}},
                      {{"role", "assistant"}, {"content", "Paris."}},
                      {{"role", "user"}, {"content", "And of Norway?"}}});
}

std::string httpPost(const std::string& path, const std::string& body, const std::string& key) {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + key +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class RouterSurfaceTest : public ::testing::Test {
 protected:
  // `max_running`: sequences the scheduler runs at once (1: a second request waits).
  void start(int max_running = 8) {
    test::HarnessOptions options;
    options.config.server.metrics_token = kMetricsToken;
    options.config.server.max_body_bytes = kMaxBody;
    options.config.cache.block_tokens = kBlockTokens;
    options.config.engine.max_context = kMaxContext;
    options.config.serving.max_running = max_running;
    options.config.limits.key_requests_per_minute = 2;
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    key_ = harness_->newKey("team-a", "router surface test");
  }

  CurlReply post(const std::string& path, const std::string& body, const std::string& key) const {
    return harness_->call("POST", path, key, nullptr, {"-H", "content-type: application/json", "--data-binary", body});
  }
  CurlReply post(const std::string& path, const json& body, const std::string& key) const {
    return post(path, body.dump(), key);
  }
  // A body too large for a command line argument, from a file.
  CurlReply postLarge(const std::string& path, const json& body, const std::string& key) const {
    const std::string file = harness_->dataDir() + "/body.json";
    {
      std::ofstream out(file, std::ios::binary);
      out << body.dump();
    }
    return harness_->call("POST", path, key, nullptr,
                          {"-H", "content-type: application/json", "--data-binary", "@" + file});
  }
  // The ids of a render that must succeed.
  json render(const std::string& path, const json& body, const std::string& key) const {
    const CurlReply r = post(path, body, key);
    EXPECT_EQ(r.status, 200) << path << " " << body.dump() << " -> " << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json") << r.head;
    return json::parse(r.body, nullptr, false);
  }
  json renderChat(const json& body) const { return render("/v1/chat/completions/render", body, key_); }

  // What the server's own tokenizer and chat template make of `messages`,
  // computed here without the gateway.
  std::vector<int32_t> templateIds(const json& messages, bool add_generation_prompt) const {
    text::ChatRenderInput input;
    input.messages = &messages;
    input.add_generation_prompt = add_generation_prompt;
    auto rendered = harness_->chatTemplate().render(input);
    EXPECT_TRUE(rendered.isOk()) << rendered.status().toString();
    auto ids = harness_->tokenizer().encodePrompt(*rendered);
    EXPECT_TRUE(ids.isOk()) << ids.status().toString();
    return ids.isOk() ? *ids : std::vector<int32_t>{};
  }
  std::string decode(const json& ids) const {
    auto text = harness_->tokenizer().decode(ids.get<std::vector<int32_t>>());
    EXPECT_TRUE(text.isOk());
    return text.isOk() ? *text : "";
  }

  CurlReply scrape(const std::string& token) const { return harness_->call("GET", "/metrics", token); }

  // vLLM's families of one scrape as Prometheus' Python client reads them
  // (python3-prometheus-client, scripts/install-deps.sh): {name: {"type",
  // "samples": [[name, labels, value]]}}. Our own strict parser reads the
  // same text in the caller.
  json vllmFamiliesByPrometheusClient(const std::string& text) const {
    const std::string file = harness_->dataDir() + "/scrape.prom";
    {
      std::ofstream out(file, std::ios::binary);
      out << text;
    }
    const std::string script = R"(
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(open(sys.argv[1], encoding='utf-8').read()):
    if f.name.startswith('vllm:'):
        out[f.name] = {'type': f.type, 'samples': [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
)";
    const test::ProcessResult r = test::runProcess({"/usr/bin/python3", "-c", script, file}, "");
    EXPECT_EQ(r.exit_code, 0) << "python3 with prometheus_client (scripts/install-deps.sh installs it): " << r.err;
    return json::parse(r.out, nullptr, false);
  }

  // One scrape with the metrics token, read by our strict parser.
  test::PromText scrapeParsed() const {
    const CurlReply r = scrape(kMetricsToken);
    EXPECT_EQ(r.status, 200) << r.body;
    test::PromText p = test::parsePrometheusText(r.body);
    EXPECT_TRUE(p.errors.empty()) << r.body.substr(0, 2000);
    return p;
  }
  // Scrapes until `done` holds (or 30 s pass); the last scrape.
  test::PromText scrapeUntil(const std::function<bool(const test::PromText&)>& done) const {
    test::PromText p = scrapeParsed();
    for (auto deadline = std::chrono::steady_clock::now() + 30s;
         !done(p) && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(20ms);
      p = scrapeParsed();
    }
    return p;
  }

  std::unique_ptr<test::Harness> harness_;
  std::string key_;
};

const std::map<std::string, std::string> kVllmLabels = {{"model_name", kModel}, {"engine", "0"}};

double waiting(const test::PromText& p) { return p.find("vllm:num_requests_waiting", kVllmLabels).value_or(-1); }
double running(const test::PromText& p) { return p.find("vllm:num_requests_running", kVllmLabels).value_or(-1); }
double usage(const test::PromText& p) { return p.find("vllm:kv_cache_usage_perc", kVllmLabels).value_or(-1); }

TEST_F(RouterSurfaceTest, ChatRenderIsThePromptTheChatEndpointRuns) {
  start();
  const json body = {{"model", kModel}, {"messages", conversation()}, {"max_tokens", 2}};
  const json rendered = renderChat(body);
  ASSERT_TRUE(rendered.is_object()) << rendered.dump();
  // vLLM's GenerateRequest shape, for a prompt without images.
  EXPECT_TRUE(rendered["request_id"].get<std::string>().starts_with("chatcmpl-")) << rendered.dump();
  EXPECT_EQ(rendered["model"], kModel);
  EXPECT_TRUE(rendered.contains("features") && rendered["features"].is_null()) << rendered.dump();
  EXPECT_EQ(rendered["stream"], false);
  EXPECT_TRUE(rendered["stream_options"].is_null());

  // Exactly the template's ids, computed here from the tokenizer and template.
  const std::vector<int32_t> expected = templateIds(conversation(), true);
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(rendered["token_ids"].get<std::vector<int32_t>>(), expected);
  EXPECT_TRUE(decode(rendered["token_ids"]).ends_with("And of Norway?<｜Assistant｜>"));

  // And what the chat endpoint counts as the same request's prompt.
  const CurlReply chat = post("/v1/chat/completions", body, key_);
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["usage"]["prompt_tokens"], expected.size());

  // An alias renders the same ids; a stream's options are echoed as vLLM does.
  json streamed = body;
  streamed["model"] = "deepseek-chat";
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const json alias = renderChat(streamed);
  EXPECT_EQ(alias["token_ids"], rendered["token_ids"]);
  EXPECT_EQ(alias["model"], "deepseek-chat");
  EXPECT_EQ(alias["stream"], true);
  EXPECT_EQ(alias["stream_options"], json({{"include_usage", true}}));
}

TEST_F(RouterSurfaceTest, ToolsAndEndingsRenderAsTheChatEndpointAndTheTemplateDo) {
  start();
  // Tools change the prompt (this template has no tools section of its own,
  // so the encoder writes them into the system prompt), and the chat endpoint
  // runs the same number of tokens.
  const json with_tools = {{"model", kModel}, {"messages", conversation()}, {"tools", kWeatherTools}, {"max_tokens", 2}};
  const json tools_ids = renderChat(with_tools)["token_ids"];
  const json plain_ids = renderChat({{"model", kModel}, {"messages", conversation()}})["token_ids"];
  EXPECT_GT(tools_ids.size(), plain_ids.size());
  EXPECT_NE(decode(tools_ids).find("### get_weather"), std::string::npos);
  const CurlReply chat = post("/v1/chat/completions", with_tools, key_);
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["usage"]["prompt_tokens"], tools_ids.size());

  // Without the generation prompt: the template's own ids for that.
  const json closed = renderChat({{"model", kModel}, {"messages", conversation()}, {"add_generation_prompt", false}});
  EXPECT_EQ(closed["token_ids"].get<std::vector<int32_t>>(), templateIds(conversation(), false));

  // Continuing a final assistant message: its text stays open, for the model
  // to go on (no end of turn, no new turn).
  json prefilled = conversation();
  prefilled.push_back({{"role", "assistant"}, {"content", "The capital of Norway is"}});
  const json open = renderChat(
      {{"model", kModel}, {"messages", prefilled}, {"add_generation_prompt", false}, {"continue_final_message", true}});
  EXPECT_TRUE(decode(open["token_ids"]).ends_with("<｜Assistant｜>The capital of Norway is")) << decode(open["token_ids"]);
  std::vector<int32_t> closed_prefilled = templateIds(prefilled, false);
  closed_prefilled.pop_back();  // the end of turn after the message
  EXPECT_EQ(open["token_ids"].get<std::vector<int32_t>>(), closed_prefilled);
}

TEST_F(RouterSurfaceTest, CompletionsRenderAnswersOneEntryPerPrompt) {
  start();
  const auto ids = [&](const std::string& text) {
    auto encoded = harness_->tokenizer().encode(text);
    EXPECT_TRUE(encoded.isOk());
    return encoded.isOk() ? *encoded : std::vector<int32_t>{};
  };
  const json one = render("/v1/completions/render", {{"model", kModel}, {"prompt", "Once upon a time"}}, key_);
  ASSERT_TRUE(one.is_array() && one.size() == 1) << one.dump();
  EXPECT_EQ(one[0]["token_ids"].get<std::vector<int32_t>>(), ids("Once upon a time"));
  EXPECT_TRUE(one[0]["request_id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_EQ(one[0]["model"], kModel);
  EXPECT_TRUE(one[0]["features"].is_null());

  const json prompts = json::array({"In a galaxy far away", "It was a dark and stormy night, and"});
  const json two = render("/v1/completions/render", {{"model", kModel}, {"prompt", prompts}}, key_);
  ASSERT_TRUE(two.is_array() && two.size() == 2) << two.dump();
  EXPECT_EQ(two[0]["token_ids"].get<std::vector<int32_t>>(), ids(prompts[0]));
  EXPECT_EQ(two[1]["token_ids"].get<std::vector<int32_t>>(), ids(prompts[1]));
  EXPECT_NE(two[0]["request_id"], two[1]["request_id"]);
  // The completions endpoint runs as many prompt tokens.
  const CurlReply run = post("/v1/completions", {{"model", kModel}, {"prompt", prompts}, {"max_tokens", 1}}, key_);
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(json::parse(run.body)["usage"]["prompt_tokens"], two[0]["token_ids"].size() + two[1]["token_ids"].size());

  // Ids are passed through, as the endpoint passes them to the scheduler.
  const json passed = render("/v1/completions/render", {{"model", kModel}, {"prompt", {5, 6, 7}}}, key_);
  EXPECT_EQ(passed[0]["token_ids"], json({5, 6, 7}));
}

TEST_F(RouterSurfaceTest, BadBodiesAreOpenAiErrors) {
  start();
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string code;
    json param;  // null: none
  };
  const std::string chat = "/v1/chat/completions/render", completions = "/v1/completions/render";
  const json msgs = conversation();
  const std::vector<Case> cases = {
      {chat, R"({"model": "demo", "messages": [)", 400, "invalid_json", nullptr},
      {completions, "[1, 2]", 400, "invalid_json", nullptr},
      {chat, json{{"model", kModel}}.dump(), 400, "missing_required_parameter", "messages"},
      {chat, json{{"model", kModel}, {"messages", "hi"}}.dump(), 400, "invalid_type", "messages"},
      {chat, json{{"model", kModel}, {"messages", msgs}, {"add_generation_prompt", 1}}.dump(), 400, "invalid_type",
       "add_generation_prompt"},
      {chat, json{{"model", kModel}, {"messages", msgs}, {"continue_final_message", true}}.dump(), 400,
       "invalid_value", "continue_final_message"},
      {chat, json{{"model", kModel}, {"messages", msgs}, {"chat_template", "{{ 1 }}"}}.dump(), 400,
       "unsupported_parameter", "chat_template"},
      {chat, json{{"model", kModel}, {"messages", msgs}, {"bogus", 1}}.dump(), 400, "unknown_parameter", "bogus"},
      {chat, json{{"model", "no-such-model"}, {"messages", msgs}}.dump(), 404, "model_not_found", "model"},
      {completions, json{{"model", kModel}}.dump(), 400, "missing_required_parameter", "prompt"},
      {completions, json{{"model", kModel}, {"prompt", "x"}, {"messages", msgs}}.dump(), 400, "unknown_parameter",
       "messages"},
      {completions, json{{"model", "no-such-model"}, {"prompt", "x"}}.dump(), 404, "model_not_found", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " <- " + c.body);
    const CurlReply r = post(c.path, c.body, key_);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["code"], c.code) << r.body;
    EXPECT_EQ(e["error"]["param"], c.param) << r.body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << r.body;
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  }

  // The generation routes' body limit, not the control routes' 64 KiB: a
  // 100 KB prompt renders, one over server.max_body_bytes is 413.
  const json big = {{"model", kModel}, {"prompt", std::string(100'000, 'a')}};
  EXPECT_EQ(postLarge(completions, big, key_).status, 200);
  const json too_big = {{"model", kModel}, {"prompt", std::string(kMaxBody + 1, 'a')}};
  EXPECT_EQ(postLarge(completions, too_big, key_).status, 413);
}

TEST_F(RouterSurfaceTest, AnyCredentialRendersNoneIsRefusedAndNothingIsCharged) {
  start();
  const json chat_body = {{"model", kModel}, {"messages", conversation()}};
  const json completion_body = {{"model", kModel}, {"prompt", "hello"}};
  const std::string wrong = "lg-" + std::string(40, 'x');
  for (const std::string& path : {std::string("/v1/chat/completions/render"), std::string("/v1/completions/render")}) {
    const json& body = path.starts_with("/v1/chat") ? chat_body : completion_body;
    for (const std::string& key : {std::string(), wrong, std::string(kMetricsToken) + "x"}) {
      const CurlReply r = post(path, body, key);
      EXPECT_EQ(r.status, 401) << path << " as '" << key << "': " << r.body;
      const json e = json::parse(r.body, nullptr, false);
      ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
      EXPECT_EQ(e["error"]["code"], "invalid_api_key");
      EXPECT_EQ(r.body.find(kMetricsToken), std::string::npos) << "echoes the token";
    }
    // An API key (the client's, which llm-d forwards), the admin key, and the
    // metrics token (what a router scraping /metrics holds).
    for (const std::string& key : {key_, harness_->adminKey(), std::string(kMetricsToken)}) {
      EXPECT_EQ(post(path, body, key).status, 200) << path;
    }
  }
  // The metrics token is still nothing more: no generation with it.
  EXPECT_EQ(post("/v1/chat/completions", chat_body, std::string(kMetricsToken)).status, 401);

  // Nothing was run or charged: the key's two requests a minute are both
  // still there after its renders, and the scheduler saw no request.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post("/v1/completions/render", completion_body, key_).status, 200);
  EXPECT_EQ(harness_->server().scheduler().schedulerStats().submitted, 0u);
  json generate = completion_body;
  generate["max_tokens"] = 1;
  EXPECT_EQ(post("/v1/completions", generate, key_).status, 200);
  EXPECT_EQ(post("/v1/completions", generate, key_).status, 200);
  EXPECT_EQ(post("/v1/completions", generate, key_).status, 429) << "the limit is counted, by generations only";
}

TEST_F(RouterSurfaceTest, VllmMetricsFollowTheSchedulerAndParseInPrometheusClient) {
  start(/*max_running=*/1);
  // Idle: nothing waits or runs, no block is held.
  const test::PromText idle = scrapeParsed();
  EXPECT_EQ(waiting(idle), 0);
  EXPECT_EQ(running(idle), 0);
  EXPECT_EQ(usage(idle), 0);
  const double capacity = idle.value("latentgate_latent_pool_capacity_blocks");
  ASSERT_GT(capacity, 0);
  EXPECT_EQ(idle.find("vllm:cache_config_info", {{"block_size", std::to_string(kBlockTokens)},
                                                 {"num_gpu_blocks", std::to_string(static_cast<int64_t>(capacity))},
                                                 {"engine", "0"}})
                .value_or(-1),
            1);

  // A long stream runs (one sequence at a time here), and a second request waits.
  auto send = [&](const json& body) {
    auto c = RawClient::connect(harness_->port());
    EXPECT_TRUE(c && c->startTls(harness_->caFile()));
    if (c) {
      EXPECT_TRUE(c->send(httpPost("/v1/chat/completions", body.dump(), key_)));
    }
    return c;
  };
  json long_body = {{"model", kModel},
                    {"messages", conversation()},
                    {"max_tokens", kMaxContext - 100},
                    {"stream", true}};
  auto streamed = send(long_body);
  ASSERT_TRUE(streamed);
  ASSERT_NE(streamed->readUntil("\"role\":\"assistant\"", 30s).find("HTTP/1.1 200"), std::string::npos);
  auto queued = send({{"model", kModel}, {"messages", conversation()}, {"max_tokens", 2}});
  ASSERT_TRUE(queued);

  const test::PromText busy = scrapeUntil([](const test::PromText& p) { return waiting(p) == 1; });
  EXPECT_EQ(waiting(busy), 1);
  EXPECT_EQ(running(busy), 1);
  EXPECT_EQ(waiting(busy), busy.value("latentgate_scheduler_requests", {{"state", "queued"}}));
  // The stream's blocks, over the pool, from the same snapshot as our families.
  EXPECT_GT(usage(busy), 0);
  EXPECT_EQ(usage(busy), busy.value("latentgate_latent_pool_blocks", {{"state", "running"}}) / capacity);

  // The same families through Prometheus' own parser.
  const CurlReply r = scrape(kMetricsToken);
  ASSERT_EQ(r.status, 200);
  const json theirs = vllmFamiliesByPrometheusClient(r.body);
  ASSERT_TRUE(theirs.is_object()) << theirs.dump();
  for (const char* name :
       {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"}) {
    ASSERT_TRUE(theirs.contains(name)) << name << " in " << theirs.dump();
    EXPECT_EQ(theirs[name]["type"], "gauge") << name;
    ASSERT_EQ(theirs[name]["samples"].size(), 1u) << name;
    const json& sample = theirs[name]["samples"][0];
    EXPECT_EQ(sample[0], name);
    if (std::string(name) == "vllm:cache_config_info") {
      EXPECT_EQ(sample[1]["block_size"], std::to_string(kBlockTokens));
      EXPECT_EQ(sample[1]["num_gpu_blocks"], std::to_string(static_cast<int64_t>(capacity)));
      EXPECT_EQ(sample[2], 1.0);
    } else {
      EXPECT_EQ(sample[1], json(kVllmLabels)) << name;
    }
  }
  // The stream runs for seconds yet: the same numbers as our parser read.
  EXPECT_EQ(theirs["vllm:num_requests_running"]["samples"][0][2], 1.0);
  EXPECT_EQ(theirs["vllm:num_requests_waiting"]["samples"][0][2], 1.0);

  // The stream's client leaves: the queued request runs and ends, and the
  // gauges go back to idle.
  streamed->abort();
  EXPECT_NE(queued->readUntil("\"finish_reason\"", 60s).find("HTTP/1.1 200"), std::string::npos)
      << queued->received();
  const test::PromText after =
      scrapeUntil([](const test::PromText& p) { return waiting(p) == 0 && running(p) == 0 && usage(p) == 0; });
  EXPECT_EQ(waiting(after), 0);
  EXPECT_EQ(running(after), 0);
  EXPECT_EQ(usage(after), 0);

  // vLLM's names need the same credentials as the rest of /metrics.
  EXPECT_EQ(scrape(key_).status, 401);
}

}  // namespace
}  // namespace lg::proxy

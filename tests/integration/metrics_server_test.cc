// GET /metrics through the whole server as `latentgate serve` builds it (the
// integration harness, harness.h): over TLS with the generated CA, on a
// small random-weight model, with a metrics token configured. Requests go
// through curl; each scrape is read back by the strict parser, and the
// counters must move by exactly what the clients were told.
#include <fstream>
#include <sstream>
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
using test::parsePrometheusText;
using test::PromText;
using Labels = std::map<std::string, std::string>;

constexpr const char* kModel = "demo";
constexpr const char* kMetricsToken = "a-metrics-token-for-the-scraper-0123";

using Reply = testing::CurlReply;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::HarnessOptions options;
    options.config.server.metrics_token = kMetricsToken;
    auto started = test::Harness::start(std::move(options));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    admin_key_ = harness_->adminKey();
    key_ = harness_->newKey("team-a", "metrics test");
  }

  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra) const {
    return testing::curlOverTls(harness_->caFile(), harness_->port(), method, path, extra, 120);
  }
  Reply post(const std::string& path, const json& body, const std::optional<std::string>& key) const {
    std::vector<std::string> extra = {"-H", "content-type: application/json", "--data-binary", body.dump()};
    if (key) extra.insert(extra.end(), {"-H", "Authorization: Bearer " + *key});
    return curl("POST", path, extra);
  }
  Reply getMetrics(const std::optional<std::string>& token) const {
    std::vector<std::string> extra;
    if (token) extra = {"-H", "Authorization: Bearer " + *token};
    return curl("GET", "/metrics", extra);
  }
  // A scrape with the admin key, checked well-formed.
  PromText scrape(std::string* text = nullptr) const {
    const Reply r = getMetrics(admin_key_);
    EXPECT_EQ(r.status, 200) << r.body;
    if (text != nullptr) *text = r.body;
    PromText p = parsePrometheusText(r.body);
    EXPECT_TRUE(p.errors.empty()) << errorsOf(p);
    EXPECT_FALSE(p.families.empty());
    return p;
  }

  // What a client was told a generation used.
  struct Told {
    int generations = 0;
    int64_t prompt = 0, hit = 0, miss = 0, output = 0;
    void add(const json& usage, int n) {
      generations += n;
      prompt += usage["prompt_tokens"].get<int64_t>();
      hit += usage["prompt_cache_hit_tokens"].get<int64_t>();
      miss += usage["prompt_cache_miss_tokens"].get<int64_t>();
      output += usage["completion_tokens"].get<int64_t>();
    }
  };

  json chatBody(int max_tokens, const std::string& content) const {
    return {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", max_tokens}};
  }

  engine::Backend& backend() const { return harness_->backend(); }

  std::unique_ptr<test::Harness> harness_;
  std::string admin_key_;
  std::string key_;
};

// Prometheus' own Python client (python3-prometheus-client, which
// scripts/install-deps.sh installs) reads the same samples as our parser:
// an outside reference for the syntax and the unescaping. (Its parser is
// lenient: the strict checks are ours.)
void expectPrometheusClientAgrees(const std::string& text, const PromText& ours, const std::string& dir) {
  const std::string file = dir + "/scrape.prom";
  {
    std::ofstream out(file, std::ios::binary);
    out << text;
  }
  const std::string script = R"(
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(open(sys.argv[1], encoding='utf-8').read()))
print(len(families))
for f in families:
    for s in f.samples:
        print(s.name + '\t' + json.dumps(s.labels, sort_keys=True, separators=(',', ':'), ensure_ascii=False) +
              '\t' + repr(float(s.value)))
)";
  const test::ProcessResult r = test::runProcess({"/usr/bin/python3", "-c", script, file}, "");
  ASSERT_EQ(r.exit_code, 0) << "python3 with prometheus_client (scripts/install-deps.sh installs it): " << r.err;
  std::map<std::string, double> theirs;
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(std::stoul(line), ours.families.size());
  while (std::getline(lines, line)) {
    const size_t tab = line.rfind('\t');
    theirs[line.substr(0, tab)] = std::strtod(line.c_str() + tab + 1, nullptr);
  }
  std::map<std::string, double> mine;
  for (const auto& [_, f] : ours.families) {
    for (const test::PromSample& s : f.samples) mine[s.name + "\t" + json(s.labels).dump()] = s.value;
  }
  EXPECT_GT(mine.size(), 100u);
  EXPECT_EQ(theirs.size(), mine.size());
  for (const auto& [key, value] : mine) {
    auto it = theirs.find(key);
    ASSERT_NE(it, theirs.end()) << key;
    EXPECT_EQ(it->second, value) << key;
  }
}

TEST_F(MetricsServerTest, CountersAndHistogramsMoveByWhatTheClientsWereTold) {
  const PromText before = scrape();
  const std::string chat = "/v1/chat/completions";
  auto requests = [](const PromText& p, const std::string& endpoint, const std::string& method,
                     const std::string& code) {
    return p.value("latentgate_http_requests_total", {{"endpoint", endpoint}, {"method", method}, {"code", code}});
  };
  // Nothing counted yet but the first scrape, which is counted once answered.
  EXPECT_EQ(before.sum("latentgate_http_requests_total"), 0);
  EXPECT_EQ(before.value("latentgate_tokens_total", {{"kind", "output"}}), 0);
  EXPECT_EQ(before.value("latentgate_time_to_first_token_seconds_count"), 0);

  Told told;
  // A prompt of several cache blocks, sent twice: the second reads them from tier 0.
  std::string long_prompt;
  for (int i = 0; i < 12; ++i) long_prompt += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  for (int i = 0; i < 2; ++i) {
    const Reply r = post(chat, chatBody(4, long_prompt), key_);
    ASSERT_EQ(r.status, 200) << r.body;
    told.add(json::parse(r.body)["usage"], 1);
  }
  EXPECT_GT(told.hit, 0) << "the repeated prompt should hit the cache";
  // A stream with usage in its last chunk.
  json streamed = chatBody(3, "Hello there");
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  {
    const Reply r = post(chat, streamed, key_);
    ASSERT_EQ(r.status, 200) << r.body;
    json usage;
    size_t at = 0;
    while ((at = r.body.find("data: {", at)) != std::string::npos) {
      const size_t end = r.body.find('\n', at);
      const json chunk = json::parse(r.body.substr(at + 6, end - at - 6));
      if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
      at = end;
    }
    ASSERT_TRUE(usage.is_object()) << r.body;
    told.add(usage, 1);
  }
  // Completions with two prompts: two generations, one usage.
  {
    const Reply r = post("/v1/completions", {{"model", kModel}, {"prompt", {"Once upon a time", "In a galaxy"}},
                                             {"max_tokens", 2}}, key_);
    ASSERT_EQ(r.status, 200) << r.body;
    told.add(json::parse(r.body)["usage"], 2);
  }
  // Refusals: no key, unknown model.
  EXPECT_EQ(post(chat, chatBody(2, "hi"), std::nullopt).status, 401);
  json unknown = chatBody(2, "hi");
  unknown["model"] = "no-such-model";
  EXPECT_EQ(post(chat, unknown, key_).status, 404);
  EXPECT_EQ(curl("GET", "/no/such/path", {}).status, 404);

  std::string text;
  const PromText after = scrape(&text);
  expectPrometheusClientAgrees(text, after, harness_->dataDir());
  EXPECT_EQ(requests(after, chat, "POST", "200"), 3);
  EXPECT_EQ(requests(after, chat, "POST", "401"), 1);
  EXPECT_EQ(requests(after, chat, "POST", "404"), 1);
  EXPECT_EQ(requests(after, "/v1/completions", "POST", "200"), 1);
  EXPECT_EQ(requests(after, "other", "other", "404"), 1);
  EXPECT_EQ(requests(after, "/metrics", "GET", "200"), 1);  // the first scrape; this one is counted once answered
  EXPECT_EQ(after.sum("latentgate_http_requests_total"), 8);

  // Tokens: exactly what the usage objects said.
  auto delta = [&](const std::string& name, const Labels& labels = {}) {
    return after.value(name, labels) - before.value(name, labels);
  };
  EXPECT_EQ(delta("latentgate_tokens_total", {{"kind", "output"}}), told.output);
  EXPECT_EQ(told.output, 4 + 4 + 3 + 2 * 2);
  EXPECT_EQ(delta("latentgate_tokens_total", {{"kind", "prompt_hit_tier0"}}) +
                delta("latentgate_tokens_total", {{"kind", "prompt_hit_disk"}}),
            told.hit);
  EXPECT_EQ(delta("latentgate_tokens_total", {{"kind", "prompt_hit_disk"}}), 0);  // no disk tier here
  EXPECT_EQ(delta("latentgate_tokens_total", {{"kind", "prompt_miss"}}), told.miss);
  EXPECT_EQ(told.hit + told.miss, told.prompt);

  // One observation per generation (all had 2 or more tokens).
  EXPECT_EQ(told.generations, 5);
  EXPECT_EQ(delta("latentgate_time_to_first_token_seconds_count"), 5);
  EXPECT_EQ(delta("latentgate_time_per_output_token_seconds_count"), 5);
  EXPECT_EQ(delta("latentgate_e2e_request_latency_seconds_count"), 5);
  EXPECT_GT(delta("latentgate_time_to_first_token_seconds_sum"), 0);
  EXPECT_LT(delta("latentgate_time_to_first_token_seconds_sum"), delta("latentgate_e2e_request_latency_seconds_sum"));
  EXPECT_EQ(delta("latentgate_scheduler_finished_total", {{"reason", "length"}}), 5);
  EXPECT_EQ(delta("latentgate_scheduler_time_to_first_token_seconds_count"), 5);
  EXPECT_EQ(delta("latentgate_scheduler_generated_tokens_total"), told.output);
  EXPECT_EQ(delta("latentgate_cache_hit_tokens_total", {{"tier", "tier0"}}), told.hit);

  // Memory: the pool adds up, in blocks and bytes; the weights are the checkpoint.
  EXPECT_EQ(after.value("latentgate_model_weights_bytes"), static_cast<double>(backend().model().checkpointBytes()));
  EXPECT_GT(after.value("latentgate_model_weights_bytes"), 0);
  EXPECT_EQ(after.value("latentgate_latent_pool_capacity_blocks"), 256);
  EXPECT_EQ(after.sum("latentgate_latent_pool_blocks"), 256);
  EXPECT_EQ(after.value("latentgate_latent_pool_block_bytes"),
            static_cast<double>(backend().latentLayout().blockBytes()));
  EXPECT_EQ(after.sum("latentgate_latent_pool_bytes"), 256.0 * static_cast<double>(backend().latentLayout().blockBytes()));
  EXPECT_GT(after.value("latentgate_latent_pool_blocks", {{"state", "cached"}}), 0);  // the prompts' blocks stay cached
  EXPECT_EQ(after.value("latentgate_cache_bytes", {{"tier", "tier0"}}),
            after.value("latentgate_cache_blocks", {{"tier", "tier0"}}) *
                static_cast<double>(backend().latentLayout().blockBytes()));
  EXPECT_EQ(after.value("latentgate_cache_disk_state", {{"state", "none"}}), 1);
  EXPECT_GE(after.value("latentgate_http_connections_accepted_total"), 9);

  // Every response's ledger entry was committed before its client saw it.
  EXPECT_EQ(after.families.at("latentgate_cost_picodollars_total").type, "counter");
  // One entry per request (the two-prompt completion is one), not per generation.
  EXPECT_EQ(delta("latentgate_ledger_commit_seconds_count"), 4);
}

TEST_F(MetricsServerTest, OnlyTheAdminKeyAndTheMetricsTokenMayScrape) {
  const Reply with_token = getMetrics(std::string(kMetricsToken));
  EXPECT_EQ(with_token.status, 200) << with_token.body;
  EXPECT_EQ(with_token.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const PromText p = parsePrometheusText(with_token.body);
  EXPECT_TRUE(p.errors.empty()) << errorsOf(p);
  for (const auto& [name, f] : p.families) {
    // Ours, and vLLM's names for routers (router_surface_test).
    EXPECT_TRUE(name.starts_with("latentgate_") || name.starts_with("vllm:")) << name;
    EXPECT_FALSE(f.help.empty()) << name;
  }

  for (const std::optional<std::string>& bad :
       {std::optional<std::string>(key_), std::optional<std::string>(), std::optional<std::string>("wrong-token-of-some-length"),
        std::optional<std::string>(std::string(kMetricsToken) + "x")}) {
    const Reply r = getMetrics(bad);
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  }
  // The admin key is no API key either.
  EXPECT_EQ(post("/v1/chat/completions", chatBody(2, "hi"), admin_key_).status, 401);

  // A request whose client leaves before the response: counted as 499 (the
  // cancelled generation's error reaches an exchange already disconnected).
  auto c = testing::RawClient::connect(harness_->port());
  ASSERT_TRUE(c && c->startTls(harness_->caFile()));
  const std::string body = chatBody(400, "Tell me a long story").dump();
  ASSERT_TRUE(c->send("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + key_ +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body));
  // Wait until it runs, then leave.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && harness_->server().scheduler().schedulerStats().generated_tokens == 0) {
    std::this_thread::sleep_for(2ms);
  }
  c->abort();
  PromText after;
  for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
    after = scrape();
    if (after.value("latentgate_http_requests_total",
                    {{"endpoint", "/v1/chat/completions"}, {"method", "POST"}, {"code", "499"}}) >= 1) {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(after.value("latentgate_http_requests_total",
                        {{"endpoint", "/v1/chat/completions"}, {"method", "POST"}, {"code", "499"}}),
            1);
  EXPECT_EQ(after.value("latentgate_scheduler_finished_total", {{"reason", "cancelled"}}), 1);
  EXPECT_EQ(after.value("latentgate_http_requests_total", {{"endpoint", "/metrics"}, {"method", "GET"}, {"code", "401"}}),
            4);
  EXPECT_GE(after.value("latentgate_http_requests_total", {{"endpoint", "/metrics"}, {"method", "GET"}, {"code", "200"}}),
            1);
  EXPECT_EQ(after.value("latentgate_http_requests_total",
                        {{"endpoint", "/v1/chat/completions"}, {"method", "POST"}, {"code", "401"}}),
            1);
  // The cancelled generation's tokens were computed: counted, and its latency too.
  EXPECT_GT(after.value("latentgate_tokens_total", {{"kind", "output"}}), 0);
  EXPECT_EQ(after.value("latentgate_e2e_request_latency_seconds_count"), 1);

  // No secret and no prompt text in what a scraper reads.
  const std::string text = getMetrics(admin_key_).body;
  for (const std::string& secret : {admin_key_, key_, std::string(kMetricsToken), std::string("Tell me a long story"),
                                    harness_->dataDir(), test::integrationModelDir()}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret;
  }
}

}  // namespace
}  // namespace lg::proxy

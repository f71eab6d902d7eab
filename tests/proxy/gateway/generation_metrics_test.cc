// The generations' metric families (proxy/gateway/generation_metrics.h)
// from synthetic final events, read back by the strict parser
// (tests/support/prometheus_text.h). tests/integration/metrics_server_test.cc
// scrapes a real server.
#include "proxy/gateway/generation_metrics.h"

#include <gtest/gtest.h>

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
  m.generationEnded(received, finalEvent(serving::FinishReason::kLength, 100, 64, 16, 5, t), {}, received + 2s);
  // A cancelled generation with one token: TTFT, no TPOT.
  serving::Timing one;
  one.total = 0.3;
  one.first_token = 0.2;
  m.generationEnded(received, finalEvent(serving::FinishReason::kCancelled, 10, 0, 0, 1, one), {}, received + 400ms);
  // Cancelled before its first token: end to end only.
  serving::Timing none;
  none.total = 0.05;
  m.generationEnded(received, finalEvent(serving::FinishReason::kCancelled, 10, 0, 0, 0, none), {}, received + 60ms);
  // Refused in the queue: never served, no latency; no tokens.
  serving::Timing refused;
  refused.total = 30;
  m.generationEnded(received, finalEvent(serving::FinishReason::kRefused, 0, 0, 0, 0, refused), {}, received + 30s);

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

}  // namespace
}  // namespace lg::proxy

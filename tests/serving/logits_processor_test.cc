// LogitsProcessor: each processing step on a small row, in vLLM's order, and
// what the sampler then does with the result.
#include "serving/logits_processor.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "engine/sampler.h"

namespace lg::serving {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingOptions options() {
  SamplingOptions s;
  s.temperature = 1.0f;
  s.max_tokens = 8;
  return s;
}

std::vector<float> run(const LogitsProcessor& p, std::vector<float> row, const uint32_t* mask = nullptr) {
  std::vector<float> out(row.size());
  p.apply(row, out, mask);
  return out;
}

TEST(LogitsProcessorTest, NothingToDoIsInactive) {
  EXPECT_FALSE(LogitsProcessor(options(), std::vector<int32_t>{1, 2}).active());
  SamplingOptions greedy = options();
  greedy.temperature = 0;
  greedy.min_p = 0.5f;  // greedy picks the likeliest whatever min_p says
  EXPECT_FALSE(LogitsProcessor(greedy, std::vector<int32_t>{}).active());
}

TEST(LogitsProcessorTest, PresenceAndFrequencyPenaltiesCountGeneratedTokens) {
  SamplingOptions s = options();
  s.presence_penalty = 0.5f;
  s.frequency_penalty = 0.25f;
  LogitsProcessor p(s, std::vector<int32_t>{0});  // the prompt does not count for these
  ASSERT_TRUE(p.active());
  p.accepted(1);
  p.accepted(2);
  p.accepted(2);
  const std::vector<float> out = run(p, {1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(out[2], 1.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(out[3], 1.0f);
}

TEST(LogitsProcessorTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfPromptAndOutput) {
  SamplingOptions s = options();
  s.repetition_penalty = 2.0f;
  LogitsProcessor p(s, std::vector<int32_t>{0, 1, 1});
  p.accepted(2);
  const std::vector<float> out = run(p, {4.0f, -4.0f, 4.0f, 4.0f});
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(out[1], -8.0f);  // once, though it appears twice
  EXPECT_FLOAT_EQ(out[2], 2.0f);
  EXPECT_FLOAT_EQ(out[3], 4.0f);
}

TEST(LogitsProcessorTest, BiasMaskAndMinP) {
  SamplingOptions s = options();
  s.logit_bias = {{1, 100.0f}, {2, -100.0f}};
  LogitsProcessor p(s, std::vector<int32_t>{});
  std::vector<float> out = run(p, {0.0f, 0.0f, 5.0f, 0.0f});
  EXPECT_FLOAT_EQ(out[1], 100.0f);
  EXPECT_FLOAT_EQ(out[2], -95.0f);
  // Greedy sampling now picks the biased token.
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(engine::Sampler(greedy, 1).sample(out).token, 1);

  // A constraint's mask: only tokens 0 and 3 (bits 0 and 3).
  const uint32_t mask[1] = {0b1001u};
  out = run(p, {0.0f, 0.0f, 5.0f, 1.0f}, mask);
  EXPECT_EQ(out[1], -kInf);
  EXPECT_EQ(out[2], -kInf);
  EXPECT_FLOAT_EQ(out[3], 1.0f);
  EXPECT_EQ(engine::Sampler(greedy, 1).sample(out).token, 3);
  // The reported alternatives are the constrained distribution's.
  engine::SamplingParams scored = greedy;
  scored.top_logprobs = 4;
  const engine::SampledToken t = engine::Sampler(scored, 1).sample(out);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_NEAR(std::exp(t.top[0].logprob) + std::exp(t.top[1].logprob), 1.0, 1e-6);

  // min_p 0.5 at temperature 1 keeps tokens within ln 2 of the likeliest.
  SamplingOptions m = options();
  m.min_p = 0.5f;
  LogitsProcessor mp(m, std::vector<int32_t>{});
  out = run(mp, {0.0f, 1.0f, 0.5f, 0.2f});
  EXPECT_EQ(out[0], -kInf);
  EXPECT_FLOAT_EQ(out[1], 1.0f);
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  EXPECT_EQ(out[3], -kInf);
}

}  // namespace
}  // namespace lg::serving

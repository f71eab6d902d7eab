// Sampler and StopChecker: greedy, distribution sanity under temperature /
// top-k / top-p with fixed seeds, reproducibility, log-probabilities, stops.
#include "engine/sampler.h"

#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace lg::engine {
namespace {

std::vector<float> logitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p) + 3.0));  // arbitrary offset
  return l;
}

std::vector<double> frequencies(SamplingParams params, const std::vector<float>& logits, int draws) {
  params.seed = 12345;
  Sampler s(params, 0);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(s.sample(logits).token)] += 1.0 / draws;
  return f;
}

void expectClose(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p, 1);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f}).token, 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  Sampler k1(p, 1);
  EXPECT_EQ(k1.sample(std::vector<float>{0.1f, 2.0f, 3.0f}).token, 2);
}

TEST(SamplerTest, PlainSamplingFollowsTheDistribution) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  SamplingParams p;
  expectClose(frequencies(p, logitsFor(probs), 40000), probs, 0.01);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  SamplingParams p;
  p.temperature = 0.5f;  // p^2, renormalized
  expectClose(frequencies(p, logitsFor(probs), 40000), {0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38}, 0.01);
  p.temperature = 1e6f;  // nearly uniform
  expectClose(frequencies(p, logitsFor(probs), 40000), {1 / 3.0, 1 / 3.0, 1 / 3.0}, 0.01);
}

TEST(SamplerTest, TopKAndTopPRestrictTheCandidates) {
  const std::vector<double> probs = {0.1, 0.5, 0.3, 0.1};
  SamplingParams p;
  p.top_k = 2;
  expectClose(frequencies(p, logitsFor(probs), 40000), {0.0, 0.625, 0.375, 0.0}, 0.01);
  p.top_k = 0;
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.8: tokens 1 and 2
  expectClose(frequencies(p, logitsFor(probs), 40000), {0.0, 0.625, 0.375, 0.0}, 0.01);
  p.top_p = 0.4f;  // the most likely token alone reaches it
  expectClose(frequencies(p, logitsFor(probs), 1000), {0.0, 1.0, 0.0, 0.0}, 1e-9);
  p.top_k = 3;
  p.top_p = 0.6f;  // top-k first (0.5,0.3,0.1 -> 0.556,0.333,0.111), then 0.556 < 0.6: two tokens
  expectClose(frequencies(p, logitsFor(probs), 40000), {0.0, 0.625, 0.375, 0.0}, 0.01);
}

TEST(SamplerTest, TopPOverALargeVocabulary) {
  // 100k tokens, most mass in the first 300 ids: exercises the growing partial sort.
  std::vector<float> logits(100000, -10.0f);
  for (int i = 0; i < 300; ++i) logits[static_cast<size_t>(i)] = 5.0f - 0.01f * static_cast<float>(i);
  SamplingParams p;
  p.top_p = 0.9f;
  p.seed = 3;
  Sampler s(p, 0);
  for (int i = 0; i < 300; ++i) EXPECT_LT(s.sample(logits).token, 300);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37));
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    p.top_p = 0.95f;
    p.temperature = 0.8f;
    Sampler s(p, 999);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits).token);
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  // Without a seed the fallback seed decides.
  SamplingParams p;
  Sampler a(p, 7), b(p, 7), c(p, 8);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 32; ++i) {
    ta.push_back(a.sample(logits).token);
    tb.push_back(b.sample(logits).token);
    tc.push_back(c.sample(logits).token);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, LogprobsAreTheModelsLogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 3;
  Sampler s(p, 1);
  SampledToken t = s.sample(logits);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, 3.0 - std::log(z), 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_EQ(t.top[1].token, 3);
  EXPECT_EQ(t.top[2].token, 0);
  EXPECT_NEAR(t.top[2].logprob, 1.0 - std::log(z), 1e-6);
  // Sampling settings do not change the reported distribution.
  p.temperature = 0.3f;
  p.top_k = 2;
  p.seed = 5;
  Sampler s2(p, 1);
  SampledToken t2 = s2.sample(logits);
  EXPECT_NEAR(t2.logprob, logits[static_cast<size_t>(t2.token)] - std::log(z), 1e-6);
  EXPECT_NEAR(t2.top[0].logprob, t.top[0].logprob, 1e-7);
  // Large logits do not overflow.
  std::vector<float> big = {1000.0f, 999.0f};
  SampledToken tb = Sampler(p, 1).sample(big);
  EXPECT_TRUE(std::isfinite(tb.logprob));
}

TEST(StopCheckerTest, EosStopSequencesAndLength) {
  SamplingParams p;
  p.eos_token_ids = {1};
  p.stop_sequences = {{7, 8, 9}, {8, 8}};
  p.max_tokens = 10;
  {
    StopChecker c(p);
    EXPECT_EQ(c.push(5), FinishReason::kNone);
    EXPECT_EQ(c.push(7), FinishReason::kNone);
    EXPECT_EQ(c.pendingLength(), 1);  // [7] may start [7, 8, 9]
    EXPECT_EQ(c.push(8), FinishReason::kNone);
    EXPECT_EQ(c.pendingLength(), 2);
    EXPECT_EQ(c.push(9), FinishReason::kStop);
    EXPECT_EQ(c.matchedLength(), 3);
  }
  {
    StopChecker c(p);
    for (int32_t t : {7, 7, 8}) EXPECT_EQ(c.push(t), FinishReason::kNone);
    EXPECT_EQ(c.push(8), FinishReason::kStop);  // [8, 8]
    EXPECT_EQ(c.matchedLength(), 2);
  }
  {
    StopChecker c(p);
    EXPECT_EQ(c.push(1), FinishReason::kStop);
    EXPECT_EQ(c.matchedLength(), 1);
  }
  {
    StopChecker c(p);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(c.push(3), FinishReason::kNone);
    EXPECT_EQ(c.push(3), FinishReason::kLength);
    EXPECT_EQ(c.matchedLength(), 0);
    EXPECT_EQ(c.pendingLength(), 0);
  }
}

TEST(SamplerTest, ParamsAreValidated) {
  SamplingParams p;
  EXPECT_TRUE(validateSamplingParams(p, 100).isOk());
  p.temperature = -1.0f;
  EXPECT_FALSE(validateSamplingParams(p, 100).isOk());
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(validateSamplingParams(p, 100).isOk());
  p = {};
  p.top_logprobs = 21;
  EXPECT_FALSE(validateSamplingParams(p, 100).isOk());
  p = {};
  p.stop_sequences = {{}};
  EXPECT_FALSE(validateSamplingParams(p, 100).isOk());
  p = {};
  p.eos_token_ids = {100};
  EXPECT_FALSE(validateSamplingParams(p, 100).isOk());
}

}  // namespace
}  // namespace lg::engine

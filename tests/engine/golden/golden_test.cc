// Golden tests: the engine's logits against transformers' eager fp32 forward
// (tests/fixtures/README.md) for every position of the fixtures' ids, in every
// execution mode: one prefill, chunked prefill, prefill then one-token decode.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/forward_runner.h"
#include "engine/model/rope.h"
#include "golden_util.h"

namespace lg::engine::testing {
namespace {

constexpr double kTolerance = 1e-3;

struct Mode {
  const char* name;
  int32_t chunk;
  bool decode;  // prefill prompt_len tokens, then decode one at a time
};

constexpr Mode kModes[] = {
    {"full", 0, false}, {"chunk1", 1, false}, {"chunk7", 7, false}, {"chunk64", 64, false}, {"decode", 0, true},
};

class GoldenTest : public ::testing::TestWithParam<std::string> {};

// Greedy: the argmax after each prompt/generated position is the next golden id.
void expectGreedyPath(const Golden& g, const std::vector<float>& logits, const std::string& what) {
  const int64_t n = static_cast<int64_t>(g.ids.size());
  for (int64_t p = g.prompt_len - 1; p + 1 < n; ++p) {
    const float* row = logits.data() + p * g.vocab;
    const int64_t best = std::max_element(row, row + g.vocab) - row;
    EXPECT_EQ(best, g.ids[static_cast<size_t>(p + 1)]) << what << " position " << p;
  }
}

TEST_P(GoldenTest, LogitsMatchInEveryMode) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  ASSERT_FALSE(g.ids.empty());
  auto backend = makeBackend(name, LatentDType::kF32);
  ASSERT_NE(backend, nullptr);
  const int64_t n = static_cast<int64_t>(g.ids.size());
  for (const Mode& mode : kModes) {
    ForwardRunOptions options;
    options.chunk = mode.chunk;
    options.decode_from = mode.decode ? static_cast<int32_t>(g.prompt_len) : -1;
    ForwardRunStats stats;
    auto logits = runForward(*backend, g.ids, options, &stats);
    ASSERT_TRUE(logits.isOk()) << mode.name << ": " << logits.status().toString();
    const double err = maxAbsDiff(*logits, g.logits, g.vocab, 0, n);
    EXPECT_LE(err, kTolerance) << name << " mode " << mode.name;
    std::printf("[ golden ] %-12s f32 latents %-8s max |err| = %.3g\n", name.c_str(), mode.name, err);
    EXPECT_EQ(stats.computed_tokens, n);
    if (mode.decode) {
      EXPECT_EQ(stats.decode_steps, n - g.prompt_len);
    }
    expectGreedyPath(g, *logits, name + " mode " + mode.name);
  }
  EXPECT_EQ(backend->blocks().numUsed(), 0);  // every block was released
}

// Each attention form forced for every chunk (decode steps included) meets
// the same bar in every mode; `auto` above mixes them (a fresh prefill runs
// standard, a decode step absorbed).
TEST_P(GoldenTest, EachAttentionFormForcedMatches) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  ASSERT_FALSE(g.ids.empty());
  const int64_t n = static_cast<int64_t>(g.ids.size());
  for (const AttentionForm form : {AttentionForm::kAbsorbed, AttentionForm::kStandard}) {
    const char* form_name = form == AttentionForm::kAbsorbed ? "absorbed" : "standard";
    for (const int block_tokens : {64, 5}) {
      BackendOptions backend_options;
      backend_options.threads = 2;
      backend_options.block_tokens = block_tokens;
      backend_options.attention_form = form;
      auto backend = makeBackend(name, backend_options);
      ASSERT_NE(backend, nullptr);
      for (const Mode& mode : kModes) {
        ForwardRunOptions options;
        options.chunk = mode.chunk;
        options.decode_from = mode.decode ? static_cast<int32_t>(g.prompt_len) : -1;
        auto logits = runForward(*backend, g.ids, options);
        ASSERT_TRUE(logits.isOk()) << form_name << " " << mode.name << ": " << logits.status().toString();
        const double err = maxAbsDiff(*logits, g.logits, g.vocab, 0, n);
        EXPECT_LE(err, kTolerance) << name << " " << form_name << " blocks of " << block_tokens << " mode " << mode.name;
        if (block_tokens == 64) {
          std::printf("[ golden ] %-12s %-8s form %-8s max |err| = %.3g\n", name.c_str(), form_name, mode.name, err);
        }
        expectGreedyPath(g, *logits, name + " " + form_name + " mode " + mode.name);
      }
    }
  }
}

// Small blocks: attention key tiles span several blocks, chunks cross block edges.
TEST_P(GoldenTest, SmallBlocksMatch) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  auto backend = makeBackend(name, LatentDType::kF32, /*block_tokens=*/5);
  ASSERT_NE(backend, nullptr);
  ForwardRunOptions options;
  options.chunk = 13;
  auto logits = runForward(*backend, g.ids, options);
  ASSERT_TRUE(logits.isOk()) << logits.status().toString();
  EXPECT_LE(maxAbsDiff(*logits, g.logits, g.vocab, 0, static_cast<int64_t>(g.ids.size())), kTolerance);
}

// BF16 latent storage: measured and reported, not held to the 1e-3 bar it
// misses (rounding c_kv/k_pe to 8 significant bits moves logits by ~5e-3, and
// can flip a near-tie in MoE routing; docs/engine.md, "Numerics").
TEST_P(GoldenTest, Bf16LatentsKeepGreedyPath) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  auto backend = makeBackend(name, LatentDType::kBF16);
  ASSERT_NE(backend, nullptr);
  const int64_t n = static_cast<int64_t>(g.ids.size());
  for (const Mode& mode : {kModes[0], kModes[2], kModes[4]}) {
    ForwardRunOptions options;
    options.chunk = mode.chunk;
    options.decode_from = mode.decode ? static_cast<int32_t>(g.prompt_len) : -1;
    auto logits = runForward(*backend, g.ids, options);
    ASSERT_TRUE(logits.isOk()) << logits.status().toString();
    std::vector<double> rows;
    for (int64_t p = 0; p < n; ++p) rows.push_back(maxAbsDiff(*logits, g.logits, g.vocab, p, p + 1));
    std::sort(rows.begin(), rows.end());
    const double median = rows[rows.size() / 2];
    std::printf("[ golden ] %-12s bf16 latents %-8s max |err| = %.3g, median row %.3g\n", name.c_str(), mode.name,
                rows.back(), median);
    EXPECT_LE(median, 1e-2) << name << " " << mode.name;
    expectGreedyPath(g, *logits, name + " bf16 mode " + mode.name);
  }
}

TEST_P(GoldenTest, RopeAndSoftmaxScaleMatchTransformers) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  auto backend = makeBackend(name);
  ASSERT_NE(backend, nullptr);
  RopeParams rope = computeRope(backend->config());
  ASSERT_EQ(rope.inv_freq.size(), g.rope_inv_freq.size());
  for (size_t i = 0; i < rope.inv_freq.size(); ++i) {
    EXPECT_NEAR(rope.inv_freq[i], g.rope_inv_freq[i], 2e-7 * std::fabs(g.rope_inv_freq[i])) << i;
  }
  EXPECT_EQ(rope.attention_factor, 1.0f);
  EXPECT_NEAR(backend->config().softmaxScale(), g.attn_scaling, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::Values("tiny-v2", "tiny-v3", "tiny-v3-fp8"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           for (auto& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace lg::engine::testing

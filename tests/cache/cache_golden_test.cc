// Cache equivalence on the golden models, in-process: a prefix stored by one
// "process" (backend + cache) and restored by another must give the logits of
// an uncached run within 1e-5 and the transformers golden within 1e-3, for the
// default stored dtype (F32). The golden error of each stored dtype is
// measured and printed (docs/cache.md quotes it).
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "tests/cache/cache_test_util.h"
#include "tests/cache/golden_run.h"

namespace lg::cache::testing {
namespace {

using engine::testing::Golden;
using engine::testing::loadGolden;

constexpr int kBt = 8;

int64_t argmaxRow(const std::vector<float>& logits, int64_t vocab, int64_t row) {
  const float* r = logits.data() + row * vocab;
  return std::max_element(r, r + vocab) - r;
}

TEST(CacheGoldenTest, RestoredPrefixMatchesUncachedAndGoldenPerStoredDtype) {
  std::printf("\n| fixture | stored dtype | cached tokens | computed rows | max err vs uncached | max err vs golden | greedy path |\n");
  for (const char* fixture : {"tiny-v2", "tiny-v3", "tiny-v3-fp8"}) {
    const Golden g = loadGolden(fixture);
    const int64_t n = static_cast<int64_t>(g.ids.size());
    auto backend = engine::testing::makeBackend(fixture, engine::LatentDType::kF32, kBt, 2);
    ASSERT_NE(backend, nullptr);
    auto uncached = engine::runForward(*backend, g.ids, {});
    ASSERT_TRUE(uncached.isOk()) << uncached.status().toString();
    // Half of the prompt is stored; the rest, and the greedy continuation,
    // are computed over the restored latents.
    const int32_t half = static_cast<int32_t>(g.prompt_len / 2 / kBt * kBt);
    for (StoredDType dtype : {StoredDType::kF32, StoredDType::kBF16, StoredDType::kInt8}) {
      ScopedTempDir dir;
      GoldenRunOptions o;
      o.block_tokens = kBt;
      o.stored_dtype = dtype;
      GoldenRun store = runWithCache(fixture, dir.path() + "/kv", std::span(g.ids).first(half + 1), o);
      ASSERT_TRUE(store.ok);
      EXPECT_EQ(store.cached, 0);
      EXPECT_EQ(store.stats.write_back_written_blocks, static_cast<uint64_t>(half / kBt));
      GoldenRun restored = runWithCache(fixture, dir.path() + "/kv", g.ids, o);
      ASSERT_TRUE(restored.ok);
      ASSERT_EQ(restored.cached, half) << fixture << " " << storedDTypeName(dtype);
      EXPECT_EQ(restored.stats.restored_blocks, static_cast<uint64_t>(half / kBt));
      for (int64_t r = 0; r < half; ++r) ASSERT_TRUE(std::isnan(restored.logits[static_cast<size_t>(r * g.vocab)]));
      const double vs_uncached = maxDiff(restored.logits, *uncached, g.vocab, half, n);
      const double vs_golden = maxDiff(restored.logits, g.logits, g.vocab, half, n);
      int64_t greedy_same = 0;
      for (int64_t r = g.prompt_len - 1; r < n; ++r) {
        greedy_same += argmaxRow(restored.logits, g.vocab, r) == argmaxRow(g.logits, g.vocab, r);
      }
      std::printf("| %s | %s | %d | %lld | %.2g | %.2g | %lld/%lld |\n", fixture,
                  std::string(storedDTypeName(dtype)).c_str(), restored.cached, static_cast<long long>(n - half),
                  vs_uncached, vs_golden, static_cast<long long>(greedy_same),
                  static_cast<long long>(n - g.prompt_len + 1));
      if (dtype == StoredDType::kF32) {
        EXPECT_LE(vs_uncached, 1e-5) << fixture;
        EXPECT_LE(vs_golden, 1e-3) << fixture;
      }
    }
  }
}

TEST(CacheGoldenTest, ChunkedRunOverARestoredPrefixMatches) {
  const Golden g = loadGolden("tiny-v3");
  ScopedTempDir dir;
  GoldenRunOptions o;
  GoldenRun first = runWithCache("tiny-v3", dir.path() + "/kv", g.ids, o);
  ASSERT_TRUE(first.ok);
  o.chunk = 7;
  GoldenRun second = runWithCache("tiny-v3", dir.path() + "/kv", g.ids, o);
  ASSERT_TRUE(second.ok);
  const int64_t n = static_cast<int64_t>(g.ids.size());
  EXPECT_EQ(second.cached, (n - 1) / kBt * kBt);
  EXPECT_LE(maxDiff(second.logits, first.logits, g.vocab, second.cached, n), 1e-5);
  EXPECT_LE(maxDiff(second.logits, g.logits, g.vocab, second.cached, n), 1e-3);
}

}  // namespace
}  // namespace lg::cache::testing

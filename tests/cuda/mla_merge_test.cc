// The log-sum-exp merge of split attention (kernels/mla_merge.h), on the host:
// softmax-weighted sums computed over key ranges separately and merged equal
// the sum over all keys at once, for any split, with empty splits and with
// scores far apart. Runs everywhere (no GPU): the merge kernel uses the same
// function.
#include "kernels/mla_merge.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace lg::kernels {
namespace {

TEST(MlaMergeTest, SplitSoftmaxSumsMergeIntoTheWhole) {
  std::mt19937 rng(3);
  for (const float spread : {1.0f, 30.0f, 300.0f}) {
    std::uniform_real_distribution<float> score(-spread, spread), value(-1.0f, 1.0f);
    const int n = 1000;
    std::vector<float> s(n), v(n);
    for (int i = 0; i < n; ++i) {
      s[static_cast<size_t>(i)] = score(rng);
      v[static_cast<size_t>(i)] = value(rng);
    }
    double mx = -INFINITY, sum = 0, whole = 0;
    for (float x : s) mx = std::max<double>(mx, x);
    for (int i = 0; i < n; ++i) {
      const double e = std::exp(s[static_cast<size_t>(i)] - mx);
      sum += e;
      whole += e * v[static_cast<size_t>(i)];
    }
    whole /= sum;
    for (const std::vector<int>& bounds : std::vector<std::vector<int>>{{0, n}, {0, 1, n}, {0, 333, 334, 700, n},
                                                                        {0, 500, 500, 500, n}}) {
      // Partials: (m, l) interleaved as the kernel stores them, and o.
      const int z_count = static_cast<int>(bounds.size()) - 1;
      std::vector<float> ml(2 * static_cast<size_t>(z_count)), o(static_cast<size_t>(z_count)), w(static_cast<size_t>(z_count));
      for (int z = 0; z < z_count; ++z) {
        float m = -INFINITY, l = 0, acc = 0;
        for (int i = bounds[static_cast<size_t>(z)]; i < bounds[static_cast<size_t>(z) + 1]; ++i) m = std::max(m, s[static_cast<size_t>(i)]);
        for (int i = bounds[static_cast<size_t>(z)]; i < bounds[static_cast<size_t>(z) + 1]; ++i) {
          const float e = std::exp(s[static_cast<size_t>(i)] - m);
          l += e;
          acc += e * v[static_cast<size_t>(i)];
        }
        ml[2 * static_cast<size_t>(z)] = m;
        ml[2 * static_cast<size_t>(z) + 1] = l;
        o[static_cast<size_t>(z)] = acc;
      }
      ASSERT_TRUE(mlaMergeWeights(ml.data(), ml.data() + 1, z_count, 2, w.data()));
      double merged = 0;
      for (int z = 0; z < z_count; ++z) merged += w[static_cast<size_t>(z)] * o[static_cast<size_t>(z)];
      EXPECT_NEAR(merged, whole, 1e-5) << "spread " << spread << ", " << z_count << " splits";
    }
  }
  // Every split empty: no weights.
  std::vector<float> ml = {-INFINITY, 0.0f, -INFINITY, 0.0f}, w(2, 1.0f);
  EXPECT_FALSE(mlaMergeWeights(ml.data(), ml.data() + 1, 2, 2, w.data()));
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[1], 0.0f);
}

}  // namespace
}  // namespace lg::kernels

// The CPU linear kernels against a naive double-precision product, for every
// weight dtype, both layouts, the streaming and packed paths and ragged edges.
#include "engine/cpu/linear.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/dtype.h"

namespace lg::engine::cpu {
namespace {

struct OwnedWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  WeightView view;
};

OwnedWeight makeWeight(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  OwnedWeight w;
  w.bytes.resize(static_cast<size_t>(rows * cols) * dtypeSize(dtype));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = normal(rng);
    switch (dtype) {
      case DType::kF32: std::memcpy(&w.bytes[4 * i], &v, 4); break;
      case DType::kBF16: {
        uint16_t b = floatToBf16(v);
        std::memcpy(&w.bytes[2 * i], &b, 2);
        break;
      }
      case DType::kF16: {
        uint16_t b = floatToF16(v);
        std::memcpy(&w.bytes[2 * i], &b, 2);
        break;
      }
      case DType::kF8E4M3: w.bytes[i] = floatToFp8e4m3(v * 64.0f); break;
      default: break;
    }
  }
  w.view.dtype = dtype;
  w.view.data = w.bytes.data();
  w.view.ld = cols;
  w.view.rows = rows;
  w.view.cols = cols;
  if (dtype == DType::kF8E4M3) {
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    for (int64_t i = 0; i < sr * sc; ++i) w.scales.push_back(std::ldexp(1.0f + 0.1f * static_cast<float>(i), -6));
    w.view.scales = w.scales.data();
    w.view.scale_ld = sc;
  }
  return w;
}

void checkProduct(DType dtype, WeightLayout layout, int64_t m, int64_t k, int64_t n, bool accumulate, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(m * 1000003 + k * 1009 + n));
  const bool nt = layout == WeightLayout::kOutIn;
  OwnedWeight w = makeWeight(dtype, nt ? n : k, nt ? k : n, rng);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int64_t ldx = k + 3, ldy = n + 5;
  std::vector<float> x(static_cast<size_t>(m * ldx)), y(static_cast<size_t>(m * ldy));
  for (auto& v : x) v = uni(rng);
  for (auto& v : y) v = uni(rng);
  std::vector<float> y0 = y;
  LinearProblem p;
  p.x = x.data();
  p.m = m;
  p.ldx = ldx;
  p.w = w.view;
  p.layout = layout;
  p.y = y.data();
  p.ldy = ldy;
  p.accumulate = accumulate;
  ThreadPool pool(threads);
  runLinear(pool, std::span<const LinearProblem>(&p, 1));
  double max_err = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = accumulate ? y0[i * ldy + j] : 0.0;
      double magnitude = std::fabs(ref);  // sum of |terms|: the scale of fp32 rounding
      for (int64_t t = 0; t < k; ++t) {
        const double term = double(x[i * ldx + t]) * (nt ? w.view.value(j, t) : w.view.value(t, j));
        ref += term;
        magnitude += std::fabs(term);
      }
      max_err = std::max(max_err, std::fabs(ref - y[i * ldy + j]) / (1e-30 + magnitude));
    }
    // Padding between rows is never written.
    for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], y0[i * ldy + j]);
  }
  EXPECT_LT(max_err, 4e-6) << dtypeName(dtype) << " m=" << m << " k=" << k << " n=" << n << " nt=" << nt;
}

TEST(LinearTest, MatchesNaiveProductForAllDtypesAndShapes) {
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16, DType::kF8E4M3}) {
    for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
      for (int64_t m : {1, 2, 3, 4, 5, 7, 13, 100}) {
        for (auto [k, n] : {std::pair<int64_t, int64_t>{1, 1}, {17, 5}, {48, 64}, {300, 70}, {160, 300}, {600, 130}}) {
          checkProduct(dtype, layout, m, k, n, /*accumulate=*/m % 2 == 1, /*threads=*/2);
        }
      }
    }
  }
}

TEST(LinearTest, SingleThreadAndRowSlices) {
  checkProduct(DType::kBF16, WeightLayout::kOutIn, 37, 513, 257, false, 1);
  // A row slice of an FP8 weight uses the tensor's own block coordinates.
  std::mt19937 rng(7);
  OwnedWeight w = makeWeight(DType::kF8E4M3, 300, 200, rng);
  WeightView slice = w.view.rowSlice(130, 100);
  std::vector<float> x(200, 0.5f), y(100);
  LinearProblem p{x.data(), 1, 200, slice, WeightLayout::kOutIn, y.data(), 100, false};
  ThreadPool pool(2);
  runLinear(pool, std::span<const LinearProblem>(&p, 1));
  for (int j = 0; j < 100; ++j) {
    double ref = 0;
    for (int t = 0; t < 200; ++t) ref += 0.5 * w.view.value(130 + j, t);
    EXPECT_NEAR(ref, y[j], 1e-4 * (1 + std::fabs(ref)));
  }
}

TEST(DTypeTest, Fp8DecodesEveryCode) {
  EXPECT_EQ(fp8e4m3ToFloat(0x00), 0.0f);
  EXPECT_EQ(fp8e4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8e4m3ToFloat(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3ToFloat(0x7f)));
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7f) == 0x7f) continue;
    EXPECT_EQ(floatToFp8e4m3(fp8e4m3ToFloat(static_cast<uint8_t>(v))), v == 0x80 ? 0x80 : v) << v;
  }
}

TEST(DTypeTest, HalfAndBfloatRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 3.0e-7f}) {
    EXPECT_EQ(f16ToFloat(floatToF16(f)), f16ToFloat(floatToF16(f16ToFloat(floatToF16(f)))));
    EXPECT_NEAR(f16ToFloat(floatToF16(f)), f, std::fabs(f) * 1e-3 + 1e-7);
  }
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + 1.0f / 256.0f)), 1.0f);  // tie to even
  EXPECT_EQ(bf16ToFloat(floatToBf16(3.0f)), 3.0f);
}

}  // namespace
}  // namespace lg::engine::cpu

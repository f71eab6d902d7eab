#include "engine/cpu/ops.h"

#include <cmath>

#include "engine/cpu/simd.h"

namespace lg::engine::cpu {

void rmsNorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  if (i < n) {
    const __m512 v = _mm512_maskz_loadu_ps(tailMask(n - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float mean = _mm512_reduce_add_ps(acc) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(mean + eps);
  // transformers: weight * (x * rsqrt(var + eps)); keep that multiplication order.
  const __m512 vinv = _mm512_set1_ps(inv);
  for (i = 0; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv)));
  }
  if (i < n) {
    const __mmask16 m = tailMask(n - i);
    _mm512_mask_storeu_ps(out + i, m,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv)));
  }
}

void rmsNormRows(ThreadPool& pool, const float* x, int64_t ldx, const float* w, float* out, int64_t ldo,
                 int64_t rows, int64_t n, float eps) {
  if (rows * n < 65536) {
    for (int64_t r = 0; r < rows; ++r) rmsNorm(x + r * ldx, w, out + r * ldo, n, eps);
    return;
  }
  constexpr int64_t kRowsPerTask = 16;
  pool.parallelFor((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t t, int) {
    for (int64_t r = t * kRowsPerTask; r < std::min(rows, (t + 1) * kRowsPerTask); ++r) {
      rmsNorm(x + r * ldx, w, out + r * ldo, n, eps);
    }
  });
}

namespace {

void siluMulRow(float* g, const float* u, int64_t n) {
  // silu(x) = x * sigmoid(x); sigmoid from exp(-|x|) so the exp never overflows.
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tailMask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = expNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __m512 inv = _mm512_div_ps(one, _mm512_add_ps(one, e));
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 sig = _mm512_mask_blend_ps(positive, _mm512_mul_ps(e, inv), inv);
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

}  // namespace

void siluMulRows(ThreadPool& pool, float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows, int64_t n) {
  if (rows * n < 65536) {
    for (int64_t r = 0; r < rows; ++r) siluMulRow(gate + r * ldg, up + r * ldu, n);
    return;
  }
  constexpr int64_t kRowsPerTask = 8;
  pool.parallelFor((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t t, int) {
    for (int64_t r = t * kRowsPerTask; r < std::min(rows, (t + 1) * kRowsPerTask); ++r) {
      siluMulRow(gate + r * ldg, up + r * ldu, n);
    }
  });
}

void weightRow(const WeightView& w, int64_t r, float* out) {
  auto convert = [&](auto row) {
    row.init(w, r);
    int64_t c = 0;
    for (; c + 16 <= w.cols; c += 16) _mm512_storeu_ps(out + c, row.load(c));
    if (c < w.cols) {
      const __mmask16 m = tailMask(w.cols - c);
      _mm512_mask_storeu_ps(out + c, m, row.load(c, m));
    }
  };
  switch (w.dtype) {
    case DType::kBF16: convert(RowBF16{}); break;
    case DType::kF32: convert(RowF32{}); break;
    case DType::kF16: convert(RowF16{}); break;
    case DType::kF8E4M3: convert(RowFP8{}); break;
    default:
      for (int64_t c = 0; c < w.cols; ++c) out[c] = w.value(r, c);
  }
}

void floatToBf16Row(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToBf16(in[i]);
}

void bf16ToFloatRow(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, RowBF16::widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = bf16ToFloat(in[i]);
}

}  // namespace lg::engine::cpu

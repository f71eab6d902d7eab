// AVX-512 helpers shared by the CPU kernels: weight row readers that convert
// stored dtypes to fp32 exactly, masks, a 16x16 transpose and a vector exp.
#pragma once

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 headers (the
// _mm512_undefined_* placeholders, GCC bug 105593); silence it for them only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

#include "engine/model/weight_view.h"

namespace lg::engine::cpu {

inline __mmask16 tailMask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

// Readers of one weight row: load(c) converts elements c .. c+15 of the row.
// Masked lanes read nothing and are zero.
struct RowF32 {
  const float* p = nullptr;
  void init(const WeightView& w, int64_t r) { p = reinterpret_cast<const float*>(w.at(r, 0)); }
  __m512 load(int64_t c) const { return _mm512_loadu_ps(p + c); }
  __m512 load(int64_t c, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, p + c); }
};

struct RowBF16 {
  const uint16_t* p = nullptr;
  void init(const WeightView& w, int64_t r) { p = reinterpret_cast<const uint16_t*>(w.at(r, 0)); }
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  __m512 load(int64_t c) const { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c))); }
  __m512 load(int64_t c, __mmask16 m) const { return widen(_mm256_maskz_loadu_epi16(m, p + c)); }
};

struct RowF16 {
  const uint16_t* p = nullptr;
  void init(const WeightView& w, int64_t r) { p = reinterpret_cast<const uint16_t*>(w.at(r, 0)); }
  __m512 load(int64_t c) const { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c))); }
  __m512 load(int64_t c, __mmask16 m) const { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + c)); }
};

// e4m3fn -> fp32: place the 7 magnitude bits under the fp32 exponent/mantissa
// (giving 2^(e-127) * 1.m, or a denormal for e == 0) and multiply by 2^120 to
// rebias 127 -> 7. Exact for every finite code; then x block scale (one fp32
// rounding, the same as dequantizing ahead of time).
struct RowFP8 {
  const uint8_t* p = nullptr;
  const float* scale_row = nullptr;
  int64_t col0 = 0;
  int block_cols = 128;
  bool aligned = true;  // every 16-column chunk lies in one scale block

  void init(const WeightView& w, int64_t r) {
    p = w.at(r, 0);
    scale_row = w.scales + ((w.row0 + r) / w.block_rows) * w.scale_ld;
    col0 = w.col0;
    block_cols = w.block_cols;
    aligned = (w.block_cols % 16 == 0) && (w.col0 % 16 == 0);
  }
  static __m512 widen(__m128i v) {
    const __m512i x = _mm512_cvtepu8_epi32(v);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)), 20);
    return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(sign, mag)), _mm512_set1_ps(0x1p120f));
  }
  __m512 scales(int64_t c) const {
    if (aligned) return _mm512_set1_ps(scale_row[(col0 + c) / block_cols]);
    alignas(64) float s[16];
    for (int i = 0; i < 16; ++i) s[i] = scale_row[(col0 + c + i) / block_cols];
    return _mm512_load_ps(s);
  }
  __m512 load(int64_t c) const {
    return _mm512_mul_ps(widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c))), scales(c));
  }
  __m512 load(int64_t c, __mmask16 m) const {
    // Scales past the row end are never read: masked lanes use the chunk's first.
    return _mm512_mul_ps(widen(_mm_maskz_loadu_epi8(m, p + c)), aligned ? scales(c) : maskedScales(c, m));
  }
  __m512 maskedScales(int64_t c, __mmask16 m) const {
    alignas(64) float s[16] = {};
    for (int i = 0; i < 16; ++i) {
      if (m & (1u << i)) s[i] = scale_row[(col0 + c + i) / block_cols];
    }
    return _mm512_load_ps(s);
  }
};

// Transposes 16 rows of 16 floats in registers: r[i][j] -> r[j][i].
__attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {  // rows 4g .. 4g+3
    const __m512d a = _mm512_castps_pd(t[4 * g]);
    const __m512d b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));  // column 4L+0 of rows 4g..4g+3
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512 v = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    const __m512 w = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    const __m512 w2 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
    r[i] = _mm512_shuffle_f32x4(v, v2, 0x88);
    r[4 + i] = _mm512_shuffle_f32x4(w, w2, 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(v, v2, 0xdd);
    r[12 + i] = _mm512_shuffle_f32x4(w, w2, 0xdd);
  }
}

// exp(x) for x <= 0 (softmax after subtracting the max), relative error about
// 2e-7: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, scale by 2^n.
inline __m512 expNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace lg::engine::cpu

// The register-blocked AVX-512 fp32 micro-kernel shared by the GEMMs and the
// attention kernel:
//
//   C[i, 0:n] (+)= sum_k A(i, k) * B[k, 0:n]    for i < MR, n <= 16 * NV
//
// A(i, k) = a[i * a_rs + k * a_cs] is broadcast one scalar at a time, so A may
// be row-major (a_cs = 1), column-major (a_rs = 1) or any strided view; B is
// row-major with NV * 16 readable floats per row (pad it); C is row-major and
// only its first n columns are written. MR * NV accumulators stay in
// registers (MR * NV <= 24 keeps the FMA pipes busy without spilling).
#pragma once

#include <cstdint>

#include "engine/cpu/simd.h"

namespace lg::engine::cpu {

// noinline: inlined into a large caller, GCC 12 spills the accumulators.
template <int MR, int NV>
__attribute__((noinline)) void microKernel(const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, int64_t kc, float* c,
                        int64_t ldc, int n, bool accumulate) {
  static_assert(MR >= 1 && NV >= 1 && NV <= 4 && MR * NV <= 32);
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
    const float* ak = a + k * a_cs;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ak[i * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  if (n == 16 * NV) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m512 out = acc[i][v];
        if (accumulate) out = _mm512_add_ps(out, _mm512_loadu_ps(ci + 16 * v));
        _mm512_storeu_ps(ci + 16 * v, out);
      }
    }
    return;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    for (int v = 0; v < NV && 16 * v < n; ++v) {
      const __mmask16 m = tailMask(n - 16 * v);
      __m512 out = acc[i][v];
      if (accumulate) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(m, ci + 16 * v));
      _mm512_mask_storeu_ps(ci + 16 * v, m, out);
    }
  }
}

// Runs microKernel over `rows` rows of A in blocks of the largest MR that
// keeps MR * NV <= 24 (NV = 4: 6 rows; NV = 1: 12 rows).
template <int NV>
inline void microKernelRows(int64_t rows, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
                            int64_t kc, float* c, int64_t ldc, int n, bool accumulate) {
  constexpr int kMr = NV == 1 ? 12 : NV == 2 ? 12 : NV == 3 ? 8 : 6;
  int64_t i = 0;
  for (; i + kMr <= rows; i += kMr) {
    microKernel<kMr, NV>(a + i * a_rs, a_rs, a_cs, b, ldb, kc, c + i * ldc, ldc, n, accumulate);
  }
  const float* ai = a + i * a_rs;
  float* ci = c + i * ldc;
  switch (rows - i) {
    case 0: break;
#define LG_MK_CASE(R) \
  case R:             \
    if constexpr (R < kMr) microKernel<R, NV>(ai, a_rs, a_cs, b, ldb, kc, ci, ldc, n, accumulate); \
    break;
    LG_MK_CASE(1) LG_MK_CASE(2) LG_MK_CASE(3) LG_MK_CASE(4) LG_MK_CASE(5) LG_MK_CASE(6)
    LG_MK_CASE(7) LG_MK_CASE(8) LG_MK_CASE(9) LG_MK_CASE(10) LG_MK_CASE(11)
#undef LG_MK_CASE
    default: break;
  }
}

// Dispatches on the number of 16-wide vectors needed for n columns (n <= 64).
inline void microKernelRowsN(int64_t rows, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
                             int64_t kc, float* c, int64_t ldc, int n, bool accumulate) {
  switch ((n + 15) / 16) {
    case 1: microKernelRows<1>(rows, a, a_rs, a_cs, b, ldb, kc, c, ldc, n, accumulate); break;
    case 2: microKernelRows<2>(rows, a, a_rs, a_cs, b, ldb, kc, c, ldc, n, accumulate); break;
    case 3: microKernelRows<3>(rows, a, a_rs, a_cs, b, ldb, kc, c, ldc, n, accumulate); break;
    default: microKernelRows<4>(rows, a, a_rs, a_cs, b, ldb, kc, c, ldc, n, accumulate); break;
  }
}

}  // namespace lg::engine::cpu

// One warp's dot product of a weight row (bf16 or FP8 with block scales) with
// an fp32 vector in shared memory: 16-byte loads of the row, lanes striding
// over it, a warp sum at the end. cols must be a multiple of 8 (bf16) or 16
// (FP8), and the row 16-byte aligned (the loaders guarantee both).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/device_matrix.h"
#include "kernels/kernel_common.cuh"

namespace lg::kernels {

__device__ __forceinline__ float fp8ToFloat(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return static_cast<float>(f);
}

// sum_j w[row, j] * x[j] over j < w.cols; every lane gets the result.
__device__ __forceinline__ float weightRowDot(const DeviceMatrix& w, int64_t row, const float* x) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  if (w.type == WeightType::kBf16) {
    const uint4* r = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(w.data) + row * w.ld);
    for (int64_t v = lane; v < w.cols / 8; v += 32) {
      const uint4 q = r[v];
      const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&q);
      const float* xv = x + v * 8;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc += __bfloat162float(e[i]) * xv[i];
    }
  } else {
    const uint4* r = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + row * w.ld);
    const float* scale_row = w.scales + (row / w.block_rows) * w.scale_ld;
    for (int64_t v = lane; v < w.cols / 16; v += 32) {
      const uint4 q = r[v];
      const uint8_t* e = reinterpret_cast<const uint8_t*>(&q);
      const float* xv = x + v * 16;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) part += fp8ToFloat(e[i]) * xv[i];
      acc += part * scale_row[(v * 16) / w.block_cols];  // 16 values never straddle a 128-wide block
    }
  }
  return warpSum(acc);
}

}  // namespace lg::kernels

// RMSNorm over rows: y = weight * (x * rsqrt(mean(x^2) + eps)), in fp32, the
// multiplication order transformers uses. Input fp32 (the residual stream, a
// projection's output); outputs bf16 (the next GEMM's input) and/or fp32.
//
//   x      [rows, cols] fp32, row stride x_stride
//   weight [cols] fp32
//   y_bf16 [rows, cols] bf16, row stride y_stride (null: not written)
//   y_f32  [rows, cols] fp32, row stride y_stride (null: not written; may be x)
//   row_index [rows] int32: output row r normalizes input row row_index[r] (null: r)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct RmsNormParams {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const float* weight = nullptr;
  __nv_bfloat16* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  const int32_t* row_index = nullptr;
  int32_t rows = 0;
  int32_t cols = 0;
  float eps = 1e-6f;
};

cudaError_t launchRmsNorm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace lg::kernels

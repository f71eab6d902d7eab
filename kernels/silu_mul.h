// The MLP's activation: out = silu(gate) * up, fp32 in, bf16 out (the down
// projection's input). gate and up are the two halves of one GEMM output row.
//
//   gate_up [rows, 2 * width] fp32: [gate | up]
//   out     [rows, width] bf16
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct SiluMulParams {
  const float* gate_up = nullptr;
  __nv_bfloat16* out = nullptr;
  int64_t rows = 0;
  int32_t width = 0;
};

cudaError_t launchSiluMul(const SiluMulParams& p, cudaStream_t stream);

}  // namespace lg::kernels

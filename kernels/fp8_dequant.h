// FP8 E4M3 weights with 128 x 128 block scales to bf16, on the fly before a
// cuBLAS GEMM (which takes no block-scaled FP8): out[r, c] = w[r, c] x
// scale[r / block_rows, c / block_cols]. The decode path reads FP8 natively
// instead (moe_gemv.h, weight_dot.cuh).
//
//   w   DeviceMatrix of type kFp8E4M3 [rows, cols]
//   out [rows, cols] bf16, row stride ld_out
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_matrix.h"

namespace lg::kernels {

struct Fp8DequantParams {
  DeviceMatrix w;
  __nv_bfloat16* out = nullptr;
  int64_t ld_out = 0;
};

cudaError_t launchFp8Dequant(const Fp8DequantParams& p, cudaStream_t stream);

}  // namespace lg::kernels

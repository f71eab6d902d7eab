#include "kernels/fp8_dequant.h"

#include <algorithm>

#include "kernels/weight_dot.cuh"

namespace lg::kernels {
namespace {

__global__ void fp8DequantKernel(Fp8DequantParams p) {
  const int64_t n = p.w.rows * p.w.cols;
  const uint8_t* w = static_cast<const uint8_t*>(p.w.data);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.w.cols, c = i % p.w.cols;
    const float scale = p.w.scales[(r / p.w.block_rows) * p.w.scale_ld + c / p.w.block_cols];
    p.out[r * p.ld_out + c] = __float2bfloat16_rn(fp8ToFloat(w[r * p.w.ld + c]) * scale);
  }
}

}  // namespace

cudaError_t launchFp8Dequant(const Fp8DequantParams& p, cudaStream_t stream) {
  const int64_t n = p.w.rows * p.w.cols;
  if (n <= 0) return cudaSuccess;
  if (p.w.type != WeightType::kFp8E4M3 || p.w.scales == nullptr) return cudaErrorInvalidValue;
  fp8DequantKernel<<<static_cast<unsigned>(std::min<int64_t>(ceilDiv(n, 256), 65535)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

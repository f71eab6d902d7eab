#include "kernels/silu_mul.h"

#include <algorithm>

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

__global__ void siluMulKernel(SiluMulParams p) {
  const int64_t n = p.rows * p.width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.width, c = i % p.width;
    const float g = p.gate_up[r * 2 * p.width + c];
    const float u = p.gate_up[r * 2 * p.width + p.width + c];
    // silu(g) = g * sigmoid(g), with exp of a non-positive argument only.
    const float e = __expf(-fabsf(g));
    const float sig = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    p.out[i] = __float2bfloat16_rn(g * sig * u);
  }
}

}  // namespace

cudaError_t launchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * p.width;
  if (n <= 0) return cudaSuccess;
  siluMulKernel<<<static_cast<unsigned>(std::min<int64_t>(ceilDiv(n, 256), 65535)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

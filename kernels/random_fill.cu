#include "kernels/random_fill.h"

#include <algorithm>

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

// SplitMix64 of (seed, index): a well-mixed 64-bit value per element.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void randomFillKernel(RandomFillParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < p.count; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t r = mix(p.seed * 0x632be59bd9b4e019ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 bits: [-1, 1)
    const float v = u * p.scale + p.offset;
    if (p.bf16) {
      static_cast<__nv_bfloat16*>(p.data)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(p.data)[i] = v;
    }
  }
}

}  // namespace

cudaError_t launchRandomFill(const RandomFillParams& p, cudaStream_t stream) {
  if (p.count <= 0) return cudaSuccess;
  randomFillKernel<<<static_cast<unsigned>(std::min<int64_t>(ceilDiv(p.count, 256), 1 << 16)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

#include "kernels/sampling.h"

#include <curand_kernel.h>

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kThreads = 512;

// (value, id) pairs reduced by value, ties to the lower id.
__device__ __forceinline__ void better(float& v, int& id, float ov, int oid) {
  if (ov > v || (ov == v && oid < id)) {
    v = ov;
    id = oid;
  }
}

__global__ void __launch_bounds__(kThreads) samplingKernel(SamplingParams p) {
  __shared__ float best_v[kThreads / 32];
  __shared__ int best_id[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float* logits = p.logits + row * p.ld;
  const float t = p.temperature ? p.temperature[row] : 0.0f;
  curandStatePhilox4_32_10_t rng;
  if (t > 0.0f) curand_init(p.seed[row], static_cast<unsigned long long>(threadIdx.x), 0, &rng);
  float v = -INFINITY;
  int id = 0x7fffffff;
  for (int j = threadIdx.x; j < p.vocab; j += kThreads) {
    float s = logits[j];
    if (t > 0.0f) {
      const float u = fmaxf(curand_uniform(&rng), 1e-20f);  // (0, 1]
      s = s / t - logf(-logf(u) + 1e-30f);
    }
    better(v, id, s, j);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    better(v, id, __shfl_xor_sync(0xffffffffu, v, offset), __shfl_xor_sync(0xffffffffu, id, offset));
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    best_v[warp] = v;
    best_id[warp] = id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) better(v, id, best_v[w], best_id[w]);
    p.out[row] = id;
  }
}

}  // namespace

cudaError_t launchSampling(const SamplingParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.vocab <= 0 || (p.temperature != nullptr && p.seed == nullptr)) return cudaErrorInvalidValue;
  samplingKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

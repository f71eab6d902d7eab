#include "kernels/latent_store.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void latentStoreKernel(LatentStoreParams p) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float* row = p.kv_a + t * p.kv_a_stride;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < p.kv_lora; i += kThreads) sum += row[i] * row[i];
  const float inv = rsqrtf(blockSum(sum, scratch) / static_cast<float>(p.kv_lora) + p.eps);
  T* dst = static_cast<T*>(p.pool) + static_cast<int64_t>(p.write_block[t]) * p.block_values +
           (static_cast<int64_t>(p.layer) * p.block_tokens + p.write_slot[t]) * p.latent_dim;
  for (int i = threadIdx.x; i < p.kv_lora; i += kThreads) dst[i] = fromFloat<T>(p.norm_weight[i] * (row[i] * inv));
  const float* pe = row + p.kv_lora;
  for (int i = threadIdx.x; i < p.half; i += kThreads) {
    const float a = pe[2 * i], b = pe[2 * i + 1];
    const float c = p.cos[t * p.half + i], s = p.sin[t * p.half + i];
    dst[p.kv_lora + 2 * i] = fromFloat<T>(a * c - b * s);
    dst[p.kv_lora + 2 * i + 1] = fromFloat<T>(a * s + b * c);
  }
}

}  // namespace

cudaError_t launchLatentStore(const LatentStoreParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return cudaSuccess;
  if (p.pool_bf16) {
    latentStoreKernel<__nv_bfloat16><<<p.tokens, kThreads, 0, stream>>>(p);
  } else {
    latentStoreKernel<float><<<p.tokens, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace lg::kernels

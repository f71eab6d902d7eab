#include "kernels/moe_dispatch.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kSortThreads = 1024;

// One block: counts per expert, the exclusive scan, then a stable scatter
// (each thread places its assignments in index order within its chunk, and
// chunks in thread order, via per-thread prefix counts).
__global__ void __launch_bounds__(kSortThreads) moeSortKernel(MoeSortParams p) {
  extern __shared__ int32_t counts[];  // [num_experts]
  for (int e = threadIdx.x; e < p.num_experts; e += kSortThreads) counts[e] = 0;
  __syncthreads();
  for (int a = threadIdx.x; a < p.assignments; a += kSortThreads) atomicAdd(&counts[p.experts[a]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t sum = 0;
    for (int e = 0; e < p.num_experts; ++e) {
      p.counts[e] = counts[e];
      p.offsets[e] = sum;
      sum += counts[e];
    }
    p.offsets[p.num_experts] = sum;
  }
  __syncthreads();
  // Stable placement: one pass per expert over the assignments would be
  // n * assignments; instead thread 0 walks them once (assignments are at
  // most a few tens of thousands: prefill chunks).
  if (threadIdx.x == 0) {
    for (int e = 0; e < p.num_experts; ++e) counts[e] = p.offsets[e];
    for (int a = 0; a < p.assignments; ++a) {
      const int32_t row = counts[p.experts[a]]++;
      p.order[row] = a;
      p.row_of[a] = row;
    }
  }
}

__global__ void moeGatherKernel(MoeGatherParams p) {
  const int64_t r = blockIdx.x;
  const int64_t token = p.order[r] / p.k;
  const uint4* src = reinterpret_cast<const uint4*>(p.h + token * p.hidden);
  uint4* dst = reinterpret_cast<uint4*>(p.gathered + r * p.hidden);
  for (int i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) dst[i] = src[i];
}

__global__ void moeCombineKernel(MoeCombineParams p) {
  const int64_t t = blockIdx.x;
  float* x = p.x + t * p.hidden;
  for (int j = threadIdx.x; j < p.hidden; j += blockDim.x) {
    float acc = x[j];
    for (int i = 0; i < p.k; ++i) {
      const int64_t a = t * p.k + i;
      const int64_t row = p.row_of ? p.row_of[a] : a;
      acc += p.weights[a] * p.expert_out[row * p.hidden + j];
    }
    x[j] = acc;
  }
}

}  // namespace

cudaError_t launchMoeSort(const MoeSortParams& p, cudaStream_t stream) {
  if (p.num_experts <= 0 || p.num_experts > 1024) return cudaErrorInvalidValue;
  moeSortKernel<<<1, kSortThreads, sizeof(int32_t) * p.num_experts, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launchMoeGather(const MoeGatherParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.hidden % 8 != 0) return cudaErrorInvalidValue;
  moeGatherKernel<<<static_cast<unsigned>(p.rows), 128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return cudaSuccess;
  moeCombineKernel<<<static_cast<unsigned>(p.tokens), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

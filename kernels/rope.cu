#include "kernels/rope.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kThreads = 128;

// One block per (token, head).
__global__ void ropeQueryKernel(RopeQueryParams p) {
  const int64_t row = blockIdx.x;  // token * heads + head
  const int64_t t = row / p.heads;
  const __nv_bfloat16* src = p.src + row * p.src_head_stride + p.src_offset;
  float* dst = p.dst + row * p.dst_head_stride;
  // The GEMM's part first: scaled in place. Rope elements are written whole below.
  for (int i = threadIdx.x; i < p.dst_width; i += kThreads) {
    if (i < p.dst_offset || i >= p.dst_offset + 2 * p.half) dst[i] *= p.scale;
  }
  for (int i = threadIdx.x; i < p.half; i += kThreads) {
    const float a = __bfloat162float(src[2 * i]);
    const float b = __bfloat162float(src[2 * i + 1]);
    const float c = p.cos[t * p.half + i];
    const float s = p.sin[t * p.half + i];
    dst[p.dst_offset + 2 * i] = (a * c - b * s) * p.scale;
    dst[p.dst_offset + 2 * i + 1] = (a * s + b * c) * p.scale;
  }
  if (p.dst_bf16 == nullptr) return;
  __syncthreads();
  __nv_bfloat16* out = p.dst_bf16 + row * p.dst_head_stride;
  for (int i = threadIdx.x; i < p.dst_width; i += kThreads) out[i] = __float2bfloat16_rn(dst[i]);
}

}  // namespace

cudaError_t launchRopeQuery(const RopeQueryParams& p, cudaStream_t stream) {
  const int64_t rows = int64_t{p.tokens} * p.heads;
  if (rows <= 0) return cudaSuccess;
  ropeQueryKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

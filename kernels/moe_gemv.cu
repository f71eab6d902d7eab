#include "kernels/moe_gemv.h"

#include "kernels/weight_dot.cuh"

namespace lg::kernels {
namespace {

constexpr int kThreads = 256;  // 8 warps, one output row each at a time
constexpr int kRowsPerCta = 64;

// Grid (ceil(inter / 64), tokens * k): act[a, r] = silu(gate[r] . h) * (up[r] . h).
__global__ void __launch_bounds__(kThreads) gateUpKernel(MoeGemvParams p) {
  extern __shared__ float x[];  // [hidden]
  const int64_t a = blockIdx.y;
  const ExpertMlp& e = p.table[p.experts[a]];
  const __nv_bfloat16* h = p.h + (a / p.k) * p.hidden;
  for (int j = threadIdx.x; j < p.hidden; j += kThreads) x[j] = __bfloat162float(h[j]);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r_end = min(static_cast<int64_t>(p.inter), (blockIdx.x + 1) * int64_t{kRowsPerCta});
  for (int64_t r = blockIdx.x * int64_t{kRowsPerCta} + warp; r < r_end; r += kThreads / 32) {
    const float g = weightRowDot(e.gate, r, x);
    const float u = weightRowDot(e.up, r, x);
    // silu(g) = g * sigmoid(g), with exp of a non-positive argument only.
    const float en = __expf(-fabsf(g));
    const float sig = g >= 0.0f ? 1.0f / (1.0f + en) : en / (1.0f + en);
    if (lane == 0) p.act[a * p.inter + r] = g * sig * u;
  }
}

// Grid (ceil(hidden / 64), tokens * k): expert_out[a, r] = down[r] . act[a].
__global__ void __launch_bounds__(kThreads) downKernel(MoeGemvParams p) {
  extern __shared__ float x[];  // [inter]
  const int64_t a = blockIdx.y;
  const ExpertMlp& e = p.table[p.experts[a]];
  for (int j = threadIdx.x; j < p.inter; j += kThreads) x[j] = p.act[a * p.inter + j];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r_end = min(static_cast<int64_t>(p.hidden), (blockIdx.x + 1) * int64_t{kRowsPerCta});
  for (int64_t r = blockIdx.x * int64_t{kRowsPerCta} + warp; r < r_end; r += kThreads / 32) {
    const float d = weightRowDot(e.down, r, x);
    if (lane == 0) p.expert_out[a * p.hidden + r] = d;
  }
}

}  // namespace

cudaError_t launchMoeGemv(const MoeGemvParams& p, cudaStream_t stream) {
  const int64_t assignments = int64_t{p.tokens} * p.k;
  if (assignments <= 0) return cudaSuccess;
  if (p.hidden % 16 != 0 || p.inter % 16 != 0 || assignments > 65535) return cudaErrorInvalidValue;
  gateUpKernel<<<dim3(ceilDiv(p.inter, kRowsPerCta), static_cast<unsigned>(assignments)), kThreads,
                 sizeof(float) * p.hidden, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  downKernel<<<dim3(ceilDiv(p.hidden, kRowsPerCta), static_cast<unsigned>(assignments)), kThreads,
               sizeof(float) * p.inter, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

#include "kernels/rms_norm.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kThreads = 256;

// One block per row.
__global__ void rmsNormKernel(RmsNormParams p) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + (p.row_index ? p.row_index[row] : row) * p.x_stride;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < p.cols; i += kThreads) sum += x[i] * x[i];
  const float inv = rsqrtf(blockSum(sum, scratch) / static_cast<float>(p.cols) + p.eps);
  for (int i = threadIdx.x; i < p.cols; i += kThreads) {
    const float y = p.weight[i] * (x[i] * inv);
    if (p.y_bf16) p.y_bf16[row * p.y_stride + i] = __float2bfloat16_rn(y);
    if (p.y_f32) p.y_f32[row * p.y_stride + i] = y;
  }
}

}  // namespace

cudaError_t launchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  rmsNormKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

#include "kernels/embedding.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

__global__ void embeddingKernel(EmbeddingParams p) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = p.table + static_cast<int64_t>(p.ids[t]) * p.hidden;
  for (int j = threadIdx.x; j < p.hidden; j += blockDim.x) p.x[t * p.hidden + j] = __bfloat162float(row[j]);
}

}  // namespace

cudaError_t launchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return cudaSuccess;
  embeddingKernel<<<static_cast<unsigned>(p.tokens), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

// The token embeddings: x[t] = embedding[ids[t]] as fp32 (the residual
// stream), from a bf16 table.
//
//   table [vocab, hidden] bf16;  ids [tokens] int32 (validated by the planner);  x [tokens, hidden] fp32
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct EmbeddingParams {
  const __nv_bfloat16* table = nullptr;
  const int32_t* ids = nullptr;
  float* x = nullptr;
  int32_t tokens = 0;
  int32_t hidden = 0;
};

cudaError_t launchEmbedding(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace lg::kernels

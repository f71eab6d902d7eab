// The routed experts of a small batch (decode steps) without leaving the
// device: every (token, slot) assignment multiplies its token's hidden row by
// its own expert's matrices, read straight from the expert table (bf16, or
// FP8 with its block scales, used natively), so the host never needs the
// routing. Memory-bound GEMVs: each warp computes output rows with 16-byte
// loads of the weights.
//
//   h          [tokens, hidden] bf16
//   experts    [tokens, k] int32 (moe_routing.h)
//   table      [num_experts] ExpertMlp, in device memory
//   act        [tokens * k, inter] fp32 scratch: silu(gate x) * up x
//   expert_out [tokens * k, hidden] fp32: down act, in assignment order
//              (launchMoeCombine with row_of null adds them into x)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_matrix.h"

namespace lg::kernels {

struct MoeGemvParams {
  const __nv_bfloat16* h = nullptr;
  const int32_t* experts = nullptr;
  const ExpertMlp* table = nullptr;
  float* act = nullptr;
  float* expert_out = nullptr;
  int32_t tokens = 0;
  int32_t k = 0;
  int32_t hidden = 0;
  int32_t inter = 0;
};

cudaError_t launchMoeGemv(const MoeGemvParams& p, cudaStream_t stream);

}  // namespace lg::kernels

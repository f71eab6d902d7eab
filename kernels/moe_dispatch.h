// MoE dispatch for batched expert GEMMs: the (token, slot) assignments of a
// routing grouped by expert (a counting sort), the hidden rows gathered in
// that order, and the experts' outputs combined back per token.
//
//   experts [tokens, k] int32 (moe_routing.h)
//   counts  [num_experts] int32, offsets [num_experts + 1] int32 (exclusive scan)
//   order   [tokens * k] int32: the assignment (t * k + slot) at each sorted row
//   row_of  [tokens * k] int32: the inverse (the sorted row of each assignment)
//
// The counts are what the host needs to size the per-expert GEMMs (one copy
// per MoE layer; decode batches skip this path: moe_gemv.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct MoeSortParams {
  const int32_t* experts = nullptr;
  int32_t assignments = 0;  // tokens * k
  int32_t num_experts = 0;
  int32_t* counts = nullptr;
  int32_t* offsets = nullptr;
  int32_t* order = nullptr;
  int32_t* row_of = nullptr;
};
// Deterministic: within an expert, assignments stay in their original order.
cudaError_t launchMoeSort(const MoeSortParams& p, cudaStream_t stream);

struct MoeGatherParams {
  const __nv_bfloat16* h = nullptr;  // [tokens, hidden]
  const int32_t* order = nullptr;
  __nv_bfloat16* gathered = nullptr;  // [tokens * k, hidden]
  int32_t rows = 0;                   // tokens * k
  int32_t k = 0;
  int32_t hidden = 0;
};
cudaError_t launchMoeGather(const MoeGatherParams& p, cudaStream_t stream);

// x[t] += sum_i weights[t, i] * expert_out[row_of[t * k + i]], slots in
// order; row_of null: expert_out is in assignment order (moe_gemv.h).
struct MoeCombineParams {
  const float* expert_out = nullptr;  // [tokens * k, hidden] fp32
  const int32_t* row_of = nullptr;
  const float* weights = nullptr;     // [tokens, k]
  float* x = nullptr;                 // [tokens, hidden] the residual stream
  int32_t tokens = 0;
  int32_t k = 0;
  int32_t hidden = 0;
};
cudaError_t launchMoeCombine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace lg::kernels

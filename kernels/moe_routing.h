// MoE routing: each token's top-k experts and their weights from the router
// logits, as DeepSeek V2 and V3 route (the CPU reference is
// engine/cpu/moe.cc routeToken; the same rules, in fp32):
//
//   scores  softmax (V2) or sigmoid (V3) of the logits
//   choice  scores + e_score_correction_bias (noaux_tc only; selection only)
//   groups  greedy: none; group_limited_greedy: a group's score is its max
//           choice; noaux_tc: the sum of its two largest; the topk_group best
//           groups are kept, the others' experts masked out
//   top-k   over the kept choices (ties: the lower expert index)
//   weights the unbiased scores of the chosen experts, renormalized when
//           norm_topk_prob (V3, or V2 with k > 1), times routed_scaling_factor
//           (V3 always; V2 when not renormalized)
//
//   logits  [tokens, experts] fp32;  bias [experts] fp32 or null
//   experts [tokens, k] int32;       weights [tokens, k] fp32
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };
enum class MoeTopk : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeRoutingParams {
  const float* logits = nullptr;
  const float* bias = nullptr;
  int32_t* experts = nullptr;
  float* weights = nullptr;
  int32_t tokens = 0;
  int32_t num_experts = 0;  // at most 256
  int32_t k = 0;            // at most 16
  int32_t n_group = 1;
  int32_t topk_group = 1;
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk method = MoeTopk::kGreedy;
  bool renormalize = false;  // the resolved rule above
  bool scale = true;         // multiply by routed_scaling_factor
  float routed_scaling_factor = 1.0f;
};

cudaError_t launchMoeRouting(const MoeRoutingParams& p, cudaStream_t stream);

}  // namespace lg::kernels

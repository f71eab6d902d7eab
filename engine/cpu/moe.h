// DeepSeekMoE feed-forward on the CPU: router, the three routing methods, the
// routed experts (only the selected experts' weights are read) and the shared
// experts; and the dense MLP of the first layers.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/host_buffer.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/model.h"

namespace lg::engine::cpu {

// Selects top_k experts for one token from its router logits (fp32).
// Semantics of DeepSeek's reference code:
//  - scores: softmax over experts, or sigmoid per expert;
//  - noaux_tc adds e_score_correction_bias for selection only; a group's
//    score is the sum of its top-2 biased scores (group_limited_greedy: the
//    group's max); the topk_group best groups are kept, others masked to -inf;
//  - top_k over the (biased, masked) scores; weights are the unbiased scores;
//  - deepseek_v3: renormalize when norm_topk_prob, then x routed_scaling_factor;
//    deepseek_v2: renormalize when norm_topk_prob and top_k > 1, otherwise
//    x routed_scaling_factor (the V2 reference's rule; official V2 configs do
//    not renormalize, so both rules agree there).
// Ties go to the lower expert or group index.
void routeToken(const ModelConfig& config, const float* logits, const float* bias, int32_t* experts, float* weights);

// Scratch buffers reused across layers and steps.
struct FeedForwardScratch {
  std::vector<float> router_logits;
  std::vector<int32_t> experts;
  std::vector<float> weights;
  std::vector<int32_t> order;  // assignment index for each gathered row
  HostBuffer<float> gathered;  // routed inputs grouped by expert
  HostBuffer<float> gate_up;
  HostBuffer<float> down;
  HostBuffer<float> shared_gate_up;
};

// x[t] += FFN(h[t]) for t < tokens: a dense MLP or the MoE of `layer`.
// Returns how many distinct routed experts the tokens were sent to (0 for a
// dense MLP): only their weights are read.
int32_t feedForward(ThreadPool& pool, const ModelConfig& config, const LayerWeights& layer, const float* h,
                 int64_t tokens, float* x, FeedForwardScratch& scratch, LinearStats* stats = nullptr);

}  // namespace lg::engine::cpu

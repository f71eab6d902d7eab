#include "kernels/moe_routing.h"

#include "kernels/kernel_common.cuh"

namespace lg::kernels {
namespace {

constexpr int kMaxExperts = 256;
constexpr int kMaxGroups = 64;
constexpr int kThreads = 64;  // tokens per block: one thread each

// Whether value a at index ia ranks before b at ib (ties: lower index first).
__device__ __forceinline__ bool ranksBefore(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// One thread routes one token (the work is n * k per token); its scores
// live in thread-local memory.
__global__ void __launch_bounds__(kThreads) moeRoutingKernel(MoeRoutingParams p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= p.tokens) return;
  float scores[kMaxExperts];
  float choice[kMaxExperts];
  const int n = p.num_experts;
  const float* logits = p.logits + t * n;
  if (p.scoring == MoeScoring::kSoftmax) {
    float mx = -INFINITY;
    for (int e = 0; e < n; ++e) mx = fmaxf(mx, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < n; ++e) {
      scores[e] = expf(logits[e] - mx);
      sum += scores[e];
    }
    for (int e = 0; e < n; ++e) scores[e] /= sum;
  } else {
    for (int e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
  }
  const bool noaux = p.method == MoeTopk::kNoauxTc;
  for (int e = 0; e < n; ++e) choice[e] = scores[e] + (noaux && p.bias ? p.bias[e] : 0.0f);
  if (p.method != MoeTopk::kGreedy && p.n_group > 1) {
    const int per_group = n / p.n_group;
    float group_score[kMaxGroups];
    for (int g = 0; g < p.n_group; ++g) {
      const float* v = choice + g * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int i = 0; i < per_group; ++i) {
        if (v[i] > best) {
          second = best;
          best = v[i];
        } else if (v[i] > second) {
          second = v[i];
        }
      }
      group_score[g] = noaux ? (per_group >= 2 ? best + second : best) : best;
    }
    // Keep the topk_group best groups: a group is dropped when at least
    // topk_group others rank before it.
    for (int g = 0; g < p.n_group; ++g) {
      int before = 0;
      for (int o = 0; o < p.n_group; ++o) before += ranksBefore(group_score[o], o, group_score[g], g) ? 1 : 0;
      if (before < p.topk_group) continue;
      for (int i = 0; i < per_group; ++i) choice[g * per_group + i] = -INFINITY;
    }
  }
  // Top-k by selection: k passes, each the best expert not taken yet, by
  // (choice descending, index ascending), as a partial sort ranks them.
  uint32_t taken[kMaxExperts / 32] = {};
  int32_t* experts = p.experts + t * p.k;
  float* weights = p.weights + t * p.k;
  float total = 0.0f;
  for (int i = 0; i < p.k; ++i) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      if (taken[e / 32] & (1u << (e % 32))) continue;
      if (best < 0 || ranksBefore(choice[e], e, choice[best], best)) best = e;
    }
    taken[best / 32] |= 1u << (best % 32);
    experts[i] = best;
    weights[i] = scores[best];
    total += scores[best];
  }
  for (int i = 0; i < p.k; ++i) {
    if (p.renormalize) weights[i] /= total + 1e-20f;
    if (p.scale) weights[i] *= p.routed_scaling_factor;
  }
}

}  // namespace

cudaError_t launchMoeRouting(const MoeRoutingParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return cudaSuccess;
  if (p.num_experts <= 0 || p.num_experts > kMaxExperts || p.k <= 0 || p.k > p.num_experts || p.n_group <= 0 ||
      p.n_group > kMaxGroups || p.num_experts % p.n_group != 0 || p.topk_group <= 0) {
    return cudaErrorInvalidValue;
  }
  moeRoutingKernel<<<ceilDiv(p.tokens, kThreads), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lg::kernels

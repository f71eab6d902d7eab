#include "engine/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/linear.h"
#include "engine/cpu/ops.h"

namespace lg::engine::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Indices of the k largest values (ties: lower index first), in descending order.
void topK(const float* values, int n, int k, int32_t* out) {
  thread_local std::vector<int32_t> idx;
  idx.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  std::copy_n(idx.begin(), k, out);
}

// Runs one MLP (gate/up/down) over `rows` inputs into y (accumulating).
void mlpProblems(const MlpWeights& w, const float* x, int64_t rows, int64_t ldx, float* gate_up, int64_t inter,
                 std::vector<LinearProblem>& first, std::vector<LinearProblem>& second, float* y, int64_t ldy,
                 bool accumulate) {
  first.push_back({x, rows, ldx, w.gate, WeightLayout::kOutIn, gate_up, 2 * inter, false});
  first.push_back({x, rows, ldx, w.up, WeightLayout::kOutIn, gate_up + inter, 2 * inter, false});
  second.push_back({gate_up, rows, 2 * inter, w.down, WeightLayout::kOutIn, y, ldy, accumulate});
}

}  // namespace

void routeToken(const ModelConfig& c, const float* logits, const float* bias, int32_t* experts, float* weights) {
  const int n = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  thread_local std::vector<float> scores, choice;
  scores.resize(static_cast<size_t>(n));
  choice.resize(static_cast<size_t>(n));
  if (c.scoring_func == ScoringFunc::kSoftmax) {
    float mx = kNegInf;
    for (int e = 0; e < n; ++e) mx = std::max(mx, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < n; ++e) {
      scores[static_cast<size_t>(e)] = std::exp(logits[e] - mx);
      sum += scores[static_cast<size_t>(e)];
    }
    for (int e = 0; e < n; ++e) scores[static_cast<size_t>(e)] /= sum;
  } else {
    for (int e = 0; e < n; ++e) scores[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  const bool noaux = c.topk_method == TopkMethod::kNoauxTc;
  for (int e = 0; e < n; ++e) {
    choice[static_cast<size_t>(e)] = scores[static_cast<size_t>(e)] + (noaux && bias ? bias[e] : 0.0f);
  }
  if (c.topk_method != TopkMethod::kGreedy && c.n_group > 1) {
    const int per_group = n / c.n_group;
    thread_local std::vector<float> group_score;
    thread_local std::vector<int32_t> kept;
    group_score.assign(static_cast<size_t>(c.n_group), 0.0f);
    for (int g = 0; g < c.n_group; ++g) {
      const float* v = choice.data() + g * per_group;
      if (noaux) {
        float best = kNegInf, second = kNegInf;
        for (int i = 0; i < per_group; ++i) {
          if (v[i] > best) {
            second = best;
            best = v[i];
          } else if (v[i] > second) {
            second = v[i];
          }
        }
        group_score[static_cast<size_t>(g)] = per_group >= 2 ? best + second : best;
      } else {
        group_score[static_cast<size_t>(g)] = *std::max_element(v, v + per_group);
      }
    }
    kept.resize(static_cast<size_t>(c.topk_group));
    topK(group_score.data(), c.n_group, c.topk_group, kept.data());
    for (int g = 0; g < c.n_group; ++g) {
      if (std::find(kept.begin(), kept.end(), g) != kept.end()) continue;
      std::fill_n(choice.begin() + g * per_group, per_group, kNegInf);
    }
  }
  topK(choice.data(), n, k, experts);
  float total = 0.0f;
  for (int i = 0; i < k; ++i) {
    weights[i] = scores[static_cast<size_t>(experts[i])];
    total += weights[i];
  }
  if (c.renormalizesTopkWeights()) {
    for (int i = 0; i < k; ++i) weights[i] /= total + 1e-20f;
  }
  if (c.scalesRoutedWeights()) {
    for (int i = 0; i < k; ++i) weights[i] *= static_cast<float>(c.routed_scaling_factor);
  }
}

int32_t feedForward(ThreadPool& pool, const ModelConfig& c, const LayerWeights& layer, const float* h, int64_t tokens,
                 float* x, FeedForwardScratch& s, LinearStats* stats) {
  const int64_t hidden = c.hidden_size;
  std::vector<LinearProblem> first, second;
  if (!layer.moe) {
    const int64_t inter = c.intermediate_size;
    float* gate_up = s.gate_up.ensure(static_cast<size_t>(tokens * 2 * inter));
    mlpProblems(layer.mlp, h, tokens, hidden, gate_up, inter, first, second, x, hidden, true);
    runLinear(pool, first, stats);
    siluMulRows(pool, gate_up, 2 * inter, gate_up + inter, 2 * inter, tokens, inter);
    runLinear(pool, second, stats);
    return 0;
  }
  const int n = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  const int64_t inter = c.moe_intermediate_size;
  // Router logits in fp32 from the fp32 hidden state, as the reference does.
  s.router_logits.resize(static_cast<size_t>(tokens * n));
  LinearProblem router{h, tokens, hidden, layer.router, WeightLayout::kOutIn, s.router_logits.data(), n, false};
  runLinear(pool, std::span<const LinearProblem>(&router, 1), stats);
  s.experts.resize(static_cast<size_t>(tokens * k));
  s.weights.resize(static_cast<size_t>(tokens * k));
  const float* bias = layer.router_bias.empty() ? nullptr : layer.router_bias.data();
  for (int64_t t = 0; t < tokens; ++t) {
    routeToken(c, s.router_logits.data() + t * n, bias, s.experts.data() + t * k, s.weights.data() + t * k);
  }
  // Group the (token, slot) assignments by expert: counting sort.
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int64_t a = 0; a < tokens * k; ++a) ++offset[static_cast<size_t>(s.experts[static_cast<size_t>(a)]) + 1];
  for (int e = 0; e < n; ++e) offset[static_cast<size_t>(e) + 1] += offset[static_cast<size_t>(e)];
  s.order.resize(static_cast<size_t>(tokens * k));
  {
    std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
    for (int64_t a = 0; a < tokens * k; ++a) {
      s.order[static_cast<size_t>(fill[static_cast<size_t>(s.experts[static_cast<size_t>(a)])]++)] = static_cast<int32_t>(a);
    }
  }
  const int64_t rows = tokens * k;
  float* gathered = s.gathered.ensure(static_cast<size_t>(rows * hidden));
  auto gather = [&](int64_t r) {
    const int64_t token = s.order[static_cast<size_t>(r)] / k;
    std::copy_n(h + token * hidden, hidden, gathered + r * hidden);
  };
  if (rows < 64) {
    for (int64_t r = 0; r < rows; ++r) gather(r);
  } else {
    pool.parallelFor((rows + 31) / 32, [&](int64_t t, int) {
      for (int64_t r = t * 32; r < std::min(rows, (t + 1) * 32); ++r) gather(r);
    });
  }
  float* gate_up = s.gate_up.ensure(static_cast<size_t>(rows * 2 * inter));
  float* down = s.down.ensure(static_cast<size_t>(rows * hidden));
  int32_t touched = 0;
  for (int e = 0; e < n; ++e) {
    const int64_t r0 = offset[static_cast<size_t>(e)];
    const int64_t count = offset[static_cast<size_t>(e) + 1] - r0;
    if (count == 0) continue;
    ++touched;
    mlpProblems(layer.experts[static_cast<size_t>(e)], gathered + r0 * hidden, count, hidden, gate_up + r0 * 2 * inter,
                inter, first, second, down + r0 * hidden, hidden, false);
  }
  int64_t shared_inter = 0;
  if (layer.has_shared) {
    shared_inter = int64_t{c.n_shared_experts} * inter;
    float* shared_gate_up = s.shared_gate_up.ensure(static_cast<size_t>(tokens * 2 * shared_inter));
    // The shared expert's output goes straight into the residual stream.
    mlpProblems(layer.shared, h, tokens, hidden, shared_gate_up, shared_inter, first, second, x, hidden, true);
  }
  runLinear(pool, first, stats);
  siluMulRows(pool, gate_up, 2 * inter, gate_up + inter, 2 * inter, rows, inter);
  if (layer.has_shared) {
    float* shared_gate_up = s.shared_gate_up.data();
    siluMulRows(pool, shared_gate_up, 2 * shared_inter, shared_gate_up + shared_inter, 2 * shared_inter, tokens,
                shared_inter);
  }
  runLinear(pool, second, stats);
  // Weighted sum of the routed outputs, in assignment order per token.
  std::vector<int64_t> row_of(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) row_of[static_cast<size_t>(s.order[static_cast<size_t>(r)])] = r;
  auto combine = [&](int64_t t) {
    float* xt = x + t * hidden;
    for (int i = 0; i < k; ++i) {
      const int64_t a = t * k + i;
      const float w = s.weights[static_cast<size_t>(a)];
      const float* d = down + row_of[static_cast<size_t>(a)] * hidden;
      for (int64_t j = 0; j < hidden; ++j) xt[j] += w * d[j];
    }
  };
  if (tokens < 8) {
    for (int64_t t = 0; t < tokens; ++t) combine(t);
  } else {
    pool.parallelFor(tokens, [&](int64_t t, int) { combine(t); });
  }
  return touched;
}

}  // namespace lg::engine::cpu

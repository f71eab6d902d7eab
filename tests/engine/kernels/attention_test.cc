// The paged attention kernels against naive double-precision attention over
// the same latents: the absorbed kernel (softmax(q . k) . c_kv) for prefill,
// suffix-over-prefix, decode (split keys) and batches; the standard-form
// kernel (up-projected k_nope / v per head) for the same shapes and across
// up-projection chunks; and the MoE router against hand-worked cases.
#include "engine/cpu/mla_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/mha_attention.h"
#include "engine/cpu/moe.h"
#include "engine/model/dtype.h"

namespace lg::engine::cpu {
namespace {

struct Pool {
  LatentLayout layout;
  std::vector<uint8_t> bytes;
  float value(BlockId b, int32_t layer, int32_t slot, int64_t d) const {
    const uint8_t* p = bytes.data() + b * layout.blockBytes() + (layout.offset(layer, slot) + d) * layout.elementBytes();
    if (layout.dtype == LatentDType::kF32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16ToFloat(h);
  }
};

void checkAttention(LatentDType dtype, int block_tokens, std::vector<std::pair<int, int>> seqs /* (first, queries) */,
                    int threads) {
  const int heads = 5, kv = 40, rope = 8, D = kv + rope, layers = 2, layer = 1;
  std::mt19937 rng(static_cast<uint32_t>(block_tokens * 131 + seqs.size()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Pool pool;
  pool.layout = {layers, block_tokens, kv, D, dtype};
  int total_blocks = 0;
  for (auto [first, n] : seqs) total_blocks += (first + n + block_tokens - 1) / block_tokens;
  pool.bytes.resize(pool.layout.blockBytes() * static_cast<size_t>(total_blocks));
  for (size_t i = 0; i < pool.bytes.size() / pool.layout.elementBytes(); ++i) {
    const float v = normal(rng);
    if (dtype == LatentDType::kF32) {
      std::memcpy(pool.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = floatToBf16(v);
      std::memcpy(pool.bytes.data() + 2 * i, &h, 2);
    }
  }
  // Blocks handed out in a scrambled order, as a real pool would.
  std::vector<BlockId> order(static_cast<size_t>(total_blocks));
  for (int i = 0; i < total_blocks; ++i) order[static_cast<size_t>(i)] = (i * 7 + 3) % total_blocks;
  std::vector<std::vector<BlockId>> tables;
  std::vector<std::vector<float>> qs, outs;
  size_t next = 0;
  for (auto [first, n] : seqs) {
    std::vector<BlockId> t;
    for (int b = 0; b < (first + n + block_tokens - 1) / block_tokens; ++b) t.push_back(order[next++]);
    tables.push_back(t);
    std::vector<float> q(static_cast<size_t>(n * heads * D));
    for (auto& v : q) v = 0.3f * normal(rng);
    qs.push_back(q);
    outs.emplace_back(static_cast<size_t>(n * heads * kv), -1.0f);
  }
  std::vector<AttentionSequence> as;
  for (size_t s = 0; s < seqs.size(); ++s) {
    as.push_back({qs[s].data(), outs[s].data(), seqs[s].second, seqs[s].first, tables[s]});
  }
  ThreadPool tp(threads);
  mlaAttention(tp, LatentPoolView{pool.bytes.data(), pool.layout}, layer, heads, as);
  double max_err = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [first, n] = seqs[s];
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < heads; ++h) {
        const float* q = qs[s].data() + (t * heads + h) * D;
        const int keys = first + t + 1;
        std::vector<double> score(static_cast<size_t>(keys));
        double mx = -1e300;
        for (int j = 0; j < keys; ++j) {
          const BlockId b = tables[s][static_cast<size_t>(j / block_tokens)];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(q[d]) * pool.value(b, layer, j % block_tokens, d);
          score[static_cast<size_t>(j)] = dot;
          mx = std::max(mx, dot);
        }
        double z = 0;
        for (auto& v : score) z += (v = std::exp(v - mx));
        for (int c = 0; c < kv; ++c) {
          double ref = 0;
          for (int j = 0; j < keys; ++j) {
            ref += score[static_cast<size_t>(j)] / z *
                   pool.value(tables[s][static_cast<size_t>(j / block_tokens)], layer, j % block_tokens, c);
          }
          max_err = std::max(max_err, std::fabs(ref - outs[s][static_cast<size_t>((t * heads + h) * kv + c)]));
        }
      }
    }
  }
  EXPECT_LT(max_err, 2e-5) << "block " << block_tokens << " threads " << threads;
}

TEST(MlaAttentionTest, MatchesNaiveAttention) {
  for (LatentDType dtype : {LatentDType::kF32, LatentDType::kBF16}) {
    for (int bt : {1, 7, 16, 64}) {
      checkAttention(dtype, bt, {{0, 1}}, 2);                       // first token
      checkAttention(dtype, bt, {{0, 150}}, 2);                     // prefill
      checkAttention(dtype, bt, {{200, 1}}, 2);                     // decode: keys split across threads
      checkAttention(dtype, bt, {{130, 45}}, 1);                    // suffix over a prefix
      checkAttention(dtype, bt, {{70, 1}, {0, 33}, {65, 1}}, 3);    // mixed batch
    }
  }
}

// Fills a pool of `blocks` blocks with normal values in its dtype.
void fillPool(Pool& pool, int blocks, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  pool.bytes.resize(pool.layout.blockBytes() * static_cast<size_t>(blocks));
  for (size_t i = 0; i < pool.bytes.size() / pool.layout.elementBytes(); ++i) {
    const float v = normal(rng);
    if (pool.layout.dtype == LatentDType::kF32) {
      std::memcpy(pool.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = floatToBf16(v);
      std::memcpy(pool.bytes.data() + 2 * i, &h, 2);
    }
  }
}

// The standard form for one sequence of `queries` new tokens over `first`
// cached positions, against the definition: k_nope = W_UK c_kv and
// v = W_UV c_kv per head, scores q_nope . k_nope + q_pe . k_pe.
void checkStandardForm(LatentDType dtype, int block_tokens, int first, int queries, int chunk_keys, int threads) {
  const int heads = 3, nope = 16, rope = 8, vd = 12, kv = 40, D = kv + rope, layers = 2, layer = 1;
  const int qk = nope + rope;
  std::mt19937 rng(static_cast<uint32_t>(block_tokens * 977 + first * 31 + queries));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Pool pool;
  pool.layout = {layers, block_tokens, kv, D, dtype};
  const int context = first + queries;
  const int blocks = (context + block_tokens - 1) / block_tokens;
  fillPool(pool, blocks, rng);
  std::vector<BlockId> table;
  for (int i = 0; i < blocks; ++i) table.push_back((i * 5 + 2) % blocks);  // scrambled, as a real pool hands them out
  // kv_b_proj [heads * (nope + v), kv]: per head W_UK rows, then W_UV rows.
  std::vector<float> w(static_cast<size_t>(heads * (nope + vd) * kv));
  for (auto& x : w) x = 0.2f * normal(rng);
  WeightView view;
  view.dtype = DType::kF32;
  view.data = reinterpret_cast<const uint8_t*>(w.data());
  view.ld = kv;
  view.rows = heads * (nope + vd);
  view.cols = kv;
  std::vector<float> q(static_cast<size_t>(queries * heads * qk));
  for (auto& x : q) x = 0.3f * normal(rng);
  std::vector<float> out(static_cast<size_t>(queries * heads * vd), -1.0f);
  ThreadPool tp(threads);
  MhaScratch scratch;
  mhaAttention(tp, LatentPoolView{pool.bytes.data(), pool.layout}, layer, view, MhaShape{heads, nope, rope, vd},
               MhaSequence{q.data(), out.data(), queries, first, table}, scratch, chunk_keys);

  auto latent = [&](int pos, int d) {
    return double(pool.value(table[static_cast<size_t>(pos / block_tokens)], layer, pos % block_tokens, d));
  };
  // Up-projected keys and values of every position, per head.
  std::vector<double> k_nope(static_cast<size_t>(context * heads * nope)), v(static_cast<size_t>(context * heads * vd));
  for (int j = 0; j < context; ++j) {
    for (int h = 0; h < heads; ++h) {
      for (int r = 0; r < nope + vd; ++r) {
        double acc = 0;
        for (int c = 0; c < kv; ++c) acc += double(w[static_cast<size_t>((h * (nope + vd) + r) * kv + c)]) * latent(j, c);
        if (r < nope) {
          k_nope[static_cast<size_t>((j * heads + h) * nope + r)] = acc;
        } else {
          v[static_cast<size_t>((j * heads + h) * vd + r - nope)] = acc;
        }
      }
    }
  }
  double max_err = 0;
  for (int t = 0; t < queries; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* qr = q.data() + (t * heads + h) * qk;
      const int keys = first + t + 1;
      std::vector<double> score(static_cast<size_t>(keys));
      double mx = -1e300;
      for (int j = 0; j < keys; ++j) {
        double dot = 0;
        for (int d = 0; d < nope; ++d) dot += double(qr[d]) * k_nope[static_cast<size_t>((j * heads + h) * nope + d)];
        for (int d = 0; d < rope; ++d) dot += double(qr[nope + d]) * latent(j, kv + d);
        score[static_cast<size_t>(j)] = dot;
        mx = std::max(mx, dot);
      }
      double z = 0;
      for (auto& s : score) z += (s = std::exp(s - mx));
      for (int c = 0; c < vd; ++c) {
        double ref = 0;
        for (int j = 0; j < keys; ++j) ref += score[static_cast<size_t>(j)] / z * v[static_cast<size_t>((j * heads + h) * vd + c)];
        max_err = std::max(max_err, std::fabs(ref - out[static_cast<size_t>((t * heads + h) * vd + c)]));
      }
    }
  }
  EXPECT_LT(max_err, 2e-5) << "block " << block_tokens << " first " << first << " queries " << queries << " chunk "
                           << chunk_keys << " threads " << threads;
}

TEST(MhaAttentionTest, MatchesNaiveStandardAttention) {
  for (LatentDType dtype : {LatentDType::kF32, LatentDType::kBF16}) {
    for (int bt : {1, 7, 16, 64}) {
      for (int chunk : {0, 64}) {  // 64: the up-projection runs in chunks of one tile
        checkStandardForm(dtype, bt, 0, 1, chunk, 2);      // first token
        checkStandardForm(dtype, bt, 0, 150, chunk, 2);    // prefill: query blocks of 64 and a partial one
        checkStandardForm(dtype, bt, 200, 1, chunk, 2);    // one token over a prefix
        checkStandardForm(dtype, bt, 130, 45, chunk, 1);   // suffix over a prefix
        checkStandardForm(dtype, bt, 61, 70, chunk, 3);    // a block of queries straddling a chunk edge
      }
    }
  }
}

ModelConfig routerConfig(TopkMethod method, ScoringFunc scoring, int groups, int keep, int k) {
  ModelConfig c;
  c.model_type = ModelType::kDeepseekV3;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = k;
  c.n_group = groups;
  c.topk_group = keep;
  c.topk_method = method;
  c.scoring_func = scoring;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  return c;
}

TEST(RouterTest, GreedySoftmax) {
  ModelConfig c = routerConfig(TopkMethod::kGreedy, ScoringFunc::kSoftmax, 1, 1, 2);
  const float logits[8] = {0, 1, 2, 3, 0, 0, 5, 0};
  int32_t e[2];
  float w[2];
  routeToken(c, logits, nullptr, e, w);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_EQ(e[0], 6);
  EXPECT_EQ(e[1], 3);
  EXPECT_NEAR(w[0], std::exp(5.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(3.0) / z, 1e-6);
}

TEST(RouterTest, GroupLimitedGreedyKeepsTheBestGroupsByMax) {
  // Groups of 2: {0,1} {2,3} {4,5} {6,7}; keep 2 groups by their max score.
  ModelConfig c = routerConfig(TopkMethod::kGroupLimitedGreedy, ScoringFunc::kSoftmax, 4, 2, 3);
  c.routed_scaling_factor = 16.0;
  const float logits[8] = {4.0f, 3.9f, 0.0f, 0.0f, 3.0f, 3.8f, 3.95f, -9.0f};
  int32_t e[3];
  float w[3];
  routeToken(c, logits, nullptr, e, w);
  // Group maxes: 4.0, 0, 3.8, 3.95 -> groups 0 and 3; experts 0, 6, then 1 (group 2 is out).
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e[1], 6);
  EXPECT_EQ(e[2], 1);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(w[0], 16.0 * std::exp(4.0) / z, 1e-5);
}

TEST(RouterTest, NoauxTcUsesBiasForSelectionOnlyAndTopTwoGroupSums) {
  ModelConfig c = routerConfig(TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, 2, 1, 2);
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  // Group 0 = experts 0..3, group 1 = 4..7.
  const float logits[8] = {2.0f, -1.0f, -1.0f, -1.0f, 0.5f, 0.5f, 0.4f, -3.0f};
  const float bias[8] = {0, 0, 0, 0, 0, 0, 0.5f, 0};
  // Biased scores: g0 top2 = s(2)+s(-1) = 0.881+0.269 = 1.150; g1 top2 = s(0.4)+0.5 + s(0.5) = 1.099+0.622 = 1.721.
  int32_t e[2];
  float w[2];
  routeToken(c, logits, bias, e, w);
  EXPECT_EQ(e[0], 6);
  EXPECT_TRUE(e[1] == 4) << e[1];  // s(0.5) ties between 4 and 5: the lower id
  const double s6 = 1 / (1 + std::exp(-0.4)), s4 = 1 / (1 + std::exp(-0.5));
  EXPECT_NEAR(w[0], 2.5 * s6 / (s6 + s4), 1e-6);  // unbiased score, renormalized, scaled
  EXPECT_NEAR(w[1], 2.5 * s4 / (s6 + s4), 1e-6);
  // Negative biased scores in the kept group still beat the dropped group:
  // dropped experts are masked to -inf as in DeepSeek's reference (masking with
  // 0.0, as transformers does, would pick experts 4 and 5 here).
  const float low[8] = {-9, -9, -9, -9, -9, -9, -9, -9};
  const float neg_bias[8] = {-0.5f, -0.5f, -0.6f, -0.6f, -2, -2, -2, -2};
  ModelConfig c2 = routerConfig(TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, 2, 1, 2);
  routeToken(c2, low, neg_bias, e, w);
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e[1], 1);
}

TEST(RouterTest, V2RenormalizesOrScalesNeverBoth) {
  ModelConfig c = routerConfig(TopkMethod::kGreedy, ScoringFunc::kSoftmax, 1, 1, 2);
  c.model_type = ModelType::kDeepseekV2;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 16.0;
  const float logits[8] = {1, 2, 0, 0, 0, 0, 0, 0};
  int32_t e[2];
  float w[2];
  routeToken(c, logits, nullptr, e, w);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  c.model_type = ModelType::kDeepseekV3;
  routeToken(c, logits, nullptr, e, w);
  EXPECT_NEAR(w[0] + w[1], 16.0, 1e-5);
}

}  // namespace
}  // namespace lg::engine::cpu

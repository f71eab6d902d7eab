#include "engine/cpu/mha_attention.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#include "common/check.h"
#include "engine/cpu/micro_kernel.h"
#include "engine/cpu/online_softmax.h"
#include "engine/cpu/simd.h"

namespace lg::engine::cpu {
namespace {

constexpr int kTile = 64;        // keys per tile
constexpr int kQueryBlock = 64;  // queries of one head per task: one 64-lane micro-kernel panel

struct Task {
  int32_t head;
  int32_t block;   // query block: queries [block * kQueryBlock, ...)
  int32_t k0, k1;  // keys of the current chunk this block sees
};

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

// Per-thread scratch of one task: Q^T, scores^T, the rescale factors.
struct TaskScratch {
  std::unique_ptr<float, AlignedFree> data;
  size_t size = 0;
  float* get(size_t floats) {
    if (floats > size) {
      size = floats;
      data.reset(static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)));
    }
    return data.get();
  }
};

TaskScratch& taskScratch() {
  thread_local TaskScratch s;
  return s;
}

struct Geometry {
  MhaShape shape;
  int64_t qk = 0;           // nope + rope: score head dim
  int64_t ldq = 0;          // floats per query row (all heads)
  int64_t ldkv = 0;         // floats per up-projected key row of one head: nope + v
  int64_t head_kv = 0;      // floats of one head's up-projected rows in the chunk buffer
  int64_t latent_dim = 0;   // floats per latent row
  int64_t kv_lora = 0;
  int32_t num_blocks = 0;   // query blocks
  int64_t state_stride = 0;  // floats of one (head, block) state

  // O^T [v][rp], then max [rp], then sum [rp], rp <= kQueryBlock.
  float* state(float* base, int32_t head, int32_t block) const {
    return base + (int64_t{head} * num_blocks + block) * state_stride;
  }
};

// One head and query block against keys [task.k0, task.k1) of the chunk that
// starts at c0: kv holds the chunk's up-projected rows, head after head,
// latents its latent rows (for k_pe). The first chunk starts the block's
// softmax state.
void runTask(const Geometry& g, const MhaSequence& seq, const float* latents, const float* kv, int32_t c0,
             float* state_base, const Task& task) {
  const MhaShape& sh = g.shape;
  const int32_t t0 = task.block * kQueryBlock;
  const int32_t t1 = std::min(seq.num_queries, t0 + kQueryBlock);
  const int64_t rows = t1 - t0;
  const int64_t rp = (rows + 15) / 16 * 16;
  float* qt = taskScratch().get(static_cast<size_t>(g.qk * rp + kTile * rp + rp));
  float* st = qt + g.qk * rp;  // scores^T, then probabilities^T: [kTile][rp]
  float* corr = st + kTile * rp;
  float* ot = g.state(state_base, task.head, task.block);
  float* mx = ot + sh.v * rp;
  float* sum = mx + rp;
  if (c0 == 0) {
    std::fill_n(ot, static_cast<size_t>(sh.v * rp), 0.0f);
    std::fill_n(mx, rp, -std::numeric_limits<float>::infinity());
    std::fill_n(sum, rp, 0.0f);
  }
  // Q^T [nope + rope][rp], zero in the padding lanes, by 16 x 16 register transposes.
  const float* q0 = seq.q + int64_t{t0} * g.ldq + int64_t{task.head} * g.qk;
  for (int64_t m = 0; m < rp; m += 16) {
    for (int64_t d = 0; d < g.qk; d += 16) {
      const int64_t count = std::min<int64_t>(16, g.qk - d);
      const __mmask16 mask = tailMask(count);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = m + i < rows ? _mm512_maskz_loadu_ps(mask, q0 + (m + i) * g.ldq + d) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t t = 0; t < count; ++t) _mm512_store_ps(qt + (d + t) * rp + m, r[t]);
    }
  }
  alignas(64) int32_t lane_pos[kQueryBlock];
  for (int64_t r = 0; r < rp; ++r) lane_pos[r] = r < rows ? seq.first_position + t0 + static_cast<int32_t>(r) : -1;

  const float* head_kv = kv + task.head * g.head_kv;
  const int n = static_cast<int>(rp);
  for (int32_t k0 = task.k0; k0 < task.k1; k0 += kTile) {
    const int nk = std::min(kTile, task.k1 - k0);
    const float* k_nope = head_kv + (k0 - c0) * g.ldkv;  // then v at + nope
    const float* k_pe = latents + (k0 - c0) * g.latent_dim + g.kv_lora;
    // S^T [nk][rp] = K [nk][nope + rope] . Q^T, k_nope and k_pe read where they lie.
    microKernelRowsN(nk, k_nope, g.ldkv, 1, qt, rp, sh.nope, st, rp, n, false);
    microKernelRowsN(nk, k_pe, g.latent_dim, 1, qt + sh.nope * rp, rp, sh.rope, st, rp, n, true);
    // Tiles wholly below the diagonal (every query sees every key) skip the mask.
    const bool unmasked = k0 + nk - 1 <= seq.first_position + t0;
    if (onlineSoftmaxTile(st, rp, nk, k0, lane_pos, unmasked, mx, sum, corr)) rescaleColumns(ot, sh.v, rp, corr);
    // O^T [v][rp] += V^T [v][nk] . P^T [nk][rp]; V^T(c, j) = v row j, column c.
    microKernelRowsN(sh.v, k_nope + sh.nope, 1, g.ldkv, st, rp, nk, ot, rp, n, true);
  }
}

// out = O / sum for one head and query block, from its transposed state.
void finishTask(const Geometry& g, const MhaSequence& seq, float* state_base, int32_t head, int32_t block) {
  const MhaShape& sh = g.shape;
  const int32_t t0 = block * kQueryBlock;
  const int32_t t1 = std::min(seq.num_queries, t0 + kQueryBlock);
  const int64_t rows = t1 - t0;
  const int64_t rp = (rows + 15) / 16 * 16;
  const float* ot = g.state(state_base, head, block);
  const float* sum = ot + sh.v * rp + rp;
  const int64_t ldo = int64_t{sh.heads} * sh.v;
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / sum[r];
    float* dst = seq.out + (t0 + r) * ldo + int64_t{head} * sh.v;
    for (int64_t c = 0; c < sh.v; ++c) dst[c] = ot[c * rp + r] * inv;
  }
}

}  // namespace

void mhaAttention(ThreadPool& pool, const LatentPoolView& pv, int32_t layer, const WeightView& kv_b_proj,
                  const MhaShape& shape, const MhaSequence& seq, MhaScratch& scratch, int32_t chunk_keys,
                  LinearStats* up_projection_stats) {
  const LatentLayout& L = pv.layout;
  Geometry g;
  g.shape = shape;
  g.qk = int64_t{shape.nope} + shape.rope;
  g.ldq = int64_t{shape.heads} * g.qk;
  g.ldkv = int64_t{shape.nope} + shape.v;
  g.latent_dim = L.latent_dim;
  g.kv_lora = L.kv_lora_rank;
  g.num_blocks = (seq.num_queries + kQueryBlock - 1) / kQueryBlock;
  g.state_stride = int64_t{shape.v + 2} * kQueryBlock;
  LG_CHECK(kv_b_proj.rows == int64_t{shape.heads} * (shape.nope + shape.v) && kv_b_proj.cols == L.kv_lora_rank,
           "kv_b_proj is ", kv_b_proj.rows, " x ", kv_b_proj.cols);
  LG_CHECK(L.latent_dim == L.kv_lora_rank + shape.rope, "latent_dim ", L.latent_dim, ", rope ", shape.rope);
  if (seq.num_queries <= 0) return;

  const int32_t context = seq.first_position + seq.num_queries;
  int64_t chunk = chunk_keys > 0 ? chunk_keys : kUpProjectedBytes / (shape.heads * g.ldkv * int64_t{sizeof(float)});
  chunk = std::max<int64_t>(kTile, (chunk + kTile - 1) / kTile * kTile);
  chunk = std::min<int64_t>(chunk, (context + kTile - 1) / kTile * kTile);
  g.head_kv = chunk * g.ldkv;
  float* latents = scratch.latents.ensure(static_cast<size_t>(chunk * g.latent_dim));
  float* kv = scratch.kv.ensure(static_cast<size_t>(shape.heads * g.head_kv));
  std::vector<LinearProblem> up;
  float* state = scratch.state.ensure(static_cast<size_t>(int64_t{shape.heads} * g.num_blocks * g.state_stride));

  std::vector<Task> tasks;
  for (int32_t c0 = 0; c0 < context; c0 += static_cast<int32_t>(chunk)) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(chunk, context - c0));
    pool.parallelFor((n + kTile - 1) / kTile, [&](int64_t i, int) {
      const int32_t first = c0 + static_cast<int32_t>(i) * kTile;
      copyLatentRows(pv, seq.blocks, layer, first, std::min(kTile, c0 + n - first),
                     latents + (first - c0) * g.latent_dim);
    });
    // [k_nope | v] of the chunk's keys, c_kv [n, kv_lora] . kv_b_proj^T, one
    // problem per head so that each head's rows are contiguous (one grouped
    // GEMM: the heads share the transposed latents).
    up.clear();
    for (int32_t h = 0; h < shape.heads; ++h) {
      up.push_back({latents, n, g.latent_dim, kv_b_proj.rowSlice(h * g.ldkv, g.ldkv), WeightLayout::kOutIn,
                    kv + h * g.head_kv, g.ldkv, false});
    }
    runLinear(pool, up, up_projection_stats);
    // Head after head, so that the threads share one head's K/V in the cache;
    // within a head, blocks that see more keys first (they take longest, so
    // the dynamic schedule balances).
    tasks.clear();
    for (int32_t h = 0; h < shape.heads; ++h) {
      for (int32_t b = g.num_blocks - 1; b >= 0; --b) {
        const int32_t last_query = std::min(seq.num_queries, (b + 1) * kQueryBlock) - 1;
        const int32_t key_end = std::min(c0 + n, seq.first_position + last_query + 1);
        if (key_end <= c0) continue;  // the whole chunk lies past this block's causal limit
        tasks.push_back({h, b, c0, key_end});
      }
    }
    pool.parallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
      runTask(g, seq, latents, kv, c0, state, tasks[static_cast<size_t>(t)]);
    });
  }
  pool.parallelFor(int64_t{shape.heads} * g.num_blocks, [&](int64_t i, int) {
    finishTask(g, seq, state, static_cast<int32_t>(i % shape.heads), static_cast<int32_t>(i / shape.heads));
  });
}

}  // namespace lg::engine::cpu

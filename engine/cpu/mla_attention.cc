#include "engine/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "engine/cpu/micro_kernel.h"
#include "engine/cpu/online_softmax.h"
#include "engine/cpu/simd.h"

namespace lg::engine::cpu {
namespace {

// Scores, probabilities and outputs are kept transposed, [key or latent
// column][query row], so a 16-lane vector holds 16 query rows (token x head):
// the online softmax is then lane-wise, the causal mask is a lane compare,
// and the key rows are read as they are stored (no transposition of the cache).
constexpr int kTile = 64;        // keys per tile
constexpr int kPanel = 64;       // query rows per micro-kernel panel (4 vectors)
constexpr int kTargetRows = 64;  // query rows per prefill task

struct Task {
  int32_t sequence;
  int32_t t0, t1;  // query range
  int32_t k0, k1;  // key range; k1 < 0: up to the causal limit of the last query
  int32_t split;   // >= 0: write an unnormalized partial result for merging
};

// Split-key partial results: for each split, O^T [kv][rows_pad], max, sum.
struct Partials {
  std::vector<float> data;
  int64_t rows_pad = 0;
  int64_t kv = 0;
  float* o(int32_t split) { return data.data() + split * rows_pad * (kv + 2); }
  float* mx(int32_t split) { return o(split) + kv * rows_pad; }
  float* sum(int32_t split) { return mx(split) + rows_pad; }
};

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

// Per-thread scratch, grown on demand.
struct Scratch {
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

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// fp32 rows of keys [k0, k0 + nk): a pointer into the pool when the rows are
// fp32 and contiguous (inside one block), else converted into `buffer`.
const float* keyRows(const LatentPoolView& pv, std::span<const BlockId> blocks, int32_t layer, int32_t k0, int nk,
                     float* buffer, bool allow_in_place = true) {
  const LatentLayout& L = pv.layout;
  const int32_t bt = L.block_tokens;
  if (allow_in_place && L.dtype == LatentDType::kF32 && k0 / bt == (k0 + nk - 1) / bt) {
    return reinterpret_cast<const float*>(pv.row(blocks[static_cast<size_t>(k0 / bt)], layer, k0 % bt));
  }
  copyLatentRows(pv, blocks, layer, k0, nk, buffer);
  return buffer;
}

// out[r * ld + j] = q[r] . k[j] over D values, for r < nr, j < nj (<= 4 each):
// 16 accumulators, each weight of a pair loaded once per 16 values, and the
// 16 horizontal sums done together by one register transpose.
inline void dot4x4(const float* const q[4], const float* const k[4], int64_t D, float* out, int64_t ld, int nr, int nj) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) {
    const __mmask16 m = tailMask(D - d);
    __m512 kv[4], qv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) kv[j] = _mm512_maskz_loadu_ps(m, k[j] + d);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) qv[r] = _mm512_maskz_loadu_ps(m, q[r] + d);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r * 4 + j] = _mm512_fmadd_ps(qv[r], kv[j], acc[r * 4 + j]);
    }
  }
  // A separate array for the transpose keeps `acc` in registers in the loop.
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) t[i] = acc[i];
  transpose16(t);
  __m512 total = t[0];
#pragma GCC unroll 16
  for (int i = 1; i < 16; ++i) total = _mm512_add_ps(total, t[i]);
  alignas(64) float sums[16];
  _mm512_store_ps(sums, total);
  for (int r = 0; r < nr; ++r) {
    for (int j = 0; j < nj; ++j) out[r * ld + j] = sums[r * 4 + j];
  }
}

// The same attention for at most 16 query rows (decode with few heads): with
// so few rows a vector of rows feeds one FMA per loaded key value, so scores
// are dot products along the latent dimension instead, probabilities stay
// row-major, and P . C_kv broadcasts probabilities against rows of the cache.
void runTaskFewRows(const LatentPoolView& pv, int32_t layer, int32_t heads, const AttentionSequence& seq,
                    const Task& task, Partials* partials) {
  const LatentLayout& L = pv.layout;
  const int64_t D = L.latent_dim;
  const int64_t kv = L.kv_lora_rank;
  const int64_t rows = int64_t{task.t1 - task.t0} * heads;
  const int64_t ldo = (kv + kTile - 1) / kTile * kTile;
  float* s = scratch().get(static_cast<size_t>(rows * kTile + rows * ldo + 2 * rows + kTile * (D + 16) + 16));
  float* o = s + rows * kTile;
  float* mx = o + rows * ldo;
  float* sum = mx + rows;
  float* tile = sum + rows;
  const float* q0 = seq.q + int64_t{task.t0} * heads * D;
  std::fill_n(o, static_cast<size_t>(rows * ldo), 0.0f);
  std::fill_n(mx, rows, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, rows, 0.0f);
  // Vector loads of c_kv read up to the next multiple of 16 columns.
  const bool in_place = (kv + 15) / 16 * 16 <= D;
  const int32_t causal_end = seq.first_position + task.t1;
  const int32_t key_end = task.k1 < 0 ? causal_end : std::min(task.k1, causal_end);
  const int32_t bt = L.block_tokens;
  for (int32_t k0 = task.k0; k0 < key_end;) {
    int nk = std::min(kTile, key_end - k0);
    if (bt >= kTile) nk = std::min(nk, bt - k0 % bt);
    const float* keys = keyRows(pv, seq.blocks, layer, k0, nk, tile, in_place);
    // Four keys at a time against every query row, so that each key row is
    // read from memory once and used from L1 by all rows; the next keys are
    // prefetched meanwhile (each sequence's latents are read once per step,
    // so they come from memory, and the compute per key is short).
    for (int j0 = 0; j0 < nk; j0 += 4) {
      const int nj = std::min(4, nk - j0);
      const float* kp[4];
      for (int j = 0; j < 4; ++j) kp[j] = keys + (j0 + std::min(j, nj - 1)) * D;
      if (j0 + 8 < nk) {
        const char* ahead = reinterpret_cast<const char*>(keys + (j0 + 8) * D);
        for (int64_t b = 0; b < int64_t{4} * D * int64_t{sizeof(float)}; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
      }
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, rows - r0));
        const float* qp[4];
        for (int r = 0; r < 4; ++r) qp[r] = q0 + (r0 + std::min(r, nr - 1)) * D;
        dot4x4(qp, kp, D, s + r0 * kTile + j0, kTile, nr, nj);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * kTile;
      const int32_t pos = seq.first_position + task.t0 + static_cast<int32_t>(r / heads);
      const int valid = std::clamp(pos - k0 + 1, 0, nk);
      __m512 vtile_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int j = 0; j < valid; j += 16) {
        vtile_max = _mm512_mask_max_ps(vtile_max, tailMask(valid - j), vtile_max, _mm512_loadu_ps(sr + j));
      }
      const float tile_max = _mm512_reduce_max_ps(vtile_max);
      if (valid == 0) {
        std::fill_n(sr, kTile, 0.0f);
        continue;
      }
      const float new_max = std::max(mx[r], tile_max);
      const float correction = std::exp(mx[r] - new_max);  // 0 on a row's first keys
      const __m512 vmax = _mm512_set1_ps(new_max);
      __m512 vsum = _mm512_setzero_ps();
      for (int j = 0; j < kTile; j += 16) {
        const __m512 p = _mm512_maskz_mov_ps(tailMask(valid - j), expNonPositive(_mm512_sub_ps(_mm512_loadu_ps(sr + j), vmax)));
        _mm512_storeu_ps(sr + j, p);
        vsum = _mm512_add_ps(vsum, p);
      }
      sum[r] = sum[r] * correction + _mm512_reduce_add_ps(vsum);
      mx[r] = new_max;
      if (correction != 1.0f) {
        float* orow = o + r * ldo;
        const __m512 c = _mm512_set1_ps(correction);
        for (int64_t col = 0; col < ldo; col += 16) _mm512_storeu_ps(orow + col, _mm512_mul_ps(_mm512_loadu_ps(orow + col), c));
      }
    }
    for (int64_t c = 0; c < kv; c += kTile) {
      microKernelRowsN(rows, s, kTile, 1, keys + c, D, nk, o + c, ldo, static_cast<int>(std::min<int64_t>(kTile, kv - c)), true);
    }
    k0 += nk;
  }
  if (task.split >= 0) {
    const int64_t rp = partials->rows_pad;
    float* po = partials->o(task.split);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < kv; ++c) po[c * rp + r] = o[r * ldo + c];
    }
    std::copy_n(mx, rows, partials->mx(task.split));
    std::copy_n(sum, rows, partials->sum(task.split));
    return;
  }
  float* out0 = seq.out + int64_t{task.t0} * heads * kv;
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / sum[r]);
    for (int64_t c = 0; c < kv; c += 16) {
      const __mmask16 m = tailMask(kv - c);
      _mm512_mask_storeu_ps(out0 + r * kv + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + r * ldo + c), inv));
    }
  }
}

void runTask(const LatentPoolView& pv, int32_t layer, int32_t heads, const AttentionSequence& seq, const Task& task,
             Partials* partials) {
  if (int64_t{task.t1 - task.t0} * heads <= 16) {
    runTaskFewRows(pv, layer, heads, seq, task, partials);
    return;
  }
  const LatentLayout& L = pv.layout;
  const int64_t D = L.latent_dim;
  const int64_t kv = L.kv_lora_rank;
  const int64_t rows = int64_t{task.t1 - task.t0} * heads;
  const int64_t rp = (rows + 15) / 16 * 16;  // rows padded to whole vectors
  float* qt = scratch().get(static_cast<size_t>(D * rp + kTile * rp + kv * rp + 3 * rp + kTile * D + 16));
  float* st = qt + D * rp;  // scores^T, then probabilities^T: [kTile][rp]
  float* ot = st + kTile * rp;  // output^T: [kv][rp]
  float* mx = ot + kv * rp;
  float* sum = mx + rp;
  float* corr = sum + rp;
  float* tile = corr + rp;
  // Q^T [D][rp], zero in the padding lanes.
  const float* q0 = seq.q + int64_t{task.t0} * heads * D;
  for (int64_t d = 0; d < D; ++d) {
    float* dst = qt + d * rp;
    for (int64_t r = 0; r < rows; ++r) dst[r] = q0[r * D + d];
    for (int64_t r = rows; r < rp; ++r) dst[r] = 0.0f;
  }
  std::fill_n(ot, static_cast<size_t>(kv * rp), 0.0f);
  std::fill_n(mx, rp, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, rp, 0.0f);
  // Each lane's query position; padding lanes see no key.
  alignas(64) int32_t lane_pos_storage[16 * 64];
  std::vector<int32_t> lane_pos_heap;
  int32_t* lane_pos = lane_pos_storage;
  if (rp > 16 * 64) {
    lane_pos_heap.resize(static_cast<size_t>(rp));
    lane_pos = lane_pos_heap.data();
  }
  for (int64_t r = 0; r < rp; ++r) lane_pos[r] = r < rows ? seq.first_position + task.t0 + static_cast<int32_t>(r / heads) : -1;

  const int32_t causal_end = seq.first_position + task.t1;  // the last query's own key included
  const int32_t key_end = task.k1 < 0 ? causal_end : std::min(task.k1, causal_end);
  const int32_t bt = L.block_tokens;
  for (int32_t k0 = task.k0; k0 < key_end;) {
    // A tile never crosses a block boundary when blocks are at least a tile
    // long, so fp32 keys are read in place.
    int nk = std::min(kTile, key_end - k0);
    if (bt >= kTile) nk = std::min(nk, bt - k0 % bt);
    const float* keys = keyRows(pv, seq.blocks, layer, k0, nk, tile);
    for (int64_t p = 0; p < rp; p += kPanel) {
      microKernelRowsN(nk, keys, D, 1, qt + p, rp, D, st + p, rp, static_cast<int>(std::min<int64_t>(kPanel, rp - p)), false);
    }
    // Tiles wholly below the diagonal (every query sees every key) skip the mask.
    const bool unmasked = k0 + nk - 1 <= seq.first_position + task.t0;
    if (onlineSoftmaxTile(st, rp, nk, k0, lane_pos, unmasked, mx, sum, corr)) rescaleColumns(ot, kv, rp, corr);
    // O^T [kv][rp] += V^T [kv][nk] . P^T [nk][rp]; V^T(c, j) = keys[j * D + c].
    for (int64_t p = 0; p < rp; p += kPanel) {
      microKernelRowsN(kv, keys, 1, D, st + p, rp, nk, ot + p, rp, static_cast<int>(std::min<int64_t>(kPanel, rp - p)), true);
    }
    k0 += nk;
  }
  if (task.split >= 0) {
    std::copy_n(ot, static_cast<size_t>(kv * rp), partials->o(task.split));
    std::copy_n(mx, rp, partials->mx(task.split));
    std::copy_n(sum, rp, partials->sum(task.split));
    return;
  }
  float* out0 = seq.out + int64_t{task.t0} * heads * kv;
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / sum[r];
    float* dst = out0 + r * kv;
    for (int64_t col = 0; col < kv; ++col) dst[col] = ot[col * rp + r] * inv;
  }
}

// Combines split-key partials: out = sum_i o_i e^(m_i - M) / sum_i l_i e^(m_i - M).
void mergeSplits(Partials& p, int32_t splits, int64_t rows, const AttentionSequence& seq) {
  const int64_t kv = p.kv, rp = p.rows_pad;
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < splits; ++i) m = std::max(m, p.mx(i)[r]);
    float total = 0.0f;
    float* dst = seq.out + r * kv;  // row r is (query r / heads, head r % heads)
    std::fill_n(dst, kv, 0.0f);
    for (int32_t i = 0; i < splits; ++i) {
      if (p.sum(i)[r] == 0.0f) continue;  // a split entirely past this row's causal limit
      const float w = std::exp(p.mx(i)[r] - m);
      total += p.sum(i)[r] * w;
      const float* o = p.o(i);
      for (int64_t c = 0; c < kv; ++c) dst[c] += o[c * rp + r] * w;
    }
    const float inv = 1.0f / total;
    for (int64_t c = 0; c < kv; ++c) dst[c] *= inv;
  }
}

}  // namespace

void copyLatentRows(const LatentPoolView& pv, std::span<const BlockId> blocks, int32_t layer, int32_t first, int32_t count,
                    float* dst) {
  const LatentLayout& L = pv.layout;
  const int32_t bt = L.block_tokens;
  const int64_t D = L.latent_dim;
  for (int32_t j = 0; j < count; ++j) {
    const int32_t pos = first + j;
    const uint8_t* row = pv.row(blocks[static_cast<size_t>(pos / bt)], layer, pos % bt);
    float* out = dst + int64_t{j} * D;
    if (L.dtype == LatentDType::kF32) {
      std::memcpy(out, row, static_cast<size_t>(D) * sizeof(float));
      continue;
    }
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 m = tailMask(D - d);
      _mm512_mask_storeu_ps(out + d, m, RowBF16::widen(_mm256_maskz_loadu_epi16(m, src + d)));
    }
  }
}

void mlaAttention(ThreadPool& pool, const LatentPoolView& pv, int32_t layer, int32_t heads,
                  std::span<const AttentionSequence> sequences) {
  std::vector<Task> tasks;
  const int threads = pool.numThreads();
  const int64_t kv = pv.layout.kv_lora_rank;
  int64_t total_rows = 0;
  for (const auto& s : sequences) total_rows += int64_t{s.num_queries} * heads;
  // Few query rows and one sequence (a batch-1 decode step): split the keys
  // instead of the queries, so each thread reads a disjoint part of the cache.
  if (sequences.size() == 1 && threads > 1 && total_rows < int64_t{kTargetRows} * threads) {
    const AttentionSequence& s = sequences[0];
    const int32_t keys = s.first_position + s.num_queries;
    const int32_t tiles = (keys + kTile - 1) / kTile;
    const int32_t splits = std::min<int32_t>(tiles, threads * 2);
    if (splits > 1) {
      const int32_t per = (tiles + splits - 1) / splits * kTile;
      Partials partials;
      partials.rows_pad = (total_rows + 15) / 16 * 16;
      partials.kv = kv;
      int32_t n = 0;
      for (int32_t k = 0; k < keys; k += per) tasks.push_back({0, 0, s.num_queries, k, std::min(keys, k + per), n++});
      partials.data.assign(static_cast<size_t>(n * partials.rows_pad * (kv + 2)), 0.0f);
      pool.parallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
        runTask(pv, layer, heads, s, tasks[static_cast<size_t>(t)], &partials);
      });
      mergeSplits(partials, n, total_rows, s);
      return;
    }
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const AttentionSequence& s = sequences[i];
    const int32_t per_task = std::max(1, kTargetRows / heads);
    for (int32_t t = 0; t < s.num_queries; t += per_task) {
      tasks.push_back({static_cast<int32_t>(i), t, std::min(s.num_queries, t + per_task), 0, -1, -1});
    }
  }
  // Longer-context tasks first: they take longest, so the dynamic schedule balances.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return sequences[static_cast<size_t>(a.sequence)].first_position + a.t1 >
           sequences[static_cast<size_t>(b.sequence)].first_position + b.t1;
  });
  pool.parallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    const Task& task = tasks[static_cast<size_t>(t)];
    runTask(pv, layer, heads, sequences[static_cast<size_t>(task.sequence)], task, nullptr);
  });
}

}  // namespace lg::engine::cpu

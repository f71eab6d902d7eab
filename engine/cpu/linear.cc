#include "engine/cpu/linear.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/cpu/host_buffer.h"
#include "engine/cpu/micro_kernel.h"
#include "engine/cpu/simd.h"

namespace lg::engine::cpu {
namespace {

constexpr int kNR = 64;       // micro-kernel width: 4 zmm of fp32
constexpr int64_t kKC = 256;  // depth of one pass over a weight block
constexpr int64_t kNC = 256;  // output columns (weight rows) per packed task
constexpr int64_t kMC = 256;  // rows of x per packed task (a multiple of 16)
constexpr int64_t kStreamChunkMin = 256;  // weight rows per streaming task, at least
constexpr int64_t kStreamSliceBytes = 256 << 10;  // weights swept by every group of 4 input rows in turn
constexpr int64_t kStreamPrefetchBytes = 4096;    // how far ahead the streaming kernel prefetches weights

// ---- streaming kernels (few rows) ----------------------------------------------

// One weight row at a time, so a task reads its slice of W as one sequential
// stream (rows are contiguous): the hardware prefetchers follow it across
// pages, which four interleaved 4 KB rows defeat. Four independent
// accumulators per input row hide the FMA latency.
template <class Row, int MB>
void streamNTRow(const float* x, int64_t ldx, const WeightView& w, int64_t n, float* y, int64_t ldy, bool accumulate) {
  const int64_t K = w.cols;
  Row row;
  row.init(w, n);
  __m512 acc[MB][4];
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) acc[m][u] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    // The weight stream is prefetched ahead of its use when several input
    // rows share it: the loop body is then long, the out-of-order window
    // covers few iterations and the hardware alone keeps too few loads in
    // flight. With one row the hardware keeps up, and software prefetches
    // only compete with it (a batch-1 decode step was slower with them).
    if constexpr (MB > 1) {
      const char* next = reinterpret_cast<const char*>(row.p + k) + kStreamPrefetchBytes;
#pragma GCC unroll 4
      for (size_t b = 0; b < 64 * sizeof(*row.p); b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m512 wv = row.load(k + 16 * u);
#pragma GCC unroll 4
      for (int m = 0; m < MB; ++m) acc[m][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + m * ldx + k + 16 * u), acc[m][u]);
    }
  }
  for (; k < K; k += 16) {
    const __mmask16 mask = tailMask(K - k);
    const __m512 wv = row.load(k, mask);
#pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) acc[m][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x + m * ldx + k), acc[m][0]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m) {
    const float s = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]), _mm512_add_ps(acc[m][2], acc[m][3])));
    float& out = y[m * ldy + n];
    out = accumulate ? out + s : s;
  }
}

template <class Row, int MB>
void streamNT(const float* x, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy,
              bool accumulate) {
  for (int64_t n = n0; n < n1; ++n) streamNTRow<Row, MB>(x, ldx, w, n, y, ldy, accumulate);
}

// y[m, n0:n1] (+)= sum_k x[m, k] W[k, n0:n1]: each pass keeps up to 256
// output columns in registers and sweeps the weight rows once.
template <class Row, int MB>
void streamNN(const float* x, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy,
              bool accumulate) {
  constexpr int NV = MB == 1 ? 16 : MB == 2 ? 8 : 4;  // MB * NV <= 16 accumulators
  const int64_t K = w.rows;
  for (int64_t n = n0; n < n1; n += 16 * NV) {
    const int64_t nn = std::min<int64_t>(16 * NV, n1 - n);
    __mmask16 masks[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) masks[v] = tailMask(nn - 16 * v);
    __m512 acc[MB][NV];
#pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K; ++k) {
      Row row;
      row.init(w, k);
      __m512 xv[MB];
#pragma GCC unroll 4
      for (int m = 0; m < MB; ++m) xv[m] = _mm512_set1_ps(x[m * ldx + k]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        if (masks[v] == 0) continue;
        const __m512 wv = masks[v] == 0xffff ? row.load(n + 16 * v) : row.load(n + 16 * v, masks[v]);
#pragma GCC unroll 4
        for (int m = 0; m < MB; ++m) acc[m][v] = _mm512_fmadd_ps(xv[m], wv, acc[m][v]);
      }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) {
      float* yr = y + m * ldy + n;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        if (masks[v] == 0) continue;
        __m512 out = acc[m][v];
        if (accumulate) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(masks[v], yr + 16 * v));
        _mm512_mask_storeu_ps(yr + 16 * v, masks[v], out);
      }
    }
  }
}

template <class Row>
void streamRange(const LinearProblem& p, int64_t n0, int64_t n1) {
  const bool nt = p.layout == WeightLayout::kOutIn;
  // Groups of up to 4 rows of x share each pass over the weights. With more
  // than one group, every group sweeps the same weights, so they go in
  // slices of output columns small enough to stay in L2 between the groups
  // (a task's range can be tens of MB: lm_head's 129,280 rows split 16 ways);
  // otherwise each group would read them from memory again.
  int64_t slice = n1 - n0;
  if (p.m > 4) {
    const int64_t column_bytes = p.k() * static_cast<int64_t>(dtypeSize(p.w.dtype));
    slice = std::max<int64_t>(64, kStreamSliceBytes / column_bytes / 64 * 64);
  }
  for (int64_t s0 = n0; s0 < n1; s0 += slice) {
    const int64_t s1 = std::min(n1, s0 + slice);
    for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
      const float* x = p.x + m0 * p.ldx;
      float* y = p.y + m0 * p.ldy;
      auto go = [&](auto mb) {
        constexpr int MB = decltype(mb)::value;
        if (nt) {
          streamNT<Row, MB>(x, p.ldx, p.w, s0, s1, y, p.ldy, p.accumulate);
        } else {
          streamNN<Row, MB>(x, p.ldx, p.w, s0, s1, y, p.ldy, p.accumulate);
        }
      };
      switch (std::min<int64_t>(4, p.m - m0)) {
        case 1: go(std::integral_constant<int, 1>()); break;
        case 2: go(std::integral_constant<int, 2>()); break;
        case 3: go(std::integral_constant<int, 3>()); break;
        default: go(std::integral_constant<int, 4>()); break;
      }
    }
  }
}

// ---- packed kernels (many rows) -------------------------------------------------
//
// The product is computed transposed, C^T[n, m] = sum_k W(n, k) X[m, k]:
// weight values are broadcast from an fp32 copy of the weight block (a plain
// conversion, no transposition of the weights) and the rows of x sit in the
// vector lanes (x is transposed once per task, and x is the smaller operand).
// The C^T tile is transposed back into y at the end.

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

struct PackBuffers {
  static float* make(size_t floats) { return static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float))); }
  std::unique_ptr<float, AlignedFree> xt{make(kKC * kMC)};        // x^T slice [kKC][rows]
  std::unique_ptr<float, AlignedFree> ws{make(kKC * (kNC + 16))};  // weight block in fp32
  std::unique_ptr<float, AlignedFree> ct{make(kNC * kMC)};        // C^T accumulator [kNC][rows]
};

PackBuffers& packBuffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// xt[k * ldt + m] = x[m * ldx + k] for m < rows, k < kk; zero for rows <= m < ldt.
void transposeX(const float* x, int64_t ldx, int64_t rows, int64_t kk, float* xt, int64_t ldt) {
  for (int64_t m = 0; m < ldt; m += 16) {
    for (int64_t k = 0; k < kk; k += 16) {
      const int64_t count = std::min<int64_t>(16, kk - k);
      const __mmask16 mask = tailMask(count);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = m + i < rows ? _mm512_maskz_loadu_ps(mask, x + (m + i) * ldx + k) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t t = 0; t < count; ++t) _mm512_store_ps(xt + (k + t) * ldt + m, r[t]);
    }
  }
}

// y[m, n0 + n] (+)= ct[n * ldt + m] for m < rows, n < nn.
void storeTransposed(const float* ct, int64_t ldt, int64_t rows, int64_t nn, float* y, int64_t ldy, bool accumulate) {
  for (int64_t n = 0; n < nn; n += 16) {
    const __mmask16 nmask = tailMask(nn - n);
    for (int64_t m = 0; m < rows; m += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = n + i < nn ? _mm512_load_ps(ct + (n + i) * ldt + m) : _mm512_setzero_ps();
      transpose16(r);
      const int64_t count = std::min<int64_t>(16, rows - m);
      for (int64_t t = 0; t < count; ++t) {
        float* dst = y + (m + t) * ldy + n;
        __m512 v = r[t];
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(nmask, dst));
        _mm512_mask_storeu_ps(dst, nmask, v);
      }
    }
  }
}

// Rows [m0, m1) x columns [n0, n1). `xt_all`, when given, is x^T of these rows
// for the whole depth ([K][ldt], prepared once for all column tasks);
// otherwise each depth slice is transposed here.
template <class Row>
void packedRange(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* xt_all) {
  PackBuffers& buf = packBuffers();
  float* ws = buf.ws.get();
  float* ct = buf.ct.get();
  const int64_t K = p.k();
  const bool nt = p.layout == WeightLayout::kOutIn;
  const int64_t rows = m1 - m0;
  const int64_t ldt = (rows + 15) / 16 * 16;
  const int64_t nn = n1 - n0;
  const int64_t ws_ld = (nn + 15) / 16 * 16 + 16;  // kInOut: row stride of ws, off the 4 KB period
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kk = std::min(kKC, K - k0);
    const float* xt = xt_all != nullptr ? xt_all + k0 * ldt : buf.xt.get();
    if (xt_all == nullptr) transposeX(p.x + m0 * p.ldx + k0, p.ldx, rows, kk, buf.xt.get(), ldt);
    int64_t a_rs, a_cs;
    if (nt) {
      // ws[n * kKC + k] = W[n0 + n, k0 + k]
      for (int64_t n = 0; n < nn; ++n) {
        Row row;
        row.init(p.w, n0 + n);
        float* dst = ws + n * kKC;
        int64_t k = 0;
        for (; k + 16 <= kk; k += 16) _mm512_store_ps(dst + k, row.load(k0 + k));
        if (k < kk) _mm512_store_ps(dst + k, row.load(k0 + k, tailMask(kk - k)));
      }
      a_rs = kKC;
      a_cs = 1;
    } else {
      // ws[k * ws_ld + n] = W[k0 + k, n0 + n]
      for (int64_t k = 0; k < kk; ++k) {
        Row row;
        row.init(p.w, k0 + k);
        float* dst = ws + k * ws_ld;
        int64_t n = 0;
        for (; n + 16 <= nn; n += 16) _mm512_storeu_ps(dst + n, row.load(n0 + n));
        if (n < nn) _mm512_storeu_ps(dst + n, row.load(n0 + n, tailMask(nn - n)));
      }
      a_rs = 1;
      a_cs = ws_ld;
    }
    for (int64_t m = 0; m < ldt; m += kNR) {
      microKernelRowsN(nn, ws, a_rs, a_cs, xt + m, ldt, kk, ct + m, ldt, static_cast<int>(std::min<int64_t>(kNR, ldt - m)),
                       k0 > 0);
    }
  }
  storeTransposed(ct, ldt, rows, nn, p.y + m0 * p.ldy + n0, p.ldy, p.accumulate);
}

template <class Row>
void rangeFor(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* xt) {
  if (p.m <= kStreamingMaxRows) {
    streamRange<Row>(p, n0, n1);
  } else {
    packedRange<Row>(p, m0, m1, n0, n1, xt);
  }
}

void dispatchRange(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* xt = nullptr) {
  switch (p.w.dtype) {
    case DType::kBF16: rangeFor<RowBF16>(p, m0, m1, n0, n1, xt); break;
    case DType::kF32: rangeFor<RowF32>(p, m0, m1, n0, n1, xt); break;
    case DType::kF16: rangeFor<RowF16>(p, m0, m1, n0, n1, xt); break;
    case DType::kF8E4M3: rangeFor<RowFP8>(p, m0, m1, n0, n1, xt); break;
    default: std::abort();  // the loader admits no other weight dtype
  }
}

struct Task {
  int32_t problem;
  int64_t m0, m1, n0, n1;
  int64_t xt_offset;  // packed tasks: where x^T of rows [m0, m1) starts in the shared buffer; -1: none
};

// x^T of every packed row block, shared by all column tasks of the block.
HostBuffer<float>& transposedInputs() {
  thread_local HostBuffer<float> buffer;  // the calling (engine) thread's
  return buffer;
}

}  // namespace

void linearRange(const LinearProblem& p, int64_t n0, int64_t n1) {
  if (p.m <= 0 || n1 <= n0) return;
  if (p.m <= kStreamingMaxRows) {
    dispatchRange(p, 0, p.m, n0, n1);
    return;
  }
  for (int64_t m = 0; m < p.m; m += kMC) {
    for (int64_t n = n0; n < n1; n += kNC) dispatchRange(p, m, std::min(p.m, m + kMC), n, std::min(n1, n + kNC));
  }
}

void runLinear(ThreadPool& pool, std::span<const LinearProblem> problems, LinearStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  const int threads = pool.numThreads();
  std::vector<Task> tasks;
  std::vector<Task> blocks;  // packed row blocks to transpose first
  int64_t xt_floats = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const LinearProblem& p = problems[i];
    const int64_t N = p.n();
    if (p.m <= 0 || N <= 0) continue;
    if (p.m <= kStreamingMaxRows) {
      // Enough chunks to balance threads; NN chunks are whole 64-column panels.
      int64_t chunk = std::max<int64_t>(kStreamChunkMin, (N + threads * 8 - 1) / (threads * 8));
      chunk = (chunk + 15) / 16 * 16;
      if (p.layout == WeightLayout::kInOut) chunk = 256;  // whole passes of streamNN
      for (int64_t n = 0; n < N; n += chunk) {
        tasks.push_back({static_cast<int32_t>(i), 0, p.m, n, std::min(N, n + chunk), -1});
      }
      continue;
    }
    for (int64_t m = 0; m < p.m; m += kMC) {
      const int64_t m1 = std::min(p.m, m + kMC);
      // Problems reading the same rows of the same x (q_a and kv_a over h,
      // an expert's gate and up, per-head slices of one weight) share x^T.
      int64_t xt_offset = -1;
      for (const Task& b : blocks) {
        const LinearProblem& o = problems[static_cast<size_t>(b.problem)];
        if (o.x == p.x && o.ldx == p.ldx && o.k() == p.k() && b.m0 == m && b.m1 == m1) {
          xt_offset = b.xt_offset;
          break;
        }
      }
      if (xt_offset < 0) {
        xt_offset = xt_floats;
        blocks.push_back({static_cast<int32_t>(i), m, m1, 0, 0, xt_offset});
        xt_floats += (m1 - m + 15) / 16 * 16 * p.k();
      }
      for (int64_t n = 0; n < N; n += kNC) {
        tasks.push_back({static_cast<int32_t>(i), m, m1, n, std::min(N, n + kNC), xt_offset});
      }
    }
  }
  float* xt = blocks.empty() ? nullptr : transposedInputs().ensure(static_cast<size_t>(xt_floats));
  if (!blocks.empty()) {
    pool.parallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t b, int) {
      const Task& blk = blocks[static_cast<size_t>(b)];
      const LinearProblem& p = problems[static_cast<size_t>(blk.problem)];
      transposeX(p.x + blk.m0 * p.ldx, p.ldx, blk.m1 - blk.m0, p.k(), xt + blk.xt_offset, (blk.m1 - blk.m0 + 15) / 16 * 16);
    });
  }
  pool.parallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    const Task& task = tasks[static_cast<size_t>(t)];
    dispatchRange(problems[static_cast<size_t>(task.problem)], task.m0, task.m1, task.n0, task.n1,
                  task.xt_offset >= 0 ? xt + task.xt_offset : nullptr);
  });
  if (stats != nullptr) {
    stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const LinearProblem& p : problems) {
      if (p.m <= 0) continue;
      stats->flops += 2.0 * static_cast<double>(p.m) * p.n() * p.k();
      stats->weight_bytes += static_cast<double>(p.w.bytes());
    }
  }
}

}  // namespace lg::engine::cpu

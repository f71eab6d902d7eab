// Matrix products against checkpoint weights, in fp32, reading the weights'
// stored dtype (BF16, F16, F32, FP8 e4m3 x block scale) straight from the map.
//
// Two kernels sit behind one entry point:
//  - few rows (<= kStreamingMaxRows, decode): a GEMV-style kernel that streams
//    the weights once, one row after another (a sequential stream the hardware
//    prefetchers follow), converting 16 values at a time into registers; bound
//    by memory bandwidth, which is what decode is;
//  - many rows (prefill): the product is computed transposed, C^T = W . x^T:
//    a 256 x 256 block of weights is converted to fp32 (no transposition), x^T
//    is prepared once per 256-row block and shared by all column tasks, and a
//    register-blocked 6 x 64 AVX-512 micro-kernel broadcasts weights against
//    64 rows of x in the vector lanes; compute-bound.
// Rows of x and y may have any stride, so callers can address heads and slices
// without copies.
//
// Thread-safety: runLinear uses the pool and must be called from one thread
// at a time per pool (it keeps x^T in a buffer of the calling thread);
// linearRange is single-threaded and may run concurrently on disjoint outputs.
#pragma once

#include <cstdint>
#include <span>

#include "engine/cpu/thread_pool.h"
#include "engine/model/weight_view.h"

namespace lg::engine::cpu {

enum class WeightLayout {
  kOutIn,  // W is [N, K] (nn.Linear): y = x * W^T
  kInOut,  // W is [K, N]: y = x * W
};

struct LinearProblem {
  const float* x = nullptr;  // [m, K], row stride ldx
  int64_t m = 0;
  int64_t ldx = 0;
  WeightView w;
  WeightLayout layout = WeightLayout::kOutIn;
  float* y = nullptr;  // [m, N], row stride ldy
  int64_t ldy = 0;
  bool accumulate = false;  // y += product instead of y = product

  int64_t k() const { return layout == WeightLayout::kOutIn ? w.cols : w.rows; }
  int64_t n() const { return layout == WeightLayout::kOutIn ? w.rows : w.cols; }
};

// Time, arithmetic and weight bytes of runLinear calls (for profiling and
// benchmarks). weight_bytes counts each problem's weight view once: what a
// product reads from memory when its rows fit one pass (decode batches).
struct LinearStats {
  double seconds = 0;
  double flops = 0;
  double weight_bytes = 0;
};

// Runs all problems in one parallel region (a grouped GEMM: MoE experts,
// q_a and kv_a sharing an input, per-head products). Adds to *stats if given.
void runLinear(ThreadPool& pool, std::span<const LinearProblem> problems, LinearStats* stats = nullptr);

// Columns [n0, n1) of one problem on the calling thread.
void linearRange(const LinearProblem& p, int64_t n0, int64_t n1);

// Rows at or below this count use the streaming (GEMV) kernel.
constexpr int64_t kStreamingMaxRows = 16;

}  // namespace lg::engine::cpu

// Element-wise and row-wise fp32 operations of the forward pass.
#pragma once

#include <cstdint>

#include "engine/cpu/thread_pool.h"
#include "engine/model/weight_view.h"

namespace lg::engine::cpu {

// out = x * rsqrt(mean(x^2) + eps) * w over n values (out may alias x).
void rmsNorm(const float* x, const float* w, float* out, int64_t n, float eps);

// rmsNorm on `rows` rows with strides; parallel when there are many rows.
void rmsNormRows(ThreadPool& pool, const float* x, int64_t ldx, const float* w, float* out, int64_t ldo,
                 int64_t rows, int64_t n, float eps);

// gate[i] = silu(gate[i]) * up[i] for each of `rows` rows of n values.
void siluMulRows(ThreadPool& pool, float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows, int64_t n);

// Row r of a weight matrix converted to fp32 (embedding lookup).
void weightRow(const WeightView& w, int64_t r, float* out);

// Converts n floats to bf16 (round to nearest even) and back.
void floatToBf16Row(const float* in, uint16_t* out, int64_t n);
void bf16ToFloatRow(const uint16_t* in, float* out, int64_t n);

}  // namespace lg::engine::cpu

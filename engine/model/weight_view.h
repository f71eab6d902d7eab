// WeightView: a read-only 2-D window [rows, cols] onto a weight matrix that lives
// in a memory-mapped checkpoint. Kernels read the stored dtype directly and
// convert to fp32 on the fly; nothing is dequantized ahead of time.
//
// A view may be a sub-block of its tensor (for example one head's rows of
// kv_b_proj); row0/col0 locate it inside the tensor so that FP8 block scales,
// which are indexed by the tensor's own coordinates, are looked up correctly.
#pragma once

#include <cstdint>

#include "engine/model/dtype.h"

namespace lg::engine {

struct WeightView {
  DType dtype = DType::kF32;   // kF32, kF16, kBF16 or kF8E4M3
  const uint8_t* data = nullptr;  // element (0, 0) of the whole tensor
  int64_t ld = 0;                 // elements per tensor row
  int64_t row0 = 0;               // the view's first row / column in the tensor
  int64_t col0 = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  // FP8 only: fp32 scales [ceil(tensor_rows / block_rows), scale_ld], one per
  // block_rows x block_cols block; dequantized value = stored value x scale.
  const float* scales = nullptr;
  int64_t scale_ld = 0;
  int block_rows = 128;
  int block_cols = 128;

  bool empty() const { return data == nullptr; }

  // Rows [r, r + n) of this view.
  WeightView rowSlice(int64_t r, int64_t n) const {
    WeightView v = *this;
    v.row0 += r;
    v.rows = n;
    return v;
  }
  // Address of element (r, c) of this view.
  const uint8_t* at(int64_t r, int64_t c) const {
    return data + ((row0 + r) * ld + (col0 + c)) * static_cast<int64_t>(dtypeSize(dtype));
  }
  float scaleAt(int64_t r, int64_t c) const {
    return scales[((row0 + r) / block_rows) * scale_ld + (col0 + c) / block_cols];
  }
  // Exact fp32 value of element (r, c) (slow path; tests and tails).
  float value(int64_t r, int64_t c) const;
  int64_t bytes() const { return rows * cols * static_cast<int64_t>(dtypeSize(dtype)); }
};

}  // namespace lg::engine

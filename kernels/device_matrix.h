// A weight matrix in device memory as the kernels read it: row-major
// [rows, cols], bf16 or FP8 E4M3 with fp32 block scales (DeepSeek V3's
// 128 x 128 blocks: value = stored x scale of its block).
#pragma once

#include <cstdint>

namespace lg::kernels {

enum class WeightType : uint8_t { kBf16, kFp8E4M3 };

struct DeviceMatrix {
  const void* data = nullptr;
  WeightType type = WeightType::kBf16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;                 // elements per row
  const float* scales = nullptr;  // FP8: [ceil(rows / block_rows), scale_ld]
  int64_t scale_ld = 0;
  int32_t block_rows = 128;
  int32_t block_cols = 128;
};

// One routed expert's MLP: down(silu(gate(x)) * up(x)).
struct ExpertMlp {
  DeviceMatrix gate;  // [inter, hidden]
  DeviceMatrix up;    // [inter, hidden]
  DeviceMatrix down;  // [hidden, inter]
};

}  // namespace lg::kernels

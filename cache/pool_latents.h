// Conversions between a block in the pool's own dtype (the bytes
// LatentPool::exportBlocks writes and importBlocks reads) and the f32 values the
// block codec encodes and decodes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "common/bfloat16.h"
#include "engine/latent_pool.h"

namespace lg::cache {

// pool.size() == layout.blockBytes(), out.size() == values per block.
inline void poolToF32(const engine::LatentLayout& layout, std::span<const uint8_t> pool, std::span<float> out) {
  if (layout.dtype == engine::LatentDType::kF32) {
    std::memcpy(out.data(), pool.data(), out.size() * 4);
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, pool.data() + 2 * i, 2);
    out[i] = bf16ToFloat(h);
  }
}

inline void f32ToPool(const engine::LatentLayout& layout, std::span<const float> in, std::span<uint8_t> pool) {
  if (layout.dtype == engine::LatentDType::kF32) {
    std::memcpy(pool.data(), in.data(), in.size() * 4);
    return;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t h = floatToBf16(in[i]);
    std::memcpy(pool.data() + 2 * i, &h, 2);
  }
}

}  // namespace lg::cache

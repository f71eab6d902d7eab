// Conversions between a block in the pool's own dtype (the bytes
// Backend::exportBlock writes and importBlock reads) and the f32 values the
// block codec encodes and decodes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "engine/backend.h"

namespace lg::cache {

inline float bf16ToF32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even, like the engine's BF16 pool
  return static_cast<uint16_t>(u >> 16);
}

// pool.size() == layout.blockBytes(), out.size() == values per block.
inline void poolToF32(const engine::LatentLayout& layout, std::span<const uint8_t> pool, std::span<float> out) {
  if (layout.dtype == engine::LatentDType::kF32) {
    std::memcpy(out.data(), pool.data(), out.size() * 4);
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, pool.data() + 2 * i, 2);
    out[i] = bf16ToF32(h);
  }
}

inline void f32ToPool(const engine::LatentLayout& layout, std::span<const float> in, std::span<uint8_t> pool) {
  if (layout.dtype == engine::LatentDType::kF32) {
    std::memcpy(pool.data(), in.data(), in.size() * 4);
    return;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t h = f32ToBf16(in[i]);
    std::memcpy(pool.data() + 2 * i, &h, 2);
  }
}

}  // namespace lg::cache

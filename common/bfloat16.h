// BF16 <-> float conversion, the one definition every module uses (the
// engine's weights and latent pool, the cache's stored blocks).
//
// floatToBf16 rounds to nearest even and keeps NaN a (quiet) NaN, exactly as
// torch's .to(torch.bfloat16), so latents the engine rounds and latents the
// cache converts agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace lg {

inline float bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace lg

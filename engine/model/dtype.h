// Element types of checkpoint tensors and of the latent cache, with the exact
// scalar conversions to fp32 that every backend must reproduce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace lg::engine {

// Spelled as safetensors spells them ("BF16", "F8_E4M3", ...).
enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

size_t dtypeSize(DType dtype);
std::string_view dtypeName(DType dtype);
std::optional<DType> parseDType(std::string_view name);

inline float bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even (NaN stays NaN), as torch's .to(torch.bfloat16).
inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16ToFloat(uint16_t v);
uint16_t floatToF16(float f);

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities; the
// all-ones pattern is NaN. Exact in fp32.
float fp8e4m3ToFloat(uint8_t v);
// Round to nearest even, saturating at +-448 (the "fn" format has no inf).
uint8_t floatToFp8e4m3(float f);

}  // namespace lg::engine

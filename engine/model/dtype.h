// Element types of checkpoint tensors and of the latent cache, with the exact
// scalar conversions to fp32 that every backend must reproduce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/bfloat16.h"

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

// bf16ToFloat / floatToBf16: common/bfloat16.h.
float f16ToFloat(uint16_t v);
uint16_t floatToF16(float f);

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities; the
// all-ones pattern is NaN. Exact in fp32.
float fp8e4m3ToFloat(uint8_t v);
// Round to nearest even, saturating at +-448 (the "fn" format has no inf).
uint8_t floatToFp8e4m3(float f);

}  // namespace lg::engine

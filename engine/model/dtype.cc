#include "engine/model/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace lg::engine {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 12> kDTypes = {{
    {DType::kF64, "F64", 8},
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
}};

std::array<float, 256> makeFp8Table() {
  std::array<float, 256> t{};
  for (int v = 0; v < 256; ++v) {
    const int sign = v >> 7;
    const int exponent = (v >> 3) & 0xf;
    const int mantissa = v & 0x7;
    float mag;
    if (exponent == 0xf && mantissa == 0x7) {
      mag = std::nanf("");
    } else if (exponent == 0) {
      mag = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
    } else {
      mag = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    }
    t[static_cast<size_t>(v)] = sign ? -mag : mag;
  }
  return t;
}

const std::array<float, 256>& fp8Table() {
  static const std::array<float, 256> table = makeFp8Table();
  return table;
}

}  // namespace

size_t dtypeSize(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

std::string_view dtypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

float f16ToFloat(uint16_t v) {
  const int sign = v >> 15;
  const int exponent = (v >> 10) & 0x1f;
  const int mantissa = v & 0x3ff;
  float mag;
  if (exponent == 0) {
    mag = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 0x1f) {
    mag = mantissa ? std::nanf("") : INFINITY;
  } else {
    mag = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return sign ? -mag : mag;
}

uint16_t floatToF16(float f) {
  // Only used to write test and preset checkpoints; clarity over speed.
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: multiples of 2^-24
    const float q = std::nearbyint(a * std::ldexp(1.0f, 24));
    return sign | static_cast<uint16_t>(q);
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint(m * 2048.0f);  // 11 significant bits
  if (q == 2048.0f) {
    q = 1024.0f;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 0x1f) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(q) - 1024));
}

float fp8e4m3ToFloat(uint8_t v) { return fp8Table()[v]; }

uint8_t floatToFp8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const auto& table = fp8Table();
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.0f);
  // Nearest of the 127 non-negative finite codes, ties to the even code.
  int best = 0;
  float best_err = INFINITY;
  for (int v = 0; v < 0x7f; ++v) {
    const float err = std::fabs(table[static_cast<size_t>(v)] - a);
    if (err < best_err || (err == best_err && (v & 1) == 0)) {
      best = v;
      best_err = err;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

}  // namespace lg::engine

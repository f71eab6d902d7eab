// Lower-case hexadecimal text of bytes: "00ff..." (two digits a byte), for
// digests, ids and keys shown as text.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lg {

inline std::string hexLower(const void* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::string out(size * 2, '\0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}
inline std::string hexLower(std::string_view bytes) { return hexLower(bytes.data(), bytes.size()); }

}  // namespace lg

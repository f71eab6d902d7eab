#include "text/tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace lg::text::byte_level {
namespace {

struct Maps {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every alphabet character is < U+0200

  Maps() {
    to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      to_char[static_cast<size_t>(b)] = c;
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const Maps& maps() {
  static const Maps kMaps;
  return kMaps;
}

}  // namespace

char32_t byteToChar(uint8_t byte) { return maps().to_char[byte]; }

int charToByte(char32_t c) { return c < 512 ? maps().to_byte[c] : -1; }

std::optional<std::string> decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const char32_t c = utf8::decode(text.data() + i, &len);
    const int b = charToByte(c);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

}  // namespace lg::text::byte_level

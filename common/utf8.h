// UTF-8 helpers shared by the tokenizer, the chat template and the gateway:
// validation that names the first bad byte, decoding of already-validated text,
// bounds-checked decoding of arbitrary bytes, and the lossy conversion that
// `tokenizers` applies when decoding ids (Rust's String::from_utf8_lossy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lg::utf8 {

// Byte offset where the first ill-formed (or truncated) UTF-8 sequence starts,
// or nullopt when `text` is valid. Overlong forms, surrogates and values above
// U+10FFFF are ill-formed; NUL is a valid character.
std::optional<size_t> firstInvalid(std::string_view text);

// Length of the well-formed sequence starting at p[0], given its lead byte.
// Precondition: valid UTF-8.
inline size_t sequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xe0) return 2;
  if (lead < 0xf0) return 3;
  return 4;
}

// Decodes one character of valid UTF-8 at `p` and stores its length.
inline char32_t decode(const char* p, size_t* length) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  const uint8_t b0 = u[0];
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  if (b0 < 0xe0) {
    *length = 2;
    return (char32_t{b0 & 0x1fu} << 6) | (u[1] & 0x3fu);
  }
  if (b0 < 0xf0) {
    *length = 3;
    return (char32_t{b0 & 0x0fu} << 12) | (char32_t{u[1] & 0x3fu} << 6) | (u[2] & 0x3fu);
  }
  *length = 4;
  return (char32_t{b0 & 0x07u} << 18) | (char32_t{u[1] & 0x3fu} << 12) | (char32_t{u[2] & 0x3fu} << 6) |
         (u[3] & 0x3fu);
}

// Start offset of the character that ends right before `end` (valid UTF-8).
inline size_t previousStart(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(text[i]) & 0xc0) == 0x80) --i;
  return i;
}

inline bool isValid(std::string_view text) { return !firstInvalid(text).has_value(); }

// Bounds-checked decode of the character at text[pos], advancing pos past it.
// Any byte that does not start a complete well-formed sequence decodes as
// itself and advances by one, so loops over arbitrary bytes always progress.
char32_t decodeAt(std::string_view text, size_t& pos);

// Number of characters in valid UTF-8 text.
size_t countCodePoints(std::string_view text);

void append(std::string& out, char32_t cp);

// Appends `bytes` to `out`, replacing each maximal ill-formed subsequence with
// U+FFFD exactly as Rust's String::from_utf8_lossy (Unicode's "substitution of
// maximal subparts").
void appendLossy(std::string& out, std::string_view bytes);

// For streaming: the length of the longest prefix of `bytes` that can be
// converted now. Only a trailing sequence that is well-formed so far but
// incomplete is held back; ill-formed bytes are not (they become U+FFFD).
size_t completePrefix(std::string_view bytes);

}  // namespace lg::utf8

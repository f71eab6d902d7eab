// The byte-level alphabet of GPT-2 style BPE: each of the 256 byte values is
// written as one printable character in vocab and merges (printable Latin-1
// maps to itself, the rest to U+0100 and up, e.g. ' ' -> 'Ġ').
//
// LatentGate runs BPE on raw bytes, so these maps are only used to translate
// tokenizer.json strings at load time and added-token contents at decode time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lg::text::byte_level {

char32_t byteToChar(uint8_t byte);

// The byte a byte-level character stands for, or -1.
int charToByte(char32_t c);

// Raw bytes of a byte-level string when every character belongs to the
// alphabet, else nullopt (the library's ByteLevel decoder then keeps the
// token's own UTF-8, which is what decode does with such tokens).
// Precondition: `text` is valid UTF-8.
std::optional<std::string> decode(std::string_view text);

}  // namespace lg::text::byte_level

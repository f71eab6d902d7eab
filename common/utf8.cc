#include "common/utf8.h"

#include <cstring>

namespace lg::utf8 {
namespace {

// Length of the well-formed sequence at bytes[i], 0 if ill-formed there, or
// -(k) when the k remaining bytes are a well-formed but truncated prefix.
// Follows Table 3-7 of the Unicode standard (well-formed byte sequences).
int classify(const uint8_t* p, size_t n) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    need = 1;
  } else if (b0 == 0xe0) {
    need = 2, lo = 0xa0;
  } else if ((b0 >= 0xe1 && b0 <= 0xec) || b0 == 0xee || b0 == 0xef) {
    need = 2;
  } else if (b0 == 0xed) {
    need = 2, hi = 0x9f;
  } else if (b0 == 0xf0) {
    need = 3, lo = 0x90;
  } else if (b0 >= 0xf1 && b0 <= 0xf3) {
    need = 3;
  } else if (b0 == 0xf4) {
    need = 3, hi = 0x8f;
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= n) return -static_cast<int>(k);
    const uint8_t lower = k == 1 ? lo : 0x80;
    const uint8_t upper = k == 1 ? hi : 0xbf;
    if (p[k] < lower || p[k] > upper) return 0;
  }
  return static_cast<int>(need + 1);
}

// Bytes consumed by one U+FFFD at an ill-formed position: the maximal prefix of
// a well-formed sequence (at least one byte).
size_t maximalSubpart(const uint8_t* p, size_t n) {
  const int c = classify(p, n);
  if (c < 0) return static_cast<size_t>(-c);
  // classify() stopped at the first bad continuation byte; everything before
  // it was a valid prefix.
  const uint8_t b0 = p[0];
  if (b0 < 0xc2 || b0 > 0xf4) return 1;
  size_t k = 1;
  const size_t need = b0 < 0xe0 ? 1 : b0 < 0xf0 ? 2 : 3;
  while (k <= need && k < n) {
    const uint8_t lower = k == 1 ? (b0 == 0xe0 ? 0xa0 : b0 == 0xf0 ? 0x90 : 0x80) : 0x80;
    const uint8_t upper = k == 1 ? (b0 == 0xed ? 0x9f : b0 == 0xf4 ? 0x8f : 0xbf) : 0xbf;
    if (p[k] < lower || p[k] > upper) break;
    ++k;
  }
  return k;
}

}  // namespace

std::optional<size_t> firstInvalid(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs dominate real text: check 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int c = classify(p + i, n - i);
    if (c <= 0) return i;  // the sequence starting here is ill-formed or truncated
    i += static_cast<size_t>(c);
  }
  return std::nullopt;
}

char32_t decodeAt(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  const int c = classify(p, text.size() - pos);
  if (c <= 1) {  // ASCII, or a byte that does not start a complete sequence
    ++pos;
    return p[0];
  }
  size_t length = 0;
  const char32_t cp = decode(reinterpret_cast<const char*>(p), &length);
  pos += length;
  return cp;
}

size_t countCodePoints(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

void appendLossy(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run = 0;  // start of the pending valid run
  while (i < n) {
    const int c = p[i] < 0x80 ? 1 : classify(p + i, n - i);
    if (c > 0) {
      i += static_cast<size_t>(c);
      continue;
    }
    out.append(bytes.substr(run, i - run));
    out.append("\xef\xbf\xbd");
    i += maximalSubpart(p + i, n - i);
    run = i;
  }
  out.append(bytes.substr(run, n - run));
}

size_t completePrefix(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // Only the last three bytes can start an incomplete sequence.
  const size_t from = n > 3 ? n - 3 : 0;
  for (size_t i = from; i < n; ++i) {
    if (p[i] < 0xc2 || p[i] > 0xf4) continue;  // not a lead byte
    if (classify(p + i, n - i) < 0) return i;
  }
  return n;
}

}  // namespace lg::utf8

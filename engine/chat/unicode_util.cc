#include "engine/chat/unicode_util.h"

namespace lg::engine::jinja {

char32_t decodeUtf8(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  auto cont = [&](size_t i) -> int {
    if (pos + i >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    return (b & 0xC0) == 0x80 ? (b & 0x3F) : -1;
  };
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0) {
    const int c1 = cont(1);
    if (c1 >= 0) {
      pos += 2;
      return (static_cast<char32_t>(b0 & 0x1F) << 6) | static_cast<char32_t>(c1);
    }
  } else if ((b0 & 0xF0) == 0xE0) {
    const int c1 = cont(1), c2 = cont(2);
    if (c1 >= 0 && c2 >= 0) {
      pos += 3;
      return (static_cast<char32_t>(b0 & 0x0F) << 12) | (static_cast<char32_t>(c1) << 6) |
             static_cast<char32_t>(c2);
    }
  } else if ((b0 & 0xF8) == 0xF0) {
    const int c1 = cont(1), c2 = cont(2), c3 = cont(3);
    if (c1 >= 0 && c2 >= 0 && c3 >= 0) {
      pos += 4;
      return (static_cast<char32_t>(b0 & 0x07) << 18) | (static_cast<char32_t>(c1) << 12) |
             (static_cast<char32_t>(c2) << 6) | static_cast<char32_t>(c3);
    }
  }
  pos += 1;
  return b0;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool isValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    char32_t cp = 0;
    if (b0 < 0x80) {
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      n = 1;
      cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 2;
      cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 3;
      cp = b0 & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and out-of-range values are invalid.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

size_t countCodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool isPyWhitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool isPyPrintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp >= 0x80 && cp <= 0xA0) return false;  // C1 controls and NBSP (Zs)
  if (cp == 0xAD) return false;                // soft hyphen (Cf)
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB)) {
    return false;  // separators and format characters
  }
  if (cp == 0x061C || cp == 0x180E || (cp >= 0x0600 && cp <= 0x0605) || cp == 0x06DD || cp == 0x070F) {
    return false;
  }
  if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xE000 && cp <= 0xF8FF)) return false;  // Cs, Co
  if (cp >= 0xF0000) return false;                                                         // planes 15-16: Co
  if (cp == 0xFFFE || cp == 0xFFFF || (cp >= 0xE0000 && cp <= 0xE0FFF)) return false;      // Cn / tags (Cf)
  return cp <= 0x10FFFF;
}

namespace {

// Latin Extended-A alternates upper/lower in pairs except a few ranges.
bool latinExtAPairUpper(char32_t cp) {
  if (cp >= 0x100 && cp <= 0x137) return cp % 2 == 0;
  if (cp >= 0x139 && cp <= 0x148) return cp % 2 == 1;
  if (cp >= 0x14A && cp <= 0x177) return cp % 2 == 0;
  if (cp == 0x179 || cp == 0x17B || cp == 0x17D) return true;
  return false;
}
bool latinExtAPairLower(char32_t cp) {
  if (cp >= 0x101 && cp <= 0x137) return cp % 2 == 1;
  if (cp >= 0x13A && cp <= 0x148) return cp % 2 == 0;
  if (cp >= 0x14B && cp <= 0x177) return cp % 2 == 1;
  if (cp == 0x17A || cp == 0x17C || cp == 0x17E) return true;
  return false;
}

}  // namespace

char32_t toLowerCp(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0xC0) return cp;
  if ((cp >= 0xC0 && cp <= 0xDE) && cp != 0xD7) return cp + 32;
  if (latinExtAPairUpper(cp)) return cp + 1;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 32;  // Greek
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;  // Cyrillic
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

char32_t toUpperCp(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0xB5) return cp;
  if (cp == 0xB5) return 0x39C;
  if (cp == 0x131) return 'I';
  if (cp == 0x17F) return 'S';
  if ((cp >= 0xE0 && cp <= 0xFE) && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (latinExtAPairLower(cp)) return cp - 1;
  if (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2) return cp - 32;  // Greek
  if (cp == 0x3C2) return 0x3A3;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;  // Cyrillic
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

void appendLower(std::string& out, char32_t cp) {
  if (cp == 0x130) {  // İ -> i + combining dot above
    out += "i\xCC\x87";
    return;
  }
  appendUtf8(out, toLowerCp(cp));
}

void appendUpper(std::string& out, char32_t cp) {
  switch (cp) {
    case 0xDF: out += "SS"; return;
    case 0x149: out += "\xCA\xBCN"; return;  // ŉ -> ʼN
    case 0xFB00: out += "FF"; return;
    case 0xFB01: out += "FI"; return;
    case 0xFB02: out += "FL"; return;
    case 0xFB03: out += "FFI"; return;
    case 0xFB04: out += "FFL"; return;
    case 0xFB05:
    case 0xFB06: out += "ST"; return;
    default: appendUtf8(out, toUpperCp(cp));
  }
}

}  // namespace lg::engine::jinja

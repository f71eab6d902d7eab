#include "text/chat/unicode_util.h"

namespace lg::text::jinja {

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
  utf8::append(out, toLowerCp(cp));
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
    default: utf8::append(out, toUpperCp(cp));
  }
}

}  // namespace lg::text::jinja

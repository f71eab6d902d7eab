#include "text/tokenizer/deepseek_v3_fast.h"

#include <array>
#include <cstdint>

#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"

namespace lg::text {

const std::string_view kDeepSeekV3Patterns[3] = {
    "\\p{N}{1,3}",
    "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

namespace {

// What the third pattern needs to know about a character. White_Space takes
// precedence over the category (U+0085 is Cc but \s).
enum Class : uint8_t { kLetter, kMark, kNumber, kPunct, kSymbol, kSpace, kNewline, kOther };

struct ClassTable {
  std::array<uint8_t, 256> by_properties{};  // property byte -> Class
  std::array<uint8_t, 128> ascii{};

  ClassTable() {
    for (int p = 0; p < 256; ++p) {
      const auto category = static_cast<unicode::Category>(p & unicode::kCategoryBits);
      uint8_t c = kOther;
      if (p & unicode::kWhiteSpaceBit) {
        c = kSpace;
      } else if (category < unicode::kCategoryCount) {
        const unicode::CategoryMask bit = unicode::bit(category);
        if (bit & unicode::kLetter) c = kLetter;
        else if (bit & unicode::kMark) c = kMark;
        else if (bit & unicode::kNumber) c = kNumber;
        else if (bit & unicode::kPunctuation) c = kPunct;
        else if (bit & unicode::kSymbol) c = kSymbol;
      }
      by_properties[static_cast<size_t>(p)] = c;
    }
    const unicode::Table& t = unicode::table();
    for (char32_t cp = 0; cp < 128; ++cp) ascii[cp] = by_properties[t.properties(cp)];
    ascii['\r'] = kNewline;
    ascii['\n'] = kNewline;
  }
};

const ClassTable& classTable() {
  static const ClassTable kTable;
  return kTable;
}

bool isCjk(char32_t cp) { return (cp >= 0x4e00 && cp <= 0x9fa5) || (cp >= 0x3040 && cp <= 0x30ff); }
bool isAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool isAsciiPunct(char32_t c) {
  return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) || (c >= 0x7b && c <= 0x7e);
}

class Scanner {
 public:
  Scanner(std::string_view text, PieceCallback sink)
      : text_(text), sink_(sink), classes_(classTable()), unicode_(unicode::table()) {}

  // Decodes the character at i: its code point, length and class.
  char32_t at(size_t i, size_t* len, uint8_t* cls) const {
    const auto b = static_cast<uint8_t>(text_[i]);
    if (b < 0x80) {
      *len = 1;
      *cls = classes_.ascii[b];
      return b;
    }
    const char32_t cp = utf8::decode(text_.data() + i, len);
    *cls = classes_.by_properties[unicode_.properties(cp)];
    return cp;
  }

  Status run() {
    // Split 1 and 2 as one scan: maximal runs of numbers (cut into threes),
    // of CJK-range characters, and of everything else. The numbers' pieces are
    // final (the later patterns match nothing in them: no number is a letter,
    // mark, punctuation, symbol or space); the other runs go through pattern 3
    // as separate subjects, which is what the library's successive Splits do.
    enum Run { kNone, kDigits, kCjk, kRest };
    Run run = kNone;
    size_t run_start = 0;
    size_t digits = 0;  // characters in the current group of up to three
    for (size_t i = 0; i < text_.size();) {
      size_t len = 0;
      uint8_t cls = 0;
      const char32_t cp = at(i, &len, &cls);
      const Run kind = cls == kNumber ? kDigits : isCjk(cp) ? kCjk : kRest;
      if (kind != run || (kind == kDigits && digits == 3)) {
        LG_RETURN_IF_ERROR(finishRun(run, run_start, i));
        run = kind;
        run_start = i;
        digits = 0;
      }
      if (kind == kDigits) ++digits;
      i += len;
    }
    return finishRun(run, run_start, text_.size());
  }

 private:
  Status finishRun(int run, size_t start, size_t end) {
    if (run == 0 || start == end) return Status::ok();
    if (run == 1) return sink_(text_.substr(start, end - start));
    return pattern3(start, end);
  }

  // Pattern 3 over the subject text_[start, end): matches and the gaps between
  // them, all kept (Isolated).
  Status pattern3(size_t start, size_t end) {
    size_t gap = start;
    for (size_t i = start; i < end;) {
      const size_t match_end = matchAt(i, end);
      if (match_end == 0) {
        size_t len = 0;
        uint8_t cls = 0;
        at(i, &len, &cls);
        i += len;
        continue;
      }
      if (gap < i) LG_RETURN_IF_ERROR(sink_(text_.substr(gap, i - gap)));
      LG_RETURN_IF_ERROR(sink_(text_.substr(i, match_end - i)));
      i = match_end;
      gap = i;
    }
    if (gap < end) return sink_(text_.substr(gap, end - gap));
    return Status::ok();
  }

  // End of the leftmost-first match of pattern 3 starting exactly at i, or 0.
  size_t matchAt(size_t i, size_t end) const {
    size_t len0 = 0;
    uint8_t cls0 = 0;
    const char32_t c0 = at(i, &len0, &cls0);
    const size_t after0 = i + len0;
    size_t len1 = 0;
    uint8_t cls1 = kOther;
    char32_t c1 = 0;
    if (after0 < end) c1 = at(after0, &len1, &cls1);

    // 1: [!"#...~][A-Za-z]+
    if (c0 < 0x80 && isAsciiPunct(c0) && c1 < 0x80 && after0 < end && isAsciiLetter(static_cast<char>(c1))) {
      size_t j = after0;
      while (j < end && isAsciiLetter(text_[j])) ++j;
      return j;
    }
    // 2: [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ . A letter or mark at i starts
    // the run itself (a mark may also fill the optional slot, with the same
    // end); any other character outside \r \n L P S may lead one.
    if (cls0 == kLetter || cls0 == kMark) return letterRun(i, end);
    if (cls0 != kNewline && cls0 != kPunct && cls0 != kSymbol && (cls1 == kLetter || cls1 == kMark)) {
      return letterRun(after0, end);
    }
    // 3: ' '?[\p{P}\p{S}]+[\r\n]*
    if (c0 == ' ' && (cls1 == kPunct || cls1 == kSymbol)) return newlines(punctRun(after0, end), end);
    if (cls0 == kPunct || cls0 == kSymbol) return newlines(punctRun(i, end), end);
    // 4-6 start with whitespace.
    if (cls0 != kSpace && cls0 != kNewline) return 0;
    size_t j = i;
    size_t last_start = i;
    size_t newline_end = 0;
    while (j < end) {
      size_t len = 0;
      uint8_t cls = 0;
      at(j, &len, &cls);
      if (cls != kSpace && cls != kNewline) break;
      if (cls == kNewline) newline_end = j + len;
      last_start = j;
      j += len;
    }
    // 4: \s*[\r\n]+ ends after the last \r or \n of the run.
    if (newline_end != 0) return newline_end;
    // 5: \s+(?!\S) takes the run to the subject's end, or all but its last
    // character before a non-space.
    if (j == end) return j;
    if (last_start > i) return last_start;
    // 6: \s+ (a single space before a non-space).
    return j;
  }

  size_t letterRun(size_t j, size_t end) const {
    while (j < end) {
      size_t len = 0;
      uint8_t cls = 0;
      at(j, &len, &cls);
      if (cls != kLetter && cls != kMark) break;
      j += len;
    }
    return j;
  }

  size_t punctRun(size_t j, size_t end) const {
    while (j < end) {
      size_t len = 0;
      uint8_t cls = 0;
      at(j, &len, &cls);
      if (cls != kPunct && cls != kSymbol) break;
      j += len;
    }
    return j;
  }

  size_t newlines(size_t j, size_t end) const {
    while (j < end && (text_[j] == '\r' || text_[j] == '\n')) ++j;
    return j;
  }

  std::string_view text_;
  PieceCallback sink_;
  const ClassTable& classes_;
  const unicode::Table& unicode_;
};

}  // namespace

Status deepSeekV3PreTokenize(std::string_view text, PieceCallback sink) { return Scanner(text, sink).run(); }

}  // namespace lg::text

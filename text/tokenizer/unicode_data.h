// Unicode character properties for the tokenizer, generated from the Unicode
// 16.0.0 character database (the version of the Oniguruma inside the reference
// `tokenizers` 0.23.2) by scripts/tokenizer/gen_unicode_tables.mjs.
//
// Every code point maps to one property byte: its general category (5 bits),
// White_Space and Alphabetic. Lookups are two table reads; the tables are built
// once, on first use, from the run-length list in unicode_data.inc.
//
// Thread-safety: all functions may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace lg::text::unicode {

// General categories, in the generator's order.
enum Category : uint8_t {
  kLu, kLl, kLt, kLm, kLo,
  kMn, kMc, kMe,
  kNd, kNl, kNo,
  kPc, kPd, kPs, kPe, kPi, kPf, kPo,
  kSm, kSc, kSk, kSo,
  kZs, kZl, kZp,
  kCc, kCf, kCs, kCo, kCn,
  kCategoryCount
};

inline constexpr uint8_t kCategoryBits = 0x1f;
inline constexpr uint8_t kWhiteSpaceBit = 0x20;
inline constexpr uint8_t kAlphabeticBit = 0x40;
inline constexpr char32_t kMaxCodePoint = 0x10ffff;

// Sets of categories as bit masks (bit c for category c).
using CategoryMask = uint32_t;
constexpr CategoryMask bit(Category c) { return CategoryMask{1} << c; }
inline constexpr CategoryMask kLetter = bit(kLu) | bit(kLl) | bit(kLt) | bit(kLm) | bit(kLo);
inline constexpr CategoryMask kCasedLetter = bit(kLu) | bit(kLl) | bit(kLt);
inline constexpr CategoryMask kMark = bit(kMn) | bit(kMc) | bit(kMe);
inline constexpr CategoryMask kNumber = bit(kNd) | bit(kNl) | bit(kNo);
inline constexpr CategoryMask kPunctuation =
    bit(kPc) | bit(kPd) | bit(kPs) | bit(kPe) | bit(kPi) | bit(kPf) | bit(kPo);
inline constexpr CategoryMask kSymbol = bit(kSm) | bit(kSc) | bit(kSk) | bit(kSo);
inline constexpr CategoryMask kSeparator = bit(kZs) | bit(kZl) | bit(kZp);
inline constexpr CategoryMask kOther = bit(kCc) | bit(kCf) | bit(kCs) | bit(kCo) | bit(kCn);

// The two-stage lookup table. Obtain once with table() and keep the reference
// in hot loops.
class Table {
 public:
  uint8_t properties(char32_t cp) const {
    if (cp > kMaxCodePoint) return kCn;
    return blocks_[static_cast<size_t>(stage1_[cp >> 8]) * 256 + (cp & 0xff)];
  }
  Category category(char32_t cp) const { return static_cast<Category>(properties(cp) & kCategoryBits); }
  bool in(char32_t cp, CategoryMask mask) const { return (mask >> category(cp)) & 1; }
  bool isWhiteSpace(char32_t cp) const { return properties(cp) & kWhiteSpaceBit; }
  bool isAlphabetic(char32_t cp) const { return properties(cp) & kAlphabeticBit; }

 private:
  friend const Table& table();
  Table();
  std::vector<uint16_t> stage1_;
  std::vector<uint8_t> blocks_;
};

const Table& table();

// The general category or category group named as in Oniguruma's \p{..}:
// short ("Lu", "L", "LC") or long ("Uppercase_Letter", "Letter") names,
// case-insensitive, ignoring spaces, '-' and '_'.
std::optional<CategoryMask> categoryMaskByName(std::string_view name);

// Inclusive code point ranges, ascending and disjoint.
using RangeList = std::vector<std::pair<char32_t, char32_t>>;

// The code points whose property byte satisfies `pred` (a test of all 0x110000).
template <typename Pred>
RangeList rangesWhere(Pred pred) {
  RangeList out;
  const Table& t = table();
  for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (!pred(cp, t)) continue;
    if (!out.empty() && out.back().second + 1 == cp) {
      out.back().second = cp;
    } else {
      out.emplace_back(cp, cp);
    }
  }
  return out;
}

// Oniguruma's \w as the reference's regex engine applies it: Alphabetic,
// marks, decimal numbers, connector punctuation and, a quirk of its Latin-1
// tables, the six Latin-1 No characters (superscripts and fractions).
bool isOnigWord(char32_t cp);

// Rust's regex \w, used by the reference for added tokens' single_word check:
// Alphabetic, marks, decimal numbers, connector punctuation, Join_Control.
bool isRustRegexWord(char32_t cp);

// Rust's char::is_numeric, used by the reference's Digits pre-tokenizer. Its
// tables are Unicode 17.0 (unicode_rust_numeric.inc holds the difference).
bool isRustNumeric(char32_t cp);

// Complement within [0, 0x10FFFF].
RangeList complement(const RangeList& ranges);

}  // namespace lg::text::unicode

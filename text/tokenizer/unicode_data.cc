#include "text/tokenizer/unicode_data.h"

#include <array>
#include <cctype>
#include <map>
#include <string>

namespace lg::text::unicode {
namespace {

struct Run {
  char32_t first;
  uint8_t value;
};

constexpr Run kRuns[] = {
#include "text/tokenizer/unicode_data.inc"
};

struct Range {
  char32_t first;
  char32_t last;
};

constexpr Range kRustNumericExtra[] = {
#include "text/tokenizer/unicode_rust_numeric.inc"
};

}  // namespace

Table::Table() : stage1_(0x1100) {
  // Expand the runs block by block (256 code points) and share identical
  // blocks: about 300 distinct blocks cover the whole code space.
  std::map<std::array<uint8_t, 256>, uint16_t> seen;
  size_t run = 0;
  constexpr size_t kRunCount = sizeof(kRuns) / sizeof(kRuns[0]);
  for (size_t block = 0; block < stage1_.size(); ++block) {
    std::array<uint8_t, 256> values{};
    for (size_t k = 0; k < 256; ++k) {
      const char32_t cp = static_cast<char32_t>(block * 256 + k);
      while (run + 1 < kRunCount && kRuns[run + 1].first <= cp) ++run;
      values[k] = kRuns[run].value;
    }
    auto [it, inserted] = seen.emplace(values, static_cast<uint16_t>(seen.size()));
    if (inserted) blocks_.insert(blocks_.end(), values.begin(), values.end());
    stage1_[block] = it->second;
  }
}

const Table& table() {
  static const Table kTable;
  return kTable;
}

std::optional<CategoryMask> categoryMaskByName(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  struct Entry {
    const char* short_name;
    const char* long_name;
    CategoryMask mask;
  };
  static const Entry kEntries[] = {
      {"lu", "uppercaseletter", bit(kLu)}, {"ll", "lowercaseletter", bit(kLl)},
      {"lt", "titlecaseletter", bit(kLt)}, {"lm", "modifierletter", bit(kLm)},
      {"lo", "otherletter", bit(kLo)}, {"mn", "nonspacingmark", bit(kMn)},
      {"mc", "spacingmark", bit(kMc)}, {"me", "enclosingmark", bit(kMe)},
      {"nd", "decimalnumber", bit(kNd)}, {"nl", "letternumber", bit(kNl)},
      {"no", "othernumber", bit(kNo)}, {"pc", "connectorpunctuation", bit(kPc)},
      {"pd", "dashpunctuation", bit(kPd)}, {"ps", "openpunctuation", bit(kPs)},
      {"pe", "closepunctuation", bit(kPe)}, {"pi", "initialpunctuation", bit(kPi)},
      {"pf", "finalpunctuation", bit(kPf)}, {"po", "otherpunctuation", bit(kPo)},
      {"sm", "mathsymbol", bit(kSm)}, {"sc", "currencysymbol", bit(kSc)},
      {"sk", "modifiersymbol", bit(kSk)}, {"so", "othersymbol", bit(kSo)},
      {"zs", "spaceseparator", bit(kZs)}, {"zl", "lineseparator", bit(kZl)},
      {"zp", "paragraphseparator", bit(kZp)}, {"cc", "control", bit(kCc)},
      {"cf", "format", bit(kCf)}, {"cs", "surrogate", bit(kCs)},
      {"co", "privateuse", bit(kCo)}, {"cn", "unassigned", bit(kCn)},
      {"l", "letter", kLetter}, {"lc", "casedletter", kCasedLetter},
      {"m", "mark", kMark}, {"n", "number", kNumber},
      {"p", "punctuation", kPunctuation}, {"s", "symbol", kSymbol},
      {"z", "separator", kSeparator}, {"c", "other", kOther},
  };
  for (const Entry& e : kEntries) {
    if (key == e.short_name || key == e.long_name) return e.mask;
  }
  return std::nullopt;
}

bool isOnigWord(char32_t cp) {
  const Table& t = table();
  if (t.isAlphabetic(cp) || t.in(cp, kMark | bit(kNd) | bit(kPc))) return true;
  return cp == 0xb2 || cp == 0xb3 || cp == 0xb9 || cp == 0xbc || cp == 0xbd || cp == 0xbe;
}

bool isRustRegexWord(char32_t cp) {
  const Table& t = table();
  return t.isAlphabetic(cp) || t.in(cp, kMark | bit(kNd) | bit(kPc)) || cp == 0x200c || cp == 0x200d;
}

bool isRustNumeric(char32_t cp) {
  if (table().in(cp, kNumber)) return true;
  for (const Range& r : kRustNumericExtra) {
    if (cp >= r.first && cp <= r.last) return true;
  }
  return false;
}

RangeList complement(const RangeList& ranges) {
  RangeList out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

}  // namespace lg::text::unicode

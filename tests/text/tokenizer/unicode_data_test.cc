// The Unicode tables against the reference library (a per-code-point probe
// golden of tokenizers 0.23.2) and against PCRE2, over every code point.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include "text/tokenizer/onig_translate.h"
#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"
#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

using nlohmann::json;
using unicode::Table;

bool isSurrogate(char32_t cp) { return cp >= 0xd800 && cp <= 0xdfff; }

const json& probes() {
  static const json kProbes = readJsonFixture("tokenizer-unicode-probe.json")["probes"];
  return kProbes;
}

std::vector<bool> probeSet(const std::string& name) {
  std::vector<bool> set(unicode::kMaxCodePoint + 1, false);
  for (const json& r : probes().at(name)) {
    for (char32_t cp = r[0].get<char32_t>(); cp <= r[1].get<char32_t>(); ++cp) set[cp] = true;
  }
  return set;
}

template <typename Pred>
void expectProbe(const std::string& name, Pred pred) {
  SCOPED_TRACE(name);
  const std::vector<bool> expected = probeSet(name);
  size_t mismatches = 0;
  for (char32_t cp = 0; cp <= unicode::kMaxCodePoint; ++cp) {
    if (isSurrogate(cp)) continue;
    if (expected[cp] != pred(cp)) {
      if (++mismatches <= 5) ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << ": reference " << expected[cp];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(UnicodeData, CategoriesMatchTheReferenceRegexEngine) {
  const Table& t = unicode::table();
  const char* names[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
                         "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  for (int c = 0; c < unicode::kCategoryCount; ++c) {
    if (std::string(names[c]) == "Cs") continue;  // surrogates cannot be probed
    const auto category = static_cast<unicode::Category>(c);
    expectProbe(std::string("regex:\\p{") + names[c] + "}", [&](char32_t cp) { return t.category(cp) == category; });
  }
  const std::pair<const char*, unicode::CategoryMask> groups[] = {
      {"L", unicode::kLetter}, {"M", unicode::kMark}, {"N", unicode::kNumber}, {"P", unicode::kPunctuation},
      {"S", unicode::kSymbol}, {"Z", unicode::kSeparator}, {"C", unicode::kOther}};
  for (const auto& [name, mask] : groups) {
    expectProbe(std::string("regex:\\p{") + name + "}", [&, m = mask](char32_t cp) { return t.in(cp, m); });
  }
}

TEST(UnicodeData, PropertiesMatchTheReference) {
  const Table& t = unicode::table();
  expectProbe("regex:\\s", [&](char32_t cp) { return t.isWhiteSpace(cp); });
  expectProbe("regex:\\p{White_Space}", [&](char32_t cp) { return t.isWhiteSpace(cp); });
  expectProbe("regex:\\p{Alphabetic}", [&](char32_t cp) { return t.isAlphabetic(cp); });
  expectProbe("regex:\\w", [](char32_t cp) { return unicode::isOnigWord(cp); });
  expectProbe("regex:\\d", [&](char32_t cp) { return t.category(cp) == unicode::kNd; });
  expectProbe("digits", [](char32_t cp) { return unicode::isRustNumeric(cp); });
  expectProbe("added_token_word", [](char32_t cp) { return unicode::isRustRegexWord(cp); });
  expectProbe("added_token_space", [&](char32_t cp) { return t.isWhiteSpace(cp); });
}

// Matches one code point against a PCRE2 pattern, anchored at both ends.
class Pcre {
 public:
  Pcre(const std::string& pattern, uint32_t options) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | options, &error, &offset, nullptr);
    EXPECT_NE(code_, nullptr) << pattern;
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
    data_ = pcre2_match_data_create(1, nullptr);
  }
  ~Pcre() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  bool matches(char32_t cp) const {
    std::string s;
    utf8::append(s, cp);
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_, nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// The predicates of the fast path, each against (a) the general path's
// translation of the same Oniguruma escape compiled by PCRE2 — these must agree
// on every code point — and (b) PCRE2's own Unicode tables (version 14 in
// Debian 12): there they may differ only where PCRE2 still has the code point
// unassigned, plus U+180E, which PCRE2's \s keeps and Unicode dropped.
TEST(UnicodeData, FastPathPredicatesEqualTheGeneralPathAndPcre2) {
  const Table& t = unicode::table();
  struct Case {
    const char* onig;
    const char* native;
    std::function<bool(char32_t)> pred;
  };
  const std::vector<Case> cases = {
      {"\\p{L}", "\\p{L}", [&](char32_t cp) { return t.in(cp, unicode::kLetter); }},
      {"\\p{M}", "\\p{M}", [&](char32_t cp) { return t.in(cp, unicode::kMark); }},
      {"\\p{N}", "\\p{N}", [&](char32_t cp) { return t.in(cp, unicode::kNumber); }},
      {"\\p{P}", "\\p{P}", [&](char32_t cp) { return t.in(cp, unicode::kPunctuation); }},
      {"\\p{S}", "\\p{S}", [&](char32_t cp) { return t.in(cp, unicode::kSymbol); }},
      {"\\s", "\\s", [&](char32_t cp) { return t.isWhiteSpace(cp); }},
  };
  const Pcre unassigned("\\p{Cn}", PCRE2_UCP);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.onig);
    auto translated = translateOnigurumaPattern(c.onig);
    ASSERT_TRUE(translated.isOk());
    const Pcre general(*translated, 0);
    const Pcre native(c.native, PCRE2_UCP);
    size_t general_mismatches = 0, native_differences = 0, unexplained = 0;
    for (char32_t cp = 0; cp <= unicode::kMaxCodePoint; ++cp) {
      if (isSurrogate(cp)) continue;
      const bool mine = c.pred(cp);
      if (general.matches(cp) != mine && ++general_mismatches <= 5) ADD_FAILURE() << "general path, U+" << std::hex << static_cast<uint32_t>(cp);
      if (native.matches(cp) != mine) {
        ++native_differences;
        const bool explained = unassigned.matches(cp) || (cp == 0x180e && std::string(c.onig) == "\\s");
        if (!explained && ++unexplained <= 5) ADD_FAILURE() << "PCRE2 differs at U+" << std::hex << static_cast<uint32_t>(cp);
      }
    }
    EXPECT_EQ(general_mismatches, 0u);
    EXPECT_EQ(unexplained, 0u);
    std::printf("%-6s differs from PCRE2's own tables at %zu code points (unassigned in its Unicode 14, or U+180E)\n", c.onig,
                native_differences);
  }
}

// Facts the fast path relies on (deepseek_v3_fast.cc): numbers are never
// letters, marks, punctuation, symbols or space, and no CJK-range character is
// a number, so the number pieces need no further splitting.
TEST(UnicodeData, FastPathAssumptionsHold) {
  const Table& t = unicode::table();
  for (char32_t cp = 0; cp <= unicode::kMaxCodePoint; ++cp) {
    if (t.in(cp, unicode::kNumber)) {
      ASSERT_FALSE(t.isWhiteSpace(cp)) << std::hex << static_cast<uint32_t>(cp);
      ASSERT_FALSE((cp >= 0x4e00 && cp <= 0x9fa5) || (cp >= 0x3040 && cp <= 0x30ff)) << std::hex << static_cast<uint32_t>(cp);
    }
  }
}

TEST(UnicodeData, CategoryNames) {
  EXPECT_EQ(unicode::categoryMaskByName("L"), unicode::kLetter);
  EXPECT_EQ(unicode::categoryMaskByName("Letter"), unicode::kLetter);
  EXPECT_EQ(unicode::categoryMaskByName("uppercase_letter"), unicode::bit(unicode::kLu));
  EXPECT_EQ(unicode::categoryMaskByName("Lu"), unicode::bit(unicode::kLu));
  EXPECT_FALSE(unicode::categoryMaskByName("Han").has_value());
}

}  // namespace
}  // namespace lg::text::testing

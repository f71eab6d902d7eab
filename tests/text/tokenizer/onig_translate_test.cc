// The Oniguruma-to-PCRE2 translation: the dialect differences it must bridge
// (checked against matches the reference library produced, see the comments),
// and constructs it must refuse rather than guess.
#include <gtest/gtest.h>

#include "text/tokenizer/onig_translate.h"
#include "text/tokenizer/pcre_regex.h"

namespace lg::text {
namespace {

// All (start, end) matches with the onig crate's iteration rules.
std::vector<std::pair<size_t, size_t>> matches(std::string_view pattern, std::string_view text) {
  auto regex = PcreRegex::compileOniguruma(pattern);
  EXPECT_TRUE(regex.isOk()) << regex.status().toString();
  std::vector<std::pair<size_t, size_t>> out;
  if (!regex.isOk()) return out;
  MatchScratch scratch;
  const Status s = (*regex)->forEachMatch(text, scratch, [&](size_t a, size_t b) {
    out.emplace_back(a, b);
    return Status::ok();
  });
  EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

using M = std::vector<std::pair<size_t, size_t>>;

TEST(OnigTranslate, EscapesWithOnigurumaMeanings) {
  EXPECT_EQ(matches("\\h+", "abcxyz09 \t"), (M{{0, 3}, {6, 8}}));  // \h is a hex digit
  EXPECT_EQ(matches("\\v", "a\x0b" "b\nc\rd"), (M{{1, 2}}));        // \v is a vertical tab
  EXPECT_EQ(matches("\\u0041", "xAx"), (M{{1, 2}}));
  EXPECT_EQ(matches("\\x{4e2d}", "中"), (M{{0, 3}}));
  EXPECT_EQ(matches("x{,2}", "xxxxx"), (M{{0, 2}, {2, 4}, {4, 5}}));  // {,n} is {0,n}
  EXPECT_EQ(matches("a{x", "a{x"), (M{{0, 3}}));                              // not an interval: literal
  EXPECT_EQ(matches("\\s", "\u180e \u0085"), (M{{3, 4}, {4, 6}}));           // U+180E is not a space
}

TEST(OnigTranslate, AnchorsAreLineAnchors) {
  // The reference split "ab\ncd\n" with `$` at 2, 5 and 6, with `^` at 0 and 3.
  EXPECT_EQ(matches("$", "ab\ncd\n"), (M{{2, 2}, {5, 5}, {6, 6}}));
  EXPECT_EQ(matches("^", "ab\ncd\n"), (M{{0, 0}, {3, 3}}));
  EXPECT_EQ(matches("\\s+$", "a  \n  b  "), (M{{1, 3}, {7, 9}}));
  EXPECT_EQ(matches("\\b", "ab cd"), (M{{0, 0}, {2, 2}, {3, 3}, {5, 5}}));
}

TEST(OnigTranslate, EmptyMatchesFollowTheOnigCrate) {
  // The reference split "bab" with a* into b / a / b.
  EXPECT_EQ(matches("a*", "bab"), (M{{0, 0}, {1, 2}, {3, 3}}));
}

TEST(OnigTranslate, UnsupportedConstructsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"(?i)a", "inline options"},   {"(a)\\1", "escape '\\1'"},    {"\\K", "escape '\\K'"},
      {"\\R", "escape '\\R'"},       {"\\X", "escape '\\X'"},       {"[a&&b]", "&&"},
      {"[[:alpha:]]", "'['"},        {"[a[b]]", "'['"},             {"a{2}?", "{n}?"},
      {"a{1,2}+", "{n,m}+"},         {"a{3,1}", "n > m"},           {"\\x80", "raw byte"},
      {"\\p{Han}", "\\p{Han}"},      {"(?~abc)", "absent"},         {"a**", "stacked"},
      {"(?=a)*", "quantified assertion"}, {"[]a]", "']' first"}, {"a{70000}", "65535"},
  };
  for (const auto& [pattern, fragment] : cases) {
    auto t = translateOnigurumaPattern(pattern);
    ASSERT_FALSE(t.isOk()) << pattern;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << pattern << ": " << t.status().toString();
    EXPECT_NE(t.status().message().find(fragment), std::string::npos) << t.status().toString();
  }
}

TEST(OnigTranslate, MalformedPatternsAreInvalid) {
  for (const char* pattern : {"(a", "a)", "[a", "*a", "[z-a]", "\\", "\\x{110000}", "\\p{L"}) {
    auto t = PcreRegex::compileOniguruma(pattern);
    ASSERT_FALSE(t.isOk()) << pattern;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << pattern << ": " << t.status().toString();
  }
}

TEST(OnigTranslate, LiteralPatterns) {
  auto regex = PcreRegex::compileLiteral("a.b*");
  ASSERT_TRUE(regex.isOk());
  MatchScratch scratch;
  M out;
  ASSERT_TRUE((*regex)->forEachMatch("xa.b*a.bb", scratch, [&](size_t a, size_t b) {
    out.emplace_back(a, b);
    return Status::ok();
  }).isOk());
  EXPECT_EQ(out, (M{{1, 5}}));
}

}  // namespace
}  // namespace lg::text

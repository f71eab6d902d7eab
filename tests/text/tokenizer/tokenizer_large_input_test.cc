// Ten-megabyte single-line inputs: one enormous pre-token (letters, spaces,
// CJK, newlines) or millions of small ones (digits, mixed text), through the
// fast path and the general PCRE2 path, without crash, stack overflow,
// quadratic time or a blow-up in memory. Each input is one test that encodes
// it with both paths in the same process and requires the same ids, and
// requires the ids to decode back to the text.
#include <chrono>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

constexpr size_t kSize = 10 << 20;

std::string repeatTo(const std::string& unit, size_t size) {
  std::string s;
  s.reserve(size + unit.size());
  while (s.size() < size) s += unit;
  return s;
}

std::string randomOf(const std::vector<char32_t>& alphabet, size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(size + 4);
  while (s.size() < size) utf8::append(s, alphabet[rng() % alphabet.size()]);
  return s;
}

std::vector<char32_t> letters() {
  std::vector<char32_t> v;
  for (char32_t c = 'a'; c <= 'z'; ++c) v.push_back(c);
  return v;
}

std::vector<char32_t> cjk() {
  std::vector<char32_t> v;
  for (char32_t c = 0x4e00; c <= 0x9fa5; c += 7) v.push_back(c);
  return v;
}

const char kMixedUnit[] =
    "The KV cache 压缩 of DeepSeek-V3 (671B) runs at 12,345 tok/s; see https://example.com/x?q=1\n"
    "def f(x):\n    return x ** 2  # 平方\n\t\"quoted\" — naïve café 😀👍🏽 ١٢٣ ①②\r\n";

// Each test builds only its own input.
struct LargeInput {
  const char* name;
  std::string (*make)();
};

const LargeInput kInputs[] = {
    {"letters", [] { return randomOf(letters(), kSize, 1); }},
    {"spaces", [] { return std::string(kSize, ' '); }},
    {"cjk", [] { return randomOf(cjk(), kSize, 2); }},
    {"digits", [] { return randomOf({'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}, kSize, 3); }},
    {"mixed", [] { return repeatTo(kMixedUnit, kSize); }},
    {"newlines", [] { return std::string(kSize, '\n'); }},
};

// gtest prints the parameter next to each test name: the input's name, not its bytes.
void PrintTo(const LargeInput& input, std::ostream* os) { *os << input.name; }

std::vector<int32_t> encodeTimed(const BpeTokenizer& tokenizer, const std::string& name, const std::string& text) {
  const auto start = std::chrono::steady_clock::now();
  auto ids = tokenizer.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!ids.isOk()) {
    ADD_FAILURE() << name << ": " << ids.status().toString();
    return {};
  }
  std::printf("%-10s %-8s %5.1f MB -> %8zu ids in %.2f s\n", name.c_str(), tokenizer.usesFastPath() ? "fast" : "PCRE2",
              text.size() / 1e6, ids->size(), seconds);
  return std::move(ids).value();
}

class TokenizerLargeInput : public ::testing::TestWithParam<LargeInput> {};

TEST_P(TokenizerLargeInput, FastAndGeneralPathsGiveTheSameIds) {
  const std::string name = GetParam().name;
  const std::string text = GetParam().make();
  ASSERT_TRUE(v3().usesFastPath());
  ASSERT_FALSE(v3General().usesFastPath());

  const std::vector<int32_t> fast = encodeTimed(v3(), name, text);
  ASSERT_FALSE(fast.empty());
  auto back = v3().decode(fast);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(*back == text) << name << ": decode(encode(x)) != x";

  const std::vector<int32_t> general = encodeTimed(v3General(), name, text);
  // Not EXPECT_EQ: a failure would print millions of ids. Name the first difference.
  size_t first_diff = 0;
  while (first_diff < fast.size() && first_diff < general.size() && fast[first_diff] == general[first_diff]) {
    ++first_diff;
  }
  EXPECT_TRUE(fast == general) << name << ": the general path gave other ids (" << general.size() << " vs "
                               << fast.size() << " from the fast path; first difference at index " << first_diff
                               << ")";
}

std::string inputName(const ::testing::TestParamInfo<LargeInput>& param) { return param.param.name; }

INSTANTIATE_TEST_SUITE_P(TenMegabytes, TokenizerLargeInput, ::testing::ValuesIn(kInputs), inputName);

TEST(TokenizerLargeInputPrompt, WholeTextTrusted) {
  // The added-token scan over a 10 MB trusted range.
  const std::string text = repeatTo("<｜User｜>hello <｜Assistant｜> world ", kSize);
  auto ids = v3().encodePrompt(allTrusted(text));
  ASSERT_TRUE(ids.isOk());
  EXPECT_EQ(*v3().decode(*ids), text);
}

}  // namespace
}  // namespace lg::text::testing

// Ten-megabyte single-line inputs: one enormous pre-token (letters, spaces,
// CJK, newlines) or millions of small ones (digits, mixed text), through the
// fast path and the general PCRE2 path, without crash, stack overflow,
// quadratic time or a blow-up in memory; the ids must decode back to the text.
#include <chrono>
#include <map>
#include <random>

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

std::vector<std::pair<std::string, std::string>> makeInputs();

std::string randomOf(const std::vector<char32_t>& alphabet, size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(size + 4);
  while (s.size() < size) utf8::append(s, alphabet[rng() % alphabet.size()]);
  return s;
}

// Ids of the fast path per input, which the general path must reproduce.
std::map<std::string, std::vector<int32_t>>& fastIds() {
  static std::map<std::string, std::vector<int32_t>> kIds;
  return kIds;
}

void roundTrip(const BpeTokenizer& tokenizer, const std::string& name, const std::string& text) {
  const auto start = std::chrono::steady_clock::now();
  auto ids = tokenizer.encode(text);
  ASSERT_TRUE(ids.isOk()) << name << ": " << ids.status().toString();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (tokenizer.usesFastPath()) {
    auto back = tokenizer.decode(*ids);
    ASSERT_TRUE(back.isOk());
    EXPECT_TRUE(*back == text) << name << ": decode(encode(x)) != x";
    fastIds()[name] = *ids;
  } else if (fastIds().count(name)) {
    EXPECT_TRUE(fastIds()[name] == *ids) << name << ": the general path gave other ids";
  }
  std::printf("%-10s %-8s %5.1f MB -> %8zu ids in %.2f s\n", name.c_str(), tokenizer.usesFastPath() ? "fast" : "PCRE2",
              text.size() / 1e6, ids->size(), seconds);
}

const std::vector<std::pair<std::string, std::string>>& inputs();

std::vector<std::pair<std::string, std::string>> makeInputs() {
  std::vector<char32_t> letters, cjk;
  for (char32_t c = 'a'; c <= 'z'; ++c) letters.push_back(c);
  for (char32_t c = 0x4e00; c <= 0x9fa5; c += 7) cjk.push_back(c);
  const std::string mixed_unit =
      "The KV cache 压缩 of DeepSeek-V3 (671B) runs at 12,345 tok/s; see https://example.com/x?q=1\n"
      "def f(x):\n    return x ** 2  # 平方\n\t\"quoted\" — naïve café 😀👍🏽 ١٢٣ ①②\r\n";
  return {
      {"letters", randomOf(letters, kSize, 1)},
      {"spaces", std::string(kSize, ' ')},
      {"cjk", randomOf(cjk, kSize, 2)},
      {"digits", randomOf({'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}, kSize, 3)},
      {"mixed", repeatTo(mixed_unit, kSize)},
      {"newlines", std::string(kSize, '\n')},
  };
}

const std::vector<std::pair<std::string, std::string>>& inputs() {
  static const auto kInputs = makeInputs();
  return kInputs;
}

TEST(TokenizerLargeInput, FastPath) {
  for (const auto& [name, text] : inputs()) roundTrip(v3(), name, text);
}

TEST(TokenizerLargeInput, GeneralPath) {
  for (const auto& [name, text] : inputs()) roundTrip(v3General(), name, text);
}

TEST(TokenizerLargeInput, WholeTextTrustedPrompt) {
  // The added-token scan over a 10 MB trusted range.
  const std::string text = repeatTo("<｜User｜>hello <｜Assistant｜> world ", kSize);
  auto ids = v3().encodePrompt(allTrusted(text));
  ASSERT_TRUE(ids.isOk());
  EXPECT_EQ(*v3().decode(*ids), text);
}

}  // namespace
}  // namespace lg::text::testing

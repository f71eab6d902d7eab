// The hand-written DeepSeek V3 pre-tokenizer against the general PCRE2 path
// (which runs the tokenizer.json's own patterns): identical pieces on every
// string of up to three characters over a set of characters that covers each
// class the patterns distinguish and the edges of their ranges, on random
// strings, and on structured adversarial ones.
#include <random>

#include <gtest/gtest.h>

#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"
#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

std::string utf8Of(char32_t cp) {
  std::string s;
  utf8::append(s, cp);
  return s;
}

void expectSamePieces(const std::string& text) {
  auto fast = v3().preTokenize(text);
  auto general = v3General().preTokenize(text);
  ASSERT_TRUE(fast.isOk()) << fast.status().toString();
  ASSERT_TRUE(general.isOk()) << general.status().toString();
  ASSERT_EQ(*fast, *general) << "text: " << nlohmann::json(text).dump();
}

// Characters that the three patterns tell apart: ASCII letters, digits,
// punctuation, each whitespace character, \r \n, letters and marks outside
// ASCII, numbers of other scripts, symbols, controls, format characters,
// private use, unassigned, and the edges of the CJK ranges.
std::vector<std::string> alphabet() {
  std::vector<char32_t> cps = {
      'a', 'Z', '0', '7', '!', '\'', '-', '.', '_', '`', '~', '@', '[', '\\', '$', '+', '<', '|',
      ' ', '\t', '\n', '\r', 0x0b, 0x0c, 0x85, 0xa0, 0x1680, 0x180e, 0x2000, 0x2028, 0x2029, 0x202f, 0x3000,
      0xfeff, 0x200b, 0x200d, 0x00, 0x01, 0x7f, 0xad, 0xe9, 0x0301, 0x0903, 0x20dd, 0x00b2, 0x0663, 0x2160,
      0x00bd, 0xff11, 0x3007, 0x4dff, 0x4e00, 0x9fa5, 0x9fa6, 0x3040, 0x3041, 0x309b, 0x30a0, 0x30fb, 0x30fc,
      0x30ff, 0x3100, 0xac00, 0x3001, 0xff01, 0x2018, 0x20ac, 0x1f600, 0x1f3fd, 0xe000, 0x10ffff, 0x0378,
      0x31350, 0x2ebf0, 0x0cf3, 0x1c89, 0x11de0, 0x0660, 0x0e51, 0x0391, 0x0416, 0x05d0, 0x0627, 0x0915,
  };
  std::vector<std::string> out;
  for (char32_t cp : cps) out.push_back(utf8Of(cp));
  return out;
}

TEST(FastPath, IsSelectedOnlyForTheExactV3PreTokenizer) {
  EXPECT_TRUE(v3().usesFastPath());
  nlohmann::json j = v3Json();
  j["pre_tokenizer"]["pretokenizers"][2]["behavior"] = "Removed";
  EXPECT_FALSE(build(j)->usesFastPath());
  j = v3Json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,2}";
  EXPECT_FALSE(build(j)->usesFastPath());
  j = v3Json();
  j["pre_tokenizer"]["pretokenizers"][3]["add_prefix_space"] = true;
  EXPECT_FALSE(build(j)->usesFastPath());
}

TEST(FastPath, AllStringsOfUpToThreeCharactersSplitIdentically) {
  const std::vector<std::string> chars = alphabet();
  size_t count = 0;
  for (const std::string& a : chars) {
    expectSamePieces(a);
    for (const std::string& b : chars) {
      expectSamePieces(a + b);
      for (const std::string& c : chars) {
        expectSamePieces(a + b + c);
        ++count;
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GT(count, 500000u);
}

TEST(FastPath, RandomStringsSplitIdentically) {
  const std::vector<std::string> chars = alphabet();
  std::mt19937 rng(20250601);
  const unicode::Table& t = unicode::table();
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 60);
    for (int k = 0; k < len; ++k) {
      if (rng() % 8 == 0) {
        // Any scalar value at all.
        char32_t cp = rng() % 0x110000;
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
        text += utf8Of(cp);
      } else {
        const std::string& c = chars[rng() % chars.size()];
        const int run = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 5) : 1;
        for (int r = 0; r < run; ++r) text += c;
      }
    }
    expectSamePieces(text);
    if (::testing::Test::HasFatalFailure()) return;
  }
  (void)t;
}

TEST(FastPath, StructuredTextsSplitIdentically) {
  const std::vector<std::string> texts = {
      "", "Hello, world!", "  two  spaces  ", "trailing   ", "   ", "\n\n\n", "a\r\n\r\n  b\n", "x \n \n y",
      "def f(x):\n    return x ** 2  # square\n", "{\"key\": [1, 2, 3]}", "1234567890", "12345 678 9",
      "中文测试：KV cache 压缩", "こんにちは世界、カタカナ・ひらがな", "naïve café", "e\u0301\u0301 x\u0301",
      "Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया", "emoji 😀👍🏽🇨🇳 done", "'s 'S .NET __init__ a::b",
      "\t\tindented\ttabs", "\u00a0\u00a0nbsp\u3000\u3000ideographic", "a\u2028b\u2029c\u0085d",
      "\u0000\u0000!\u0000a", "١٢٣٤٥٦٧٨٩٠", "①②③④ ⅠⅡⅢ ²³", "x²³¹y", "!!!???...", "   \t \n  ",
  };
  for (const std::string& text : texts) expectSamePieces(text);
  // Long runs exercise the same code with long subjects.
  expectSamePieces(std::string(5000, ' ') + "x" + std::string(5000, ' '));
  expectSamePieces(std::string(3000, 'a') + "1234567" + std::string(3000, '\n') + "中文中文");
}

}  // namespace
}  // namespace lg::text::testing

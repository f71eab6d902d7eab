// TextStream with the real DeepSeek-V3 tokenizer: no split UTF-8 character,
// stop strings held back while they may still match and cut exactly.
#include <gtest/gtest.h>

#include "serving/text_stream.h"
#include "tests/serving/serving_test_util.h"

namespace lg::serving::testing {
namespace {

std::vector<int32_t> encode(std::string_view text) { return tokenizer().encode(text).value(); }

// Feeds every token; returns the pieces released by each push.
std::vector<std::string> feed(TextStream& stream, const std::vector<int32_t>& ids, bool* stopped = nullptr) {
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    TextStream::Piece p = stream.push(id);
    pieces.push_back(p.text);
    if (p.stopped) {
      if (stopped) *stopped = true;
      break;
    }
  }
  return pieces;
}

bool validUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

TEST(TextStreamTest, NeverSplitsAUtf8CharacterAndAddsUpToDecode) {
  // CJK and emoji are split across byte-level tokens.
  const std::string text = "Prix: 12€ — 東京タワー 🗼🎉 naïve café";
  const std::vector<int32_t> ids = encode(text);
  TextStream stream(tokenizer(), {});
  std::string all;
  for (const std::string& piece : feed(stream, ids)) {
    EXPECT_TRUE(validUtf8(piece)) << "a piece splits a character";
    all += piece;
  }
  all += stream.finish();
  EXPECT_EQ(all, text);
}

TEST(TextStreamTest, HoldsBackAPossibleStopAndCutsBeforeTheMatch) {
  const std::string text = "The answer is 42. END of story";
  const std::vector<int32_t> ids = encode(text);
  TextStream stream(tokenizer(), {"END", "###"});
  bool stopped = false;
  std::string released;
  for (const std::string& piece : feed(stream, ids, &stopped)) {
    released += piece;
    // Nothing past the stop's first byte is ever released.
    EXPECT_EQ(released.find('E'), std::string::npos) << released;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(released, "The answer is 42. ");
  EXPECT_EQ(stream.finish(), "");
}

TEST(TextStreamTest, AFalseStartIsReleasedOnceItCannotMatch) {
  TextStream stream(tokenizer(), {"<|stop|>"});
  std::string released;
  for (const std::string& piece : feed(stream, encode("a <|st then more"))) released += piece;
  released += stream.finish();
  EXPECT_EQ(released, "a <|st then more");
}

TEST(TextStreamTest, AStopSpanningTokensMatches) {
  const std::string text = "alpha beta gamma delta";
  TextStream stream(tokenizer(), {"ta gam"});
  bool stopped = false;
  std::string released;
  for (const std::string& piece : feed(stream, encode(text), &stopped)) released += piece;
  EXPECT_TRUE(stopped);
  EXPECT_EQ(released, "alpha be");
}

}  // namespace
}  // namespace lg::serving::testing

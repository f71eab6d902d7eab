// Decoding: byte-level bytes, added tokens as their content, skip_special,
// U+FFFD for broken UTF-8 like Rust's from_utf8_lossy, and the stream decoder
// holding back incomplete characters.
#include <random>

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

// The id of the one-byte token for `byte`.
int32_t byteToken(uint8_t byte) {
  const std::string text(1, static_cast<char>(byte));
  for (int32_t id = 0; id < 128000; ++id) {
    if (v3().tokenBytes(id) == text) return id;
  }
  return -1;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  utf8::appendLossy(out, bytes);
  return out;
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  const std::string r = "\xef\xbf\xbd";
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\xe4\xb8\xad"), "中");
  EXPECT_EQ(lossy("\xe4\xb8"), r);                 // truncated: one replacement
  EXPECT_EQ(lossy("\xe4\xb8x"), r + "x");
  EXPECT_EQ(lossy("\xf0\x80\x80"), r + r + r);     // F0 needs 90..BF next
  EXPECT_EQ(lossy("\xed\xa0\x80"), r + r + r);     // surrogate
  EXPECT_EQ(lossy("\xc0\xaf"), r + r);             // overlong
  EXPECT_EQ(lossy("\xf4\x8f\xbf"), r);             // truncated U+10FFFF
  EXPECT_EQ(lossy("\xff\xfe"), r + r);
  EXPECT_EQ(lossy(std::string("\0\x80", 2)), std::string("\0", 1) + r);
}

TEST(Utf8, CompletePrefixHoldsBackOnlyIncompleteSequences) {
  EXPECT_EQ(utf8::completePrefix("abc"), 3u);
  EXPECT_EQ(utf8::completePrefix("a\xe4"), 1u);
  EXPECT_EQ(utf8::completePrefix("a\xe4\xb8"), 1u);
  EXPECT_EQ(utf8::completePrefix("a\xe4\xb8\xad"), 4u);
  EXPECT_EQ(utf8::completePrefix("a\xff"), 2u);      // invalid: not held
  EXPECT_EQ(utf8::completePrefix("a\xe4x"), 3u);     // already broken
  EXPECT_EQ(utf8::completePrefix("\xf0\x9f\x98"), 0u);
}

TEST(TokenizerDecode, PartialTokensBecomeReplacementCharacters) {
  const int32_t e4 = byteToken(0xe4), b8 = byteToken(0xb8), ad = byteToken(0xad);
  ASSERT_GE(e4, 0);
  EXPECT_EQ(*v3().decode(std::vector<int32_t>{e4, b8, ad}), "中");
  EXPECT_EQ(*v3().decode(std::vector<int32_t>{e4, b8}), "\xef\xbf\xbd");
  EXPECT_EQ(*v3().decode(std::vector<int32_t>{ad, e4}), "\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(TokenizerDecode, AddedTokensAndSkipSpecial) {
  const int32_t bos = *v3().addedTokenId("<｜begin▁of▁sentence｜>");
  const int32_t user = *v3().addedTokenId("<｜User｜>");  // not special in V3
  auto hi = *v3().encode("hi");
  std::vector<int32_t> ids = {bos, user};
  ids.insert(ids.end(), hi.begin(), hi.end());
  EXPECT_EQ(*v3().decode(ids), "<｜begin▁of▁sentence｜><｜User｜>hi");
  EXPECT_EQ(*v3().decode(ids, /*skip_special=*/true), "<｜User｜>hi");
  EXPECT_TRUE(v3().isSpecial(bos));
  EXPECT_FALSE(v3().isSpecial(user));
  EXPECT_EQ(v3().tokenBytes(bos), "<｜begin▁of▁sentence｜>");
}

TEST(TokenizerDecode, UnknownIdsAreErrors) {
  for (int32_t bad : {-1, 128815, 1 << 30}) {
    auto text = v3().decode(std::vector<int32_t>{0, bad});
    ASSERT_FALSE(text.isOk());
    EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(text.status().message().find("position 1"), std::string::npos);
    EXPECT_EQ(v3().tokenBytes(bad), "");
    EXPECT_FALSE(v3().isSpecial(bad));
  }
}

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  const int32_t e4 = byteToken(0xe4), b8 = byteToken(0xb8), ad = byteToken(0xad);
  StreamDecoder stream(v3());
  auto hello = *v3().encode("hello ");
  std::string out;
  for (int32_t id : hello) out += stream.push(id);
  EXPECT_EQ(out, "hello ");
  EXPECT_EQ(stream.push(e4), "");
  EXPECT_EQ(stream.push(b8), "");
  EXPECT_EQ(stream.push(ad), "中");
  EXPECT_EQ(stream.push(e4), "");
  EXPECT_EQ(stream.flush(), "\xef\xbf\xbd");
  EXPECT_EQ(stream.flush(), "");
  EXPECT_EQ(stream.push(128815), "");  // unknown ids yield nothing
}

TEST(StreamDecoder, EqualsDecodeOnRandomIds) {
  std::mt19937 rng(7);
  for (int n = 0; n < 2000; ++n) {
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 20);
    for (int k = 0; k < len; ++k) ids.push_back(static_cast<int32_t>(rng() % (k % 3 == 0 ? 400 : 128815)));
    const bool skip = n % 2;
    StreamDecoder stream(v3(), skip);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, *v3().decode(ids, skip));
  }
}

}  // namespace
}  // namespace lg::text::testing

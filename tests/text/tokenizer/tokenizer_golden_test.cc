// The reference goldens of tests/fixtures/tokenizer-golden.json (tokenizers
// 0.23.2 and transformers' chat rendering): exact ids and decoded text.
#include <set>

#include <gtest/gtest.h>

#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

using nlohmann::json;

const json& golden() {
  static const json kGolden = readJsonFixture("tokenizer-golden.json");
  return kGolden;
}

std::vector<int32_t> idsOf(const json& j) { return j.get<std::vector<int32_t>>(); }

TEST(TokenizerGolden, FixtureHasTheExpectedShape) {
  ASSERT_EQ(golden()["texts"].size(), 48u);
  ASSERT_EQ(golden()["chats"].size(), 6u);
  EXPECT_TRUE(v3().usesFastPath());
  EXPECT_FALSE(v3General().usesFastPath());
}

TEST(TokenizerGolden, TextsEncodeExactly) {
  for (const json& c : golden()["texts"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(text);
    auto ids = v3().encode(text);
    ASSERT_TRUE(ids.isOk()) << ids.status().toString();
    EXPECT_EQ(*ids, idsOf(c["ids"]));
    auto general = v3General().encode(text);
    ASSERT_TRUE(general.isOk()) << general.status().toString();
    EXPECT_EQ(*general, idsOf(c["ids"]));
  }
}

TEST(TokenizerGolden, TextsDecodeExactly) {
  for (const json& c : golden()["texts"]) {
    SCOPED_TRACE(c["text"].get<std::string>());
    const std::vector<int32_t> ids = idsOf(c["ids"]);
    auto text = v3().decode(ids);
    ASSERT_TRUE(text.isOk()) << text.status().toString();
    EXPECT_EQ(*text, c["decoded"].get<std::string>());
  }
}

TEST(TokenizerGolden, ChatsEncodeExactlyWhenTheWholeTextIsTrusted) {
  for (const json& c : golden()["chats"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(text);
    auto ids = v3().encodePrompt(allTrusted(text));
    ASSERT_TRUE(ids.isOk()) << ids.status().toString();
    EXPECT_EQ(*ids, idsOf(c["ids"]));
    EXPECT_EQ(*v3General().encodePrompt(allTrusted(text)), idsOf(c["ids"]));
  }
}

TEST(TokenizerGolden, SpecialTokenStringsInPlainTextStayText) {
  const json& c = golden()["special_in_text"];
  const std::string text = c["text"];
  // Trusted, the library's parse: <｜User｜> hi <｜Assistant｜>.
  EXPECT_EQ(*v3().encodePrompt(allTrusted(text)), idsOf(c["ids"]));
  // Plain text: no added-token id at all.
  auto ids = v3().encode(text);
  ASSERT_TRUE(ids.isOk());
  std::set<int32_t> added;
  for (const json& t : v3Json()["added_tokens"]) added.insert(t["id"].get<int32_t>());
  for (int32_t id : *ids) EXPECT_EQ(added.count(id), 0u) << "added-token id " << id << " forged from text";
  EXPECT_GT(ids->size(), 3u);
  EXPECT_EQ(*v3().decode(*ids), text);
  // A prompt whose text came from a client (no trusted range) is plain text too.
  PromptText untrusted;
  untrusted.append(text, false);
  EXPECT_EQ(*v3().encodePrompt(untrusted), *ids);
}

}  // namespace
}  // namespace lg::text::testing

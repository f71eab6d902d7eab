// Loading: missing, corrupt and truncated files, wrong types, dangling merges,
// duplicate and out-of-range ids, and unsupported features, each with a clear
// error (and never an exception or a silent divergence).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

using nlohmann::json;

// A small valid byte-level BPE tokenizer.json: the 256 byte symbols, two
// merges, one special token.
json tinyJson() {
  json vocab = json::object();
  // The byte-level alphabet, as tokens 0..255 (the same order as the library's).
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    static int next = 0;
    if (b == 0) next = 0;
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xc0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    }
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       json::array({{{"id", 258}, {"content", "<s>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}}})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", json::array({"a b", "ab c"})}}},
  };
}

Status loadStatus(const json& j) {
  auto t = Tokenizer::loadFromJson(j.dump());
  return t.isOk() ? Status::ok() : t.status();
}

void expectError(const json& j, StatusCode code, const std::string& fragment) {
  const Status s = loadStatus(j);
  EXPECT_EQ(s.code(), code) << s.toString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.toString() << " should mention " << fragment;
}

TEST(TokenizerLoad, TinyTokenizerWorks) {
  auto t = Tokenizer::loadFromJson(tinyJson().dump());
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(*(*t)->encode("abc abd"), (std::vector<int32_t>{257, ' ', 256, 'd'}));
  EXPECT_EQ((*t)->vocabSize(), 259);
  EXPECT_EQ((*t)->addedTokenId("<s>"), 258);
  EXPECT_TRUE((*t)->isSpecial(258));
  // The merges also load in the ["a", "b"] form.
  json pairs = tinyJson();
  pairs["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"ab", "c"})});
  auto t2 = Tokenizer::loadFromJson(pairs.dump());
  ASSERT_TRUE(t2.isOk()) << t2.status().toString();
  EXPECT_EQ(*(*t2)->encode("abc abd"), *(*t)->encode("abc abd"));
}

TEST(TokenizerLoad, MissingDirectoryOrFile) {
  auto t = Tokenizer::loadFromDir("/nonexistent/dir");
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound) << t.status().toString();
  EXPECT_NE(t.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);
}

TEST(TokenizerLoad, LoadsFromADirectory) {
  auto t = Tokenizer::loadFromDir(assetPath("deepseek-v3-tokenizer"));
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ((*t)->vocabSize(), 128815);
  EXPECT_EQ((*t)->addedTokenId("<｜end▁of▁sentence｜>"), 1);
}

TEST(TokenizerLoad, CorruptAndTruncatedJson) {
  for (const std::string& text : {std::string(""), std::string("{"), std::string("not json"),
                                 std::string("[1, 2]"), std::string("null"), tinyJson().dump().substr(0, 500)}) {
    auto t = Tokenizer::loadFromJson(text);
    ASSERT_FALSE(t.isOk()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().toString();
  }
  // A truncated copy of the real file, through loadFromDir.
  const auto dir = std::filesystem::temp_directory_path() / ("lg-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto full = readFile(assetPath("deepseek-v3-tokenizer/tokenizer.json"));
  ASSERT_TRUE(full.isOk());
  std::ofstream(dir / "tokenizer.json") << full->substr(0, full->size() / 2);
  auto t = Tokenizer::loadFromDir(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("not valid JSON"), std::string::npos) << t.status().toString();
}

TEST(TokenizerLoad, WrongTypes) {
  json j = tinyJson();
  j["model"]["vocab"] = json::array();
  expectError(j, StatusCode::kInvalidArgument, "model.vocab must be an object");
  j = tinyJson();
  j["model"]["vocab"]["ab"] = "256";
  expectError(j, StatusCode::kInvalidArgument, "model.vocab[\"ab\"] must be an integer");
  j = tinyJson();
  j["model"]["merges"] = "a b";
  expectError(j, StatusCode::kInvalidArgument, "model.merges must be an array");
  j = tinyJson();
  j["model"]["merges"][1] = 7;
  expectError(j, StatusCode::kInvalidArgument, "model.merges[1]");
  j = tinyJson();
  j["model"]["merges"][0] = "a  b";
  expectError(j, StatusCode::kInvalidArgument, "not two tokens");
  j = tinyJson();
  j["added_tokens"][0]["special"] = "yes";
  expectError(j, StatusCode::kInvalidArgument, "\"special\" must be a boolean");
  j = tinyJson();
  j["added_tokens"][0].erase("lstrip");
  expectError(j, StatusCode::kInvalidArgument, "missing \"lstrip\"");
  j = tinyJson();
  j["added_tokens"] = json::object();
  expectError(j, StatusCode::kInvalidArgument, "added_tokens must be an array");
  j = tinyJson();
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = 1;
  expectError(j, StatusCode::kInvalidArgument, "\"invert\" must be a boolean");
  j = tinyJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expectError(j, StatusCode::kInvalidArgument, "unknown behavior");
  j = tinyJson();
  j.erase("model");
  expectError(j, StatusCode::kInvalidArgument, "no \"model\"");
  j = tinyJson();
  j["model"].erase("merges");
  expectError(j, StatusCode::kInvalidArgument, "missing \"vocab\" or \"merges\"");
}

TEST(TokenizerLoad, MergesMustReferToKnownTokens) {
  json j = tinyJson();
  j["model"]["merges"].push_back("x yz");
  expectError(j, StatusCode::kInvalidArgument, "token \"yz\" is not in the vocabulary");
  j = tinyJson();
  j["model"]["merges"].push_back("b c");
  expectError(j, StatusCode::kInvalidArgument, "merged token \"bc\" is not in the vocabulary");
}

TEST(TokenizerLoad, DuplicateAndOutOfRangeIds) {
  json j = tinyJson();
  j["model"]["vocab"]["zz"] = 256;
  expectError(j, StatusCode::kInvalidArgument, "id 256 is used by both");
  j = tinyJson();
  j["model"]["vocab"]["zz"] = -1;
  expectError(j, StatusCode::kInvalidArgument, "out of range");
  j = tinyJson();
  j["model"]["vocab"]["zz"] = int64_t{1} << 40;
  expectError(j, StatusCode::kInvalidArgument, "out of range");
  j = tinyJson();
  j["added_tokens"][0]["id"] = 300;  // the library would give it 258
  expectError(j, StatusCode::kInvalidArgument, "would assign 258");
  j = tinyJson();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["id"] = 259;
  expectError(j, StatusCode::kInvalidArgument, "duplicate content");
  j = tinyJson();
  j["added_tokens"][0]["content"] = "";
  expectError(j, StatusCode::kInvalidArgument, "empty content");
}

TEST(TokenizerLoad, UnsupportedFeaturesAreNamed) {
  struct Case {
    std::function<void(json&)> edit;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer \"NFC\""},
      {[](json& j) { j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}}); }, "normalizer \"Lowercase\""},
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, "model type \"WordPiece\""},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix"},
      {[](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "end_of_word_suffix"},
      {[](json& j) { j["model"]["frobnicate"] = true; }, "unknown field \"frobnicate\""},
      {[](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer \"Whitespace\""},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer null"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }, "exactly one ByteLevel"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["extra"] = 1; }, "unknown field \"extra\""},
      {[](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder \"WordPiece\""},
      {[](json& j) { j["decoder"] = nullptr; }, "decoder null"},
      {[](json& j) { j["post_processor"] = {{"type", "Frobnicate"}}; }, "post_processor \"Frobnicate\""},
      {[](json& j) { j["truncation"] = {{"max_length", 5}}; }, "truncation"},
      {[](json& j) { j["padding"] = {{"length", 5}}; }, "padding"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?i)abc"; }, "inline options"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{Han}+"; }, "\\p{Han}"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a)\\1"; }, "escape '\\1'"},
      {[](json& j) { j["added_tokens"][0]["frobnicate"] = 1; }, "unknown field \"frobnicate\""},
      {[](json& j) {
         j["model"]["unk_token"] = "<unk>";
         j["model"]["vocab"].erase("a");
         j["model"]["merges"] = json::array();
         j["added_tokens"][0]["id"] = 257;  // one vocabulary entry fewer
       }, "unk_token"},
  };
  for (const Case& c : cases) {
    json j = tinyJson();
    c.edit(j);
    SCOPED_TRACE(c.fragment);
    expectError(j, StatusCode::kUnimplemented, c.fragment);
  }
  // A regex that is not a regex at all is malformed input.
  json j = tinyJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(abc";
  expectError(j, StatusCode::kInvalidArgument, "unclosed");
}

TEST(TokenizerLoad, AMissingByteIsDroppedLikeTheLibraryDoes) {
  // Without an unknown token the library silently drops characters that have
  // no symbol; so does LatentGate, exactly.
  json j = tinyJson();
  j["model"]["vocab"].erase("a");
  j["model"]["merges"] = json::array();
  j["added_tokens"][0]["id"] = 257;  // one vocabulary entry fewer
  auto t = Tokenizer::loadFromJson(j.dump());
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(*(*t)->encode("cab"), (std::vector<int32_t>{'c', 'b'}));
}

}  // namespace
}  // namespace lg::text::testing

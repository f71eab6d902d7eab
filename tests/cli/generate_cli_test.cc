// `latentgate generate` as a separate process on a demo checkpoint made by
// `latentgate model init`: JSON lines in, one JSON line per finished request
// out, all batched together; bad lines are reported by index while the
// others run; the text equals the tokenizer's decode of the ids; greedy runs
// repeat; --cache-dir makes a second process reuse the first one's prompt
// blocks.
#include <map>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/tokenizer/tokenizer.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace lg::cli::testing {
namespace {

using nlohmann::json;

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new test::TempDir("lg_generate_model");
    // Random EOS row: replies run to max_tokens, so lengths are known.
    auto r = test::runProcess({test::latentgateBinary(), "model", "init", "--preset", "demo", "--out",
                               model_dir_->path(), "--end-token-rate", "0"}, "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete model_dir_;
    model_dir_ = nullptr;
  }

  // Runs generate --json; returns the output lines keyed by "index".
  std::map<int, json> generate(const std::string& input, std::vector<std::string> extra, int expected_exit = 0) {
    std::vector<std::string> argv = {test::latentgateBinary(), "generate", "--model", model_dir_->path(), "--json",
                                     "--threads", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = test::runProcess(argv, input, {"LATENTGATE_ENGINE_POOL_BLOCKS=256"});
    EXPECT_EQ(r.exit_code, expected_exit) << r.err;
    std::map<int, json> out;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      json j = json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << line;
      if (j.is_discarded()) continue;
      EXPECT_FALSE(out.count(j["index"].get<int>())) << "two lines for index " << j["index"];
      out[j["index"].get<int>()] = j;
    }
    return out;
  }

  static test::TempDir* model_dir_;
};

test::TempDir* GenerateCliTest::model_dir_ = nullptr;

TEST_F(GenerateCliTest, JsonLinesAreBatchedAndBadLinesReportedByIndex) {
  const std::string input =
      R"({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}], "max_tokens": 9, "temperature": 0})"
      "\n"
      R"({"prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0})"
      "\n"
      "not json\n"
      R"({"prompt": "x", "max_tokens": 0})"
      "\n"
      R"({"prompt": "Sampled, with a seed", "max_tokens": 6, "temperature": 0.8, "top_p": 0.9, "seed": 3})"
      "\n";
  std::map<int, json> out = generate(input, {}, /*expected_exit=*/1);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_TRUE(out[2].contains("error"));
  EXPECT_EQ(out[3]["error"]["reason"], "max_tokens");
  auto tokenizer = text::Tokenizer::loadFromDir(model_dir_->path());
  ASSERT_TRUE(tokenizer.isOk());
  for (int i : {0, 1, 4}) {
    const json& r = out[i];
    ASSERT_TRUE(r.contains("token_ids")) << r.dump();
    EXPECT_EQ(r["finish_reason"], "length") << r.dump();
    const auto ids = r["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(r["usage"]["completion_tokens"].get<size_t>(), ids.size());
    EXPECT_EQ(r["text"].get<std::string>(), (*tokenizer)->decode(ids).value());
  }
  EXPECT_EQ(out[0]["token_ids"].size(), 9u);
  EXPECT_EQ(out[1]["token_ids"].size(), 5u);
  // "The quick brown fox" is 4 tokens, the chat prompt renders with BOS and markers.
  EXPECT_EQ(out[1]["usage"]["prompt_tokens"], 4);
  // Greedy and seeded requests repeat exactly in another process.
  std::map<int, json> again = generate(input, {}, 1);
  for (int i : {0, 1, 4}) EXPECT_EQ(again[i]["token_ids"], out[i]["token_ids"]) << i;
}

TEST_F(GenerateCliTest, CacheDirReusesPromptsAcrossProcesses) {
  test::TempDir cache;
  const std::string system(3000, 'a');  // a long shared system prompt
  const std::string first =
      json({{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "one"}}}},
            {"max_tokens", 70},
            {"temperature", 0}})
          .dump() +
      "\n";
  std::map<int, json> a = generate(first, {"--cache-dir", cache.file("kv")});
  EXPECT_EQ(a[0]["usage"]["cached_tokens"], 0);
  // The same request in a new process: the prompt's whole blocks come from disk.
  std::map<int, json> b = generate(first, {"--cache-dir", cache.file("kv")});
  const int prompt_tokens = a[0]["usage"]["prompt_tokens"];
  EXPECT_EQ(b[0]["usage"]["cached_tokens"], (prompt_tokens - 1) / 64 * 64);
  EXPECT_EQ(b[0]["token_ids"], a[0]["token_ids"]);
}

// The demo preset as `serve` makes it: its end tokens make sampled replies
// end (clients such as Codex CLI fail a turn cut at its length limit).
TEST(DemoModelTest, SampledRepliesEndBeforeTheirLimit) {
  test::TempDir dir("lg_demo_ends");
  auto r = test::runProcess({test::latentgateBinary(), "model", "init", "--preset", "demo", "--out", dir.file("m")}, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string input;
  for (int i = 1; i <= 16; ++i) {
    input += json({{"messages", {{{"role", "system"}, {"content", "You are assistant " + std::to_string(i) + "."}},
                                 {{"role", "user"}, {"content", "Question " + std::to_string(i) + ": explain."}}}},
                   {"max_tokens", 300},
                   {"temperature", 1},
                   {"seed", i}})
                 .dump() +
             "\n";
  }
  r = test::runProcess({test::latentgateBinary(), "generate", "--model", dir.file("m"), "--json", "--threads", "2"}, input,
                       {"LATENTGATE_ENGINE_POOL_BLOCKS=256"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int ended = 0, lines = 0;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line); ++lines) {
    const json j = json::parse(line);
    if (j["finish_reason"] == "stop") ++ended;
  }
  EXPECT_EQ(lines, 16);
  EXPECT_GE(ended, 14) << r.out;
}

}  // namespace
}  // namespace lg::cli::testing

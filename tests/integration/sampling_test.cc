// The sampling surface through the whole server over TLS: `n` choices of one
// prompt (computed once, the others reuse its blocks through the cache) and
// logit_bias, read back from the responses and the server's own ledger.
#include <set>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;
using testing::CurlReply;

class SamplingTest : public test::OneKeyServerTest {
 protected:
  CurlReply post(const std::string& path, const json& body) { return call("POST", path, body, "", {"-N"}); }
  billing::LedgerEntry entryOf(const CurlReply& r) {
    return OneKeyServerTest::entryOf(r.header("x-request-id").value_or(""));
  }
};

// A prompt of a few blocks (the harness's block is 16 tokens).
json longMessages() {
  std::string text = "Please summarise the following notes about prefix caching and latent attention. ";
  for (int i = 0; i < 6; ++i) text += "Note " + std::to_string(i) + ": a block of latents is reused when its prefix matches. ";
  return json::array({{{"role", "user"}, {"content", text}}});
}

TEST_F(SamplingTest, NChoicesComputeThePromptOnceAndEachIsAnswered) {
  const CurlReply r = post("/v1/chat/completions", {{"model", "demo"}, {"messages", longMessages()},
                                                     {"n", 3}, {"max_tokens", 6}, {"seed", 11}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  ASSERT_EQ(body["choices"].size(), 3u) << r.body;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["finish_reason"], "length");
  }
  const int64_t prompt = body["usage"]["prompt_tokens"].get<int64_t>() / 3;
  ASSERT_GT(prompt, 64);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3 * prompt);
  EXPECT_EQ(body["usage"]["completion_tokens"], 3 * 6);

  // The prompt ran through the engine once: choices 2 and 3 hit every full
  // block the first one computed (they waited for them in the cache).
  const billing::LedgerEntry e = entryOf(r);
  EXPECT_EQ(e.choices, 3);
  EXPECT_EQ(e.prompt_tokens, 3 * prompt);
  EXPECT_LT(e.miss_tokens, prompt + 3 * 16) << "hits " << e.hitTokens();
  EXPECT_GE(e.hitTokens(), 2 * (prompt - 16));
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], e.hitTokens());
}

TEST_F(SamplingTest, NChoicesStreamEachUnderItsOwnIndex) {
  const CurlReply r = post("/v1/chat/completions", {{"model", "demo"}, {"messages", longMessages()}, {"n", 2},
                                                     {"max_tokens", 5}, {"stream", true},
                                                     {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::set<int> indexes;
  std::set<int> finished;
  json usage;
  size_t at = 0;
  while ((at = r.body.find("data: {", at)) != std::string::npos) {
    const size_t end = r.body.find('\n', at);
    const json chunk = json::parse(r.body.substr(at + 6, end - at - 6));
    for (const json& c : chunk["choices"]) {
      indexes.insert(c["index"].get<int>());
      if (!c["finish_reason"].is_null()) finished.insert(c["index"].get<int>());
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    at = end;
  }
  EXPECT_EQ(indexes, (std::set<int>{0, 1}));
  EXPECT_EQ(finished, (std::set<int>{0, 1}));
  EXPECT_EQ(usage["completion_tokens"], 10) << r.body;
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
}

TEST_F(SamplingTest, LogitBiasOfPlus100MakesTheTokenTheOnlyChoice) {
  const auto ids = harness_->tokenizer().encode(" cache");
  ASSERT_TRUE(ids.isOk());
  ASSERT_EQ(ids->size(), 1u);
  const int32_t token = ids->front();
  const CurlReply r = post("/v1/completions", {{"model", "demo"}, {"prompt", "Say it:"}, {"max_tokens", 4},
                                                {"temperature", 1.0}, {"seed", 5},
                                                {"logit_bias", {{std::to_string(token), 100}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["choices"][0]["text"], " cache cache cache cache") << r.body;

  // Without it the random model says something else.
  const CurlReply free = post("/v1/completions", {{"model", "demo"}, {"prompt", "Say it:"}, {"max_tokens", 4},
                                                   {"temperature", 1.0}, {"seed", 5}});
  ASSERT_EQ(free.status, 200) << free.body;
  EXPECT_NE(json::parse(free.body)["choices"][0]["text"], " cache cache cache cache");
}

}  // namespace
}  // namespace lg::proxy

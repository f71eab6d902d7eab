// The parts of the OpenAI surface agent SDKs use beyond a plain request,
// through the whole server over TLS: GET /v1/models/{id}, Responses
// item_reference resolved from stored responses, truncation "auto", and the
// fields OpenAI's schema requires in a response (usage's cache_write_tokens,
// a function tool's echoed strict).
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;
using testing::CurlReply;

class OpenAiSurfaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = test::Harness::start(test::HarnessOptions{});
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    key_ = harness_->newKey("team-a");
  }
  CurlReply call(const std::string& method, const std::string& path, const json& body = nullptr,
                 const std::string& key = "") {
    std::vector<std::string> extra = {"-H", "Authorization: Bearer " + (key.empty() ? key_ : key)};
    if (!body.is_null()) extra.insert(extra.end(), {"-H", "content-type: application/json", "--data-binary", body.dump()});
    return testing::curlOverTls(harness_->caFile(), harness_->port(), method, path, extra, 120);
  }
  std::unique_ptr<test::Harness> harness_;
  std::string key_;
};

TEST_F(OpenAiSurfaceTest, ModelsRetrieveReturnsEachListedModelAnd404Otherwise) {
  const json list = json::parse(call("GET", "/v1/models").body);
  ASSERT_GE(list["data"].size(), 2u);
  for (const json& m : list["data"]) {
    const std::string id = m["id"];
    std::string encoded;
    for (char c : id) encoded += c == '/' ? std::string("%2F") : std::string(1, c);
    const CurlReply r = call("GET", "/v1/models/" + encoded);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body), m);
  }
  const CurlReply missing = call("GET", "/v1/models/gpt-4o");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "model_not_found");
}

TEST_F(OpenAiSurfaceTest, ItemReferencesAreResolvedFromTheKeysOwnStoredResponses) {
  std::string ask = "Say hi to everyone in the room, one by one:";
  for (int i = 0; i < 12; ++i) ask += " person" + std::to_string(i);
  const CurlReply first = call("POST", "/v1/responses", {{"model", "demo"}, {"input", ask}, {"max_output_tokens", 6}});
  ASSERT_EQ(first.status, 200) << first.body;
  const json response = json::parse(first.body);
  const std::string item = response["output"].back()["id"];
  // Its usage has the fields OpenAI's schema requires.
  EXPECT_TRUE(response["usage"]["input_tokens_details"].contains("cache_write_tokens")) << response["usage"];
  const json input = json::array({{{"role", "user"}, {"content", ask}},
                                  {{"type", "item_reference"}, {"id", item}},
                                  {{"role", "user"}, {"content", "Again."}}});
  const CurlReply second = call("POST", "/v1/responses", {{"model", "demo"}, {"input", input}, {"max_output_tokens", 6}});
  ASSERT_EQ(second.status, 200) << second.body;
  // The referenced reply is part of the prompt: the first turn's tokens are cache hits.
  EXPECT_GE(json::parse(second.body)["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 32) << second.body;

  // Another key cannot name it (answered as an unknown id), nor can anyone name a made-up one.
  const std::string other = harness_->newKey("team-b");
  const CurlReply foreign = call("POST", "/v1/responses", {{"model", "demo"}, {"input", input}}, other);
  EXPECT_EQ(foreign.status, 400) << foreign.body;
  EXPECT_EQ(json::parse(foreign.body)["error"]["code"], "item_not_found");
  EXPECT_EQ(json::parse(foreign.body)["error"]["param"], "input[1].id");
  json made_up = input;
  made_up[1]["id"] = "msg_nothing_0";
  EXPECT_EQ(call("POST", "/v1/responses", {{"model", "demo"}, {"input", made_up}}).status, 400);
}

TEST_F(OpenAiSurfaceTest, TruncationAutoDropsTheOldestItemsToFitAndDisabledRefuses) {
  // The harness's context is 512 tokens: 12 turns of ~60 tokens do not fit.
  json input = json::array();
  for (int i = 0; i < 12; ++i) {
    std::string text = "Turn " + std::to_string(i) + ":";
    for (int w = 0; w < 25; ++w) text += " word" + std::to_string(w);
    input.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", text}});
  }
  const json body = {{"model", "demo"}, {"instructions", "Be brief."}, {"input", input}, {"max_output_tokens", 8}};
  const CurlReply refused = call("POST", "/v1/responses", body);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "context_length_exceeded");

  json truncated = body;
  truncated["truncation"] = "auto";
  const CurlReply fit = call("POST", "/v1/responses", truncated);
  ASSERT_EQ(fit.status, 200) << fit.body;
  const json r = json::parse(fit.body);
  EXPECT_EQ(r["truncation"], "auto");
  const int input_tokens = r["usage"]["input_tokens"];
  EXPECT_LE(input_tokens + 8, 512);
  EXPECT_GT(input_tokens, 256) << "dropped more than needed";
}

TEST_F(OpenAiSurfaceTest, EchoedFunctionToolsCarryStrict) {
  const json tools = json::array({{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}},
                                  {{"type", "function"}, {"name", "g"}, {"strict", false}}});
  const CurlReply r = call("POST", "/v1/responses",
                           {{"model", "demo"}, {"input", "hi"}, {"tools", tools}, {"max_output_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json echoed = json::parse(r.body)["tools"];
  EXPECT_EQ(echoed[0]["strict"], true);  // the Responses API's default
  EXPECT_EQ(echoed[1]["strict"], false);
  EXPECT_TRUE(echoed[1]["parameters"].is_null());
}

}  // namespace
}  // namespace lg::proxy

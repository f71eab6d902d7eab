// Replies come back as they were generated (proxy/gateway/reply_ids.h), through
// the real server: a multi-turn conversation of the random model's replies
// (the integration model: random weights, replies of exactly max_tokens
// tokens, arbitrary ids whose text the tokenizer would write otherwise) hits,
// at every turn, on every block the previous turn computed, its reply's
// included; with cache.reply_ids_max_bytes = 0 nothing is kept or given.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/harness.h"

namespace lg {
namespace {

using nlohmann::json;

constexpr const char* kModel = "demo";

struct Turn {
  int64_t prompt = 0, hit = 0, completion = 0;
};

// A conversation of `turns` turns, each reply appended before the next user
// message, as an agent sends it. Returns each turn's usage.
std::vector<Turn> converse(test::Harness& h, const std::string& key, int turns, std::vector<std::string>* replies) {
  json messages = json::array({{{"role", "system"}, {"content", "You are a terse test agent. Answer in one line."}},
                               {{"role", "user"}, {"content", "turn 0: list the files in the repository"}}});
  std::vector<Turn> out;
  for (int t = 0; t < turns; ++t) {
    const json body = {{"model", kModel}, {"messages", messages}, {"max_tokens", 24}, {"temperature", 0}};
    const auto r = h.call("POST", "/v1/chat/completions", key, body);
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return out;
    const json j = json::parse(r.body);
    const json& u = j["usage"];
    out.push_back({u["prompt_tokens"].get<int64_t>(), u["prompt_cache_hit_tokens"].get<int64_t>(),
                   u["completion_tokens"].get<int64_t>()});
    const json& message = j["choices"][0]["message"];
    const std::string content = message["content"].is_string() ? message["content"].get<std::string>() : "";
    if (replies) replies->push_back(content);
    messages.push_back({{"role", "assistant"}, {"content", content}});
    messages.push_back({{"role", "user"}, {"content", "turn " + std::to_string(t + 1) + ": now run the tests"}});
  }
  return out;
}

uint64_t metric(test::Harness& h, const std::string& name) {
  const auto r = h.call("GET", "/metrics", h.adminKey());
  EXPECT_EQ(r.status, 200);
  const size_t at = r.body.find("\n" + name + " ");
  if (at == std::string::npos) return UINT64_MAX;
  return std::stoull(r.body.substr(at + name.size() + 2));
}

TEST(ReplyIdsServerTest, EveryTurnHitsEveryBlockTheEarlierTurnsComputed) {
  auto h = test::Harness::start();
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string key = (*h)->newKey("team-a");
  const int block = (*h)->config().cache.block_tokens;
  std::vector<std::string> replies;
  const std::vector<Turn> turns = converse(**h, key, 5, &replies);
  ASSERT_EQ(turns.size(), 5u);
  for (size_t t = 1; t < turns.size(); ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    // The previous turn computed its prompt and every reply token but the
    // last (sampled, never fed back); all of their whole blocks hit.
    const int64_t computed = turns[t - 1].prompt + turns[t - 1].completion - 1;
    EXPECT_EQ(turns[t].hit, computed / block * block);
    EXPECT_GT(turns[t].prompt, computed);
  }
  // Turn t held t earlier replies, each given its generated ids.
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_hits_total"), 0u + 1 + 2 + 3 + 4);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_misses_total"), 0u);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_stored_total"), 5u);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_entries"), 5u);
  EXPECT_GT(metric(**h, "latentgate_reply_ids_bytes"), 0u);

  // Another team sending team-a's conversation gets none of team-a's ids.
  const json history = json::array(
      {{{"role", "system"}, {"content", "You are a terse test agent. Answer in one line."}},
       {{"role", "user"}, {"content", "turn 0: list the files in the repository"}},
       {{"role", "assistant"}, {"content", replies[0]}},
       {{"role", "user"}, {"content", "turn 1: now run the tests"}}});
  const auto r = (*h)->call("POST", "/v1/chat/completions", (*h)->newKey("team-b"),
                            json{{"model", kModel}, {"messages", history}, {"max_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["prompt_cache_hit_tokens"], 0);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_hits_total"), 0u + 1 + 2 + 3 + 4);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_misses_total"), 1u);
}

TEST(ReplyIdsServerTest, WithReplyIdsOffNothingIsKeptOrSubstituted) {
  test::HarnessOptions o;
  o.config.cache.reply_ids_max_bytes = 0;
  auto h = test::Harness::start(std::move(o));
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string key = (*h)->newKey("team-a");
  const int block = (*h)->config().cache.block_tokens;
  const std::vector<Turn> turns = converse(**h, key, 3, nullptr);
  ASSERT_EQ(turns.size(), 3u);
  // The canonical ids: a turn hits at most what the previous one computed
  // (all of it only where the reply's text re-encodes to its own ids).
  for (size_t t = 1; t < turns.size(); ++t) {
    const int64_t computed = turns[t - 1].prompt + turns[t - 1].completion - 1;
    EXPECT_LE(turns[t].hit, computed / block * block);
  }
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_stored_total"), 0u);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_hits_total"), 0u);
  EXPECT_EQ(metric(**h, "latentgate_reply_ids_entries"), 0u);
}

}  // namespace
}  // namespace lg

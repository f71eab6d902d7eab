// The reply-id store (proxy/gateway/reply_ids.h): keyed by HMAC, per team,
// bounded in bytes, expiring; and the substitution of a history's assistant
// messages over the real DeepSeek-V3 tokenizer and chat template, with the
// cases where it must not happen. tests/integration/reply_ids_test.cc runs it
// through the real server.
#include "proxy/gateway/reply_ids.h"

#include <gtest/gtest.h>

#include "proxy/openai/prompt_encoder.h"
#include "tests/proxy/gateway/deepseek_v3_text.h"

namespace lg::proxy {
namespace {

using Clock = ReplyIdStore::Clock;

using v3::encoder;
using v3::tokenizer;

int32_t eos() { return *tokenizer().addedTokenId("<｜end▁of▁sentence｜>"); }

std::vector<int32_t> encode(std::string_view s) { return *tokenizer().encode(s); }

// Ids for `pieces`, each encoded alone: a tokenization of their concatenation
// that the tokenizer itself would not make.
std::vector<int32_t> nonCanonical(std::initializer_list<std::string_view> pieces) {
  std::vector<int32_t> out;
  for (std::string_view p : pieces) {
    std::vector<int32_t> ids = encode(p);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

openai::ChatMessage msg(openai::Role role, std::string content) {
  openai::ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

std::vector<int32_t> encodeChat(const openai::ChatPrompt& p) {
  auto r = encoder().encodeChat(p, "messages");
  EXPECT_TRUE(static_cast<bool>(r));
  return r->ids;
}

serving::StreamEvent delta(std::string text, std::vector<int32_t> ids) {
  serving::StreamEvent e;
  e.text = std::move(text);
  e.token_ids = std::move(ids);
  return e;
}

serving::StreamEvent finalEvent(serving::FinishReason reason, int32_t end_token) {
  serving::StreamEvent e;
  e.final = true;
  e.finish_reason = reason;
  e.end_token = end_token;
  return e;
}

// The model's reply to `prompt`: `generated` (its text is their decode),
// ended by the end token or cut by max_tokens.
void record(ReplyIdStore& store, const std::string& scope, const openai::ChatPrompt& prompt,
            const std::vector<int32_t>& prompt_ids, const std::vector<int32_t>& generated, bool ended = true,
            bool structured = false) {
  auto encoded = encoder().encodeChat(prompt, "messages");
  ReplyRecorder rec(store, scope, prompt_ids, encoder().outputOptions(prompt, *encoded), 1, structured);
  rec.onEvent(0, delta(*tokenizer().decode(generated), generated));
  rec.onEvent(0, finalEvent(ended ? serving::FinishReason::kStop : serving::FinishReason::kLength,
                            ended ? eos() : -1));
}

struct Conversation {
  openai::ChatPrompt first;  // system, user
  std::vector<int32_t> first_ids;
  std::string reply_text;
  std::vector<int32_t> reply_ids;  // non-canonical
  openai::ChatPrompt second;       // ... the reply, another user turn

  Conversation() {
    first.messages = {msg(openai::Role::kSystem, "You are a careful coding agent."),
                      msg(openai::Role::kUser, "Say hello.")};
    first_ids = encodeChat(first);
    reply_ids = nonCanonical({"Hel", "lo, w", "orld! I am", " here."});
    reply_text = *tokenizer().decode(reply_ids);
    second = first;
    second.messages.push_back(msg(openai::Role::kAssistant, reply_text));
    second.messages.push_back(msg(openai::Role::kUser, "Now say goodbye."));
  }
};

TEST(ReplyIdsTest, AHistoryGetsTheGeneratedIdsRightAfterThePromptTheyWereGeneratedFor) {
  ReplyIdStore store({});
  Conversation c;
  ASSERT_NE(c.reply_ids, encode(c.reply_text)) << "the test needs a non-canonical tokenization";
  record(store, "team:a", c.first, c.first_ids, c.reply_ids);
  EXPECT_EQ(store.stats().stored, 1u);

  const std::vector<int32_t> canonical = encodeChat(c.second);
  std::vector<int32_t> ids = canonical;
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", c.second, ids), 1u);
  // The prompt it was generated for, then exactly what the model generated
  // (the end token included), then the rest as the template renders it.
  std::vector<int32_t> expected_prefix = c.first_ids;
  expected_prefix.insert(expected_prefix.end(), c.reply_ids.begin(), c.reply_ids.end());
  expected_prefix.push_back(eos());
  ASSERT_GE(ids.size(), expected_prefix.size());
  EXPECT_TRUE(std::equal(expected_prefix.begin(), expected_prefix.end(), ids.begin()));
  // The same text: only the tokenization differs.
  EXPECT_EQ(*tokenizer().decode(ids), *tokenizer().decode(canonical));
  EXPECT_NE(ids, canonical);
  EXPECT_EQ(store.stats().hits, 1u);
}

TEST(ReplyIdsTest, EveryEarlierTurnIsSubstitutedInAChain) {
  ReplyIdStore store({});
  Conversation c;
  record(store, "team:a", c.first, c.first_ids, c.reply_ids);
  std::vector<int32_t> second_ids = encodeChat(c.second);
  ASSERT_EQ(store.substitute(tokenizer(), "team:a", c.second, second_ids), 1u);
  // The second reply, to the substituted prompt.
  const std::vector<int32_t> reply2 = nonCanonical({"Good", "bye", " fr", "iend."});
  record(store, "team:a", c.second, second_ids, reply2);
  openai::ChatPrompt third = c.second;
  third.messages.push_back(msg(openai::Role::kAssistant, *tokenizer().decode(reply2)));
  third.messages.push_back(msg(openai::Role::kUser, "Thanks."));
  std::vector<int32_t> ids = encodeChat(third);
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", third, ids), 2u);
  std::vector<int32_t> expected_prefix = second_ids;
  expected_prefix.insert(expected_prefix.end(), reply2.begin(), reply2.end());
  expected_prefix.push_back(eos());
  EXPECT_TRUE(std::equal(expected_prefix.begin(), expected_prefix.end(), ids.begin()));
}

TEST(ReplyIdsTest, AReplyCutByMaxTokensIsSubstitutedAndTheTemplatesEndTokenKept) {
  ReplyIdStore store({});
  Conversation c;
  record(store, "team:a", c.first, c.first_ids, c.reply_ids, /*ended=*/false);
  std::vector<int32_t> ids = encodeChat(c.second);
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", c.second, ids), 1u);
  std::vector<int32_t> expected_prefix = c.first_ids;
  expected_prefix.insert(expected_prefix.end(), c.reply_ids.begin(), c.reply_ids.end());
  expected_prefix.push_back(eos());  // the template's
  EXPECT_TRUE(std::equal(expected_prefix.begin(), expected_prefix.end(), ids.begin()));
}

TEST(ReplyIdsTest, AnotherTeamNeverGetsTheIds) {
  ReplyIdStore store({});
  Conversation c;
  record(store, "team:a", c.first, c.first_ids, c.reply_ids);
  const std::vector<int32_t> canonical = encodeChat(c.second);
  std::vector<int32_t> ids = canonical;
  EXPECT_EQ(store.substitute(tokenizer(), "team:b", c.second, ids), 0u);
  EXPECT_EQ(ids, canonical);
  // A team id reused after a deletion is a new scope too.
  EXPECT_EQ(store.substitute(tokenizer(), "team:a#1", c.second, ids), 0u);
  EXPECT_EQ(store.stats().misses, 2u);
  EXPECT_NE(store.key("team:a", c.reply_text, {}), store.key("team:b", c.reply_text, {}));
}

TEST(ReplyIdsTest, KeysAreKeyedHashesOfTheTextAndTheToolCalls) {
  ReplyIdStore a({}, {}, std::string(32, 'a')), a2({}, {}, std::string(32, 'a')), b({}, {}, std::string(32, 'b'));
  ReplyIdStore random1({}), random2({});
  const ReplyToolCall call{"get_weather", "{\"city\": \"Paris\"}"};
  EXPECT_EQ(a.key("team:t", "hi", {}), a2.key("team:t", "hi", {}));
  EXPECT_NE(a.key("team:t", "hi", {}), b.key("team:t", "hi", {}));  // the secret matters
  EXPECT_NE(random1.key("team:t", "hi", {}), random2.key("team:t", "hi", {}));  // each process makes its own
  EXPECT_NE(a.key("team:t", "hi", {}), a.key("team:t", "hi ", {}));
  EXPECT_NE(a.key("team:t", "", std::span(&call, 1)), a.key("team:t", "", {}));
  const ReplyToolCall other{"get_weather", "{\"city\":\"Paris\"}"};
  EXPECT_NE(a.key("team:t", "", std::span(&call, 1)), a.key("team:t", "", std::span(&other, 1)));
  // Fields are length-delimited: moving bytes between them changes the key.
  const ReplyToolCall shifted{"get_weathe", "r{\"city\": \"Paris\"}"};
  EXPECT_NE(a.key("team:t", "", std::span(&call, 1)), a.key("team:t", "", std::span(&shifted, 1)));
  EXPECT_NE(a.key("team:t", "x", {}), a.key("team:tx", "", {}));
}

TEST(ReplyIdsTest, TheByteBoundEvictsTheLeastRecentlyUsed) {
  KeptReply r;
  r.ids.assign(100, 7);
  const size_t each = ReplyIdStore::footprint(r);
  ReplyIdStore store({static_cast<int64_t>(3 * each), 0});
  auto k = [&](int i) { return store.key("team:a", "reply " + std::to_string(i), {}); };
  for (int i = 0; i < 3; ++i) store.put(k(i), r);
  EXPECT_EQ(store.stats().entries, 3u);
  ASSERT_NE(store.find(k(0)), nullptr);  // 1 is now the least recently used
  store.put(k(3), r);
  ReplyIdStore::Stats s = store.stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_LE(s.bytes, 3 * each);
  EXPECT_EQ(s.evicted, 1u);
  EXPECT_NE(store.find(k(0)), nullptr);
  EXPECT_EQ(store.find(k(1)), nullptr);
  EXPECT_NE(store.find(k(2)), nullptr);
  EXPECT_NE(store.find(k(3)), nullptr);
  // One bigger than the whole budget is not kept; 0 bytes keeps nothing.
  KeptReply huge;
  huge.ids.assign(1000, 7);
  store.put(k(9), huge);
  EXPECT_EQ(store.find(k(9)), nullptr);
  EXPECT_EQ(store.stats().skipped[static_cast<size_t>(ReplySkip::kTooLarge)], 1u);
  ReplyIdStore off({0, 0});
  EXPECT_FALSE(off.enabled());
  off.put(k(0), r);
  EXPECT_EQ(off.find(k(0)), nullptr);
}

TEST(ReplyIdsTest, RepliesUnusedForTheTtlExpire) {
  Clock::time_point now = Clock::now();
  ReplyIdStore store({1 << 20, 60}, [&] { return now; });
  KeptReply r;
  r.ids = {1, 2, 3};
  const ReplyKey a = store.key("team:a", "a", {}), b = store.key("team:a", "b", {});
  store.put(a, r);
  store.put(b, r);
  now += std::chrono::seconds(50);
  EXPECT_NE(store.find(a), nullptr);  // used: its expiry starts again
  now += std::chrono::seconds(20);
  EXPECT_NE(store.find(a), nullptr);
  EXPECT_EQ(store.find(b), nullptr);
  EXPECT_EQ(store.stats().expired, 1u);
  now += std::chrono::seconds(61);
  store.put(store.key("team:a", "c", {}), r);  // a put drops what expired
  EXPECT_EQ(store.stats().entries, 1u);
  EXPECT_EQ(store.stats().expired, 2u);
}

TEST(ReplyIdsTest, AnEditedEarlierMessageLeavesTheCanonicalIds) {
  ReplyIdStore store({});
  Conversation c;
  record(store, "team:a", c.first, c.first_ids, c.reply_ids);
  openai::ChatPrompt edited = c.second;
  edited.messages[0].content = "You are a careless coding agent.";
  const std::vector<int32_t> canonical = encodeChat(edited);
  std::vector<int32_t> ids = canonical;
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", edited, ids), 0u);
  EXPECT_EQ(ids, canonical);
  EXPECT_EQ(store.stats().rejected[static_cast<size_t>(ReplyReject::kPrefix)], 1u);
}

TEST(ReplyIdsTest, IdsThatDoNotRenderAsTheMessageAreNotSubstituted) {
  ReplyIdStore store({});
  Conversation c;
  // Kept under the message's key, but other text (as if the template rewrote it).
  KeptReply r;
  r.ids = nonCanonical({"Hel", "lo, there"});
  r.ids.push_back(eos());
  r.prompt_tokens = static_cast<uint32_t>(c.first_ids.size());
  r.prompt_digest = promptDigest(c.first_ids);
  store.put(store.key("team:a", c.reply_text, {}), r);
  const std::vector<int32_t> canonical = encodeChat(c.second);
  std::vector<int32_t> ids = canonical;
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", c.second, ids), 0u);
  EXPECT_EQ(ids, canonical);
  EXPECT_EQ(store.stats().rejected[static_cast<size_t>(ReplyReject::kText)], 1u);
}

TEST(ReplyIdsTest, UnsafeRepliesAreNotKeptAndCounted) {
  ReplyIdStore store({});
  Conversation c;
  auto parser = encoder().outputOptions(c.first, *encoder().encodeChat(c.first, "messages"));
  {  // a stop string: kStop without an end token
    ReplyRecorder rec(store, "team:a", c.first_ids, parser, 1, false);
    rec.onEvent(0, delta(c.reply_text, c.reply_ids));
    rec.onEvent(0, finalEvent(serving::FinishReason::kStop, -1));
  }
  // structured output
  record(store, "team:a", c.first, c.first_ids, c.reply_ids, true, /*structured=*/true);
  {  // reasoning: the template drops it from the history
    auto reasoning = parser;
    reasoning.starts_in_reasoning = true;
    ReplyRecorder rec(store, "team:a", c.first_ids, reasoning, 1, false);
    const std::vector<int32_t> ids = nonCanonical({"hmm</think>", "Hello"});
    rec.onEvent(0, delta(*tokenizer().decode(ids), ids));
    rec.onEvent(0, finalEvent(serving::FinishReason::kStop, eos()));
  }
  {  // cancelled
    ReplyRecorder rec(store, "team:a", c.first_ids, parser, 1, false);
    rec.onEvent(0, delta(c.reply_text, c.reply_ids));
    rec.onEvent(0, finalEvent(serving::FinishReason::kCancelled, -1));
  }
  const ReplyIdStore::Stats s = store.stats();
  EXPECT_EQ(s.stored, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.skipped[static_cast<size_t>(ReplySkip::kStopString)], 1u);
  EXPECT_EQ(s.skipped[static_cast<size_t>(ReplySkip::kStructured)], 1u);
  EXPECT_EQ(s.skipped[static_cast<size_t>(ReplySkip::kReasoning)], 1u);
  EXPECT_EQ(s.skipped[static_cast<size_t>(ReplySkip::kUnfinished)], 1u);
}

// DeepSeek V3's template renders two calls exactly as the model writes them,
// and drops the end of a lone call (its `<｜tool▁calls▁end｜><｜end▁of▁sentence｜>`
// comes only after a second call): the first is substituted, the second not.
struct ToolCallTurn {
  openai::ChatPrompt first;
  std::vector<int32_t> first_ids;
  std::vector<int32_t> generated;
  openai::ChatPrompt second;

  explicit ToolCallTurn(bool two_calls) {
    first.messages = {msg(openai::Role::kUser, "Weather and time in Paris?")};
    for (const char* name : {"get_weather", "get_time"}) {
      openai::FunctionTool tool;
      tool.name = name;
      tool.parameters = nlohmann::json{{"type", "object"}};
      first.tools.push_back(tool);
    }
    first_ids = encodeChat(first);
    // What the model wrote: the V3 call format, its markers as added tokens.
    text::PromptText written;
    written.append("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                   "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>",
                   true);
    if (two_calls) {
      written.append("\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"CET\"}\n```"
                     "<｜tool▁call▁end｜>",
                     true);
    }
    written.append("<｜tool▁calls▁end｜>", true);
    generated = *tokenizer().encodePrompt(written);
    second = first;
    openai::ChatMessage call;
    call.role = openai::Role::kAssistant;  // content null, as the client got it
    call.tool_calls = {{"call_1", "get_weather", "{\"city\": \"Paris\"}"}};
    if (two_calls) call.tool_calls.push_back({"call_2", "get_time", "{\"tz\": \"CET\"}"});
    second.messages.push_back(call);
    openai::ChatMessage result = msg(openai::Role::kTool, "sunny");
    result.tool_call_id = "call_1";
    second.messages.push_back(result);
  }
};

TEST(ReplyIdsTest, AToolCallReplyIsSubstitutedWhenTheTemplateRendersItAsWritten) {
  ReplyIdStore store({});
  ToolCallTurn c(/*two_calls=*/true);
  record(store, "team:a", c.first, c.first_ids, c.generated);
  ASSERT_EQ(store.stats().stored, 1u);
  std::vector<int32_t> ids = encodeChat(c.second);
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", c.second, ids), 1u);
  std::vector<int32_t> expected_prefix = c.first_ids;
  expected_prefix.insert(expected_prefix.end(), c.generated.begin(), c.generated.end());
  expected_prefix.push_back(eos());
  ASSERT_GE(ids.size(), expected_prefix.size());
  EXPECT_TRUE(std::equal(expected_prefix.begin(), expected_prefix.end(), ids.begin()));
}

TEST(ReplyIdsTest, AToolCallTheTemplateRendersOtherwiseKeepsItsCanonicalIds) {
  ReplyIdStore store({});
  ToolCallTurn c(/*two_calls=*/false);
  record(store, "team:a", c.first, c.first_ids, c.generated);
  ASSERT_EQ(store.stats().stored, 1u);
  const std::vector<int32_t> canonical = encodeChat(c.second);
  std::vector<int32_t> ids = canonical;
  EXPECT_EQ(store.substitute(tokenizer(), "team:a", c.second, ids), 0u);
  EXPECT_EQ(ids, canonical);
  EXPECT_EQ(store.stats().rejected[static_cast<size_t>(ReplyReject::kText)], 1u);
}

}  // namespace
}  // namespace lg::proxy

// Stored Responses in a real RocksDB billing store (temp dirs): kept and read
// back across a reopen, invisible to every other API key, expired on read, by
// the sweep and on later writes, nothing written for store:false or a failed
// response, synced deletion; and a conversation continued from a record
// parses to the same prompt as the client resending it all.
#include "proxy/gateway/response_store.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "billing/billing_db.h"
#include "proxy/openai/responses_request.h"
#include "proxy/openai/responses_response.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using nlohmann::json;

// A response object as the responder finishes it.
json responseObject(const std::string& id, const std::string& status, json output = json::array()) {
  return json{{"id", id}, {"object", "response"}, {"status", status}, {"output", std::move(output)},
              {"store", true}, {"usage", json{{"input_tokens", 3}, {"output_tokens", 2}}}};
}

json assistantMessage(const std::string& text) {
  return json{{"id", "msg_1"}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"},
              {"content", json::array({json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()},
                                            {"logprobs", json::array()}}})}};
}

// Every key of the store under the stored responses' prefixes.
std::vector<std::string> storedKeys(billing::BillingDb& db) {
  std::vector<std::string> keys;
  for (std::string_view prefix : {"resp/", "respexp/"}) {
    EXPECT_TRUE(db.scan(prefix, [&](std::string_view k, std::string_view) {
                    keys.emplace_back(k);
                    return true;
                  })
                    .isOk());
  }
  return keys;
}

struct FakeClock {
  int64_t now = 1'700'000'000;
  std::function<int64_t()> fn() {
    return [this] { return now; };
  }
};

std::unique_ptr<billing::BillingDb> openDb(const test::TempDir& dir) {
  auto db = billing::BillingDb::open(dir.file("billing"));
  EXPECT_TRUE(db.isOk()) << db.status().toString();
  return std::move(*db);
}

TEST(ResponseStoreTest, KeepsAFinishedResponseAcrossAReopen) {
  test::TempDir dir;
  const json input = inputItems("What is in README.md?");
  {
    auto db = openDb(dir);
    ResponseStore store(*db, {});
    ASSERT_TRUE(store.record("key_a", true, input, responseObject("resp_1", "completed",
                                                                   json::array({assistantMessage("A readme.")})))
                    .isOk());
  }
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  auto got = store.get("key_a", "resp_1");
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  ASSERT_TRUE(got->has_value());
  const StoredResponse& r = **got;
  EXPECT_EQ(r.response["id"], "resp_1");
  EXPECT_EQ(r.response["output"][0]["content"][0]["text"], "A readme.");
  EXPECT_EQ(r.input, input);
  EXPECT_EQ(r.expires_unix - r.created_unix, 30 * 24 * 3600) << "OpenAI's 30 days by default";
  const json conversation = r.conversation();
  ASSERT_EQ(conversation.size(), 2u);
  EXPECT_EQ(conversation[0]["role"], "user");
  EXPECT_EQ(conversation[0]["content"][0], (json{{"type", "input_text"}, {"text", "What is in README.md?"}}));
  EXPECT_EQ(conversation[1]["role"], "assistant");
  // An incomplete response (cut at max_output_tokens) is kept too, as at OpenAI.
  ASSERT_TRUE(store.record("key_a", true, input, responseObject("resp_2", "incomplete")).isOk());
  EXPECT_TRUE(store.get("key_a", "resp_2")->has_value());
}

TEST(ResponseStoreTest, AnotherKeySeesNothingAndCannotDelete) {
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_a", "completed")).isOk());
  auto other = store.get("key_b", "resp_a");
  auto unknown = store.get("key_b", "resp_nope");
  ASSERT_TRUE(other.isOk() && unknown.isOk());
  EXPECT_FALSE(other->has_value());
  EXPECT_FALSE(unknown->has_value());
  auto removed = store.remove("key_b", "resp_a");
  ASSERT_TRUE(removed.isOk());
  EXPECT_FALSE(*removed);
  EXPECT_TRUE(store.get("key_a", "resp_a")->has_value()) << "still the owner's";
  // Ids that are not ours, or would reach into another key's records, find nothing.
  for (const char* id : {"", "resp_a/x", "../key_a/resp_a", "key_a/resp_a"}) {
    EXPECT_FALSE(store.get("key_b", id)->has_value()) << id;
    EXPECT_FALSE(store.get("key_a", std::string("x/") + id)->has_value()) << id;
  }
}

TEST(ResponseStoreTest, StoreFalseAndUnfinishedResponsesWriteNothing) {
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  ASSERT_TRUE(store.record("key_a", false, inputItems("hi"), responseObject("resp_1", "completed")).isOk());
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_2", "failed")).isOk());
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_3", "in_progress")).isOk());
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), json()).isOk()) << "a responder's failure: no response";
  EXPECT_TRUE(storedKeys(*db).empty());
  EXPECT_FALSE(store.get("key_a", "resp_1")->has_value());
}

TEST(ResponseStoreTest, TheRealResponderLeavesNothingAfterAFailure) {
  openai::ResponsesResponder r({});
  serving::StreamEvent e;
  e.final = true;
  e.finish_reason = serving::FinishReason::kCancelled;
  EXPECT_TRUE(r.onEvent(e).error.has_value());
  EXPECT_TRUE(r.finalResponse().is_null());
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), r.finalResponse()).isOk());
  EXPECT_TRUE(storedKeys(*db).empty());
}

TEST(ResponseStoreTest, ExpiredRecordsAreNeverServedAndAreDeleted) {
  test::TempDir dir;
  FakeClock clock;
  auto db = openDb(dir);
  ResponseStore store(*db, {.ttl_s = 100, .now = clock.fn()});
  ASSERT_TRUE(store.record("key_a", true, inputItems("1"), responseObject("resp_1", "completed")).isOk());
  clock.now += 99;
  EXPECT_TRUE(store.get("key_a", "resp_1")->has_value());
  clock.now += 1;
  EXPECT_FALSE(store.get("key_a", "resp_1")->has_value());
  EXPECT_TRUE(storedKeys(*db).empty()) << "the read deleted the record and its expiry entry";
  auto removed = store.remove("key_a", "resp_1");
  ASSERT_TRUE(removed.isOk());
  EXPECT_FALSE(*removed);

  // The sweep deletes the oldest expired records first, at most as many as asked.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store.record("key_a", true, inputItems("x"), responseObject("resp_s" + std::to_string(i), "completed"))
                    .isOk());
    clock.now += 10;
  }
  // resp_s0..s4 expire at +100, +110, ... +140 from their writes; now is 50 past the first.
  clock.now += 70;  // s0, s1 and s2 have expired
  auto swept = store.sweepExpired(2);
  ASSERT_TRUE(swept.isOk());
  EXPECT_EQ(*swept, 2);
  EXPECT_EQ(storedKeys(*db).size(), 2u * 3);
  swept = store.sweepExpired(100);
  ASSERT_TRUE(swept.isOk());
  EXPECT_EQ(*swept, 1);
  EXPECT_TRUE(store.get("key_a", "resp_s3")->has_value());
  EXPECT_TRUE(store.get("key_a", "resp_s4")->has_value());
  EXPECT_EQ(storedKeys(*db).size(), 2u * 2);
}

TEST(ResponseStoreTest, LaterWritesSweepWhatExpiredWithoutAnyRead) {
  test::TempDir dir;
  FakeClock clock;
  auto db = openDb(dir);
  ResponseStore store(*db, {.ttl_s = 100, .now = clock.fn()});
  ASSERT_TRUE(store.record("key_a", true, inputItems("1"), responseObject("resp_old", "completed")).isOk());
  clock.now += 100 + ResponseStore::kSweepInterval_s;
  ASSERT_TRUE(store.record("key_b", true, inputItems("2"), responseObject("resp_new", "completed")).isOk());
  const std::vector<std::string> keys = storedKeys(*db);
  ASSERT_EQ(keys.size(), 2u);
  for (const std::string& k : keys) EXPECT_NE(k.find("resp_new"), std::string::npos) << k;
}

TEST(ResponseStoreTest, DeletionIsFinalAndSurvivesAReopen) {
  test::TempDir dir;
  {
    auto db = openDb(dir);
    ResponseStore store(*db, {});
    ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_1", "completed")).isOk());
    auto removed = store.remove("key_a", "resp_1");
    ASSERT_TRUE(removed.isOk());
    EXPECT_TRUE(*removed);
    EXPECT_FALSE(*store.remove("key_a", "resp_1"));
  }
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  EXPECT_FALSE(store.get("key_a", "resp_1")->has_value());
  EXPECT_TRUE(storedKeys(*db).empty());
}

// What the responder outputs (reasoning, a message, function calls) must read
// back as input: a continuation's prompt is then exactly the conversation the
// client would have resent.
TEST(ResponseStoreTest, AContinuationParsesLikeTheResentConversation) {
  openai::ResponsesResponderOptions o;
  o.parser.tool_calls = true;
  openai::ResponsesResponder responder(o);
  serving::StreamEvent e;
  e.text = "<think>Look first.</think>Checking." + std::string("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function") +
           "<｜tool▁sep｜>read_file\n```json\n{\"path\": \"README.md\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  e.token_ids.assign(20, 7);
  e.final = true;
  e.finish_reason = serving::FinishReason::kStop;
  e.usage.prompt_tokens = 10;
  e.usage.miss_tokens = 10;
  e.usage.completion_tokens = 20;
  ASSERT_FALSE(responder.onEvent(e).error.has_value());
  const json& response = responder.finalResponse();
  ASSERT_EQ(response["status"], "completed");
  ASSERT_EQ(response["output"].size(), 3u);
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][1]["type"], "message");
  EXPECT_EQ(response["output"][2]["type"], "function_call");

  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  const json first_input = json::array({json{{"role", "user"}, {"content", "Read the readme."}}});
  ASSERT_TRUE(store.record("key_a", true, first_input, response).isOk());
  auto previous = store.get("key_a", response["id"].get<std::string>());
  ASSERT_TRUE(previous.isOk() && previous->has_value());

  const std::string call_id = response["output"][2]["call_id"].get<std::string>();
  const json new_input = json::array({json{{"type", "function_call_output"}, {"call_id", call_id},
                                           {"output", "# LatentGate"}}});
  const json tools = json::array({json{{"type", "function"}, {"name", "read_file"},
                                       {"parameters", json{{"type", "object"}}}}});
  json continued{{"model", "m"}, {"instructions", "New instructions."}, {"tools", tools},
                 {"previous_response_id", response["id"]}, {"input", continuedInput(**previous, new_input)}};
  // The client resending it all, as Chat Completions clients do.
  json resent{{"model", "m"}, {"instructions", "New instructions."}, {"tools", tools},
              {"input", json::array({json{{"role", "user"}, {"content", "Read the readme."}},
                                     json{{"role", "assistant"}, {"content", "Checking."}},
                                     json{{"type", "function_call"}, {"call_id", call_id}, {"name", "read_file"},
                                          {"arguments", "{\"path\": \"README.md\"}"}},
                                     json{{"type", "function_call_output"}, {"call_id", call_id},
                                          {"output", "# LatentGate"}}})}};
  openai::ParseLimits limits;
  auto a = openai::parseResponsesRequest(continued, limits);
  auto b = openai::parseResponsesRequest(resent, limits);
  ASSERT_TRUE(a.isOk()) << a.error().message;
  ASSERT_TRUE(b.isOk()) << b.error().message;
  const auto& ma = a->prompt.messages;
  const auto& mb = b->prompt.messages;
  ASSERT_EQ(ma.size(), 5u) << "system, user, assistant text, assistant call, tool";
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i].role, mb[i].role) << i;
    EXPECT_EQ(ma[i].content, mb[i].content) << i;
    EXPECT_EQ(ma[i].tool_calls, mb[i].tool_calls) << i;
    EXPECT_EQ(ma[i].tool_call_id, mb[i].tool_call_id) << i;
  }
  EXPECT_EQ(ma[0].content, "New instructions.") << "only this request's instructions";
  EXPECT_EQ(*a->previous_response_id, response["id"].get<std::string>());
}

}  // namespace
}  // namespace lg::proxy

// Stored Responses in a real RocksDB billing store (temp dirs): kept and read
// back across a reopen, invisible to every other API key, expired on read, by
// the sweep and on later writes, nothing written for store:false or a failed
// response, synced deletion; and a conversation continued from a record
// parses to the same prompt as the client resending it all. With replicas,
// every write, deletion and purge of a record marks it for the index, and an
// id held by another replica is told apart from one nobody holds.
#include "proxy/gateway/response_store.h"

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "billing/billing_db.h"
#include "billing/response_index.h"
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

// An index that knows what the test says, and counts marked().
class FakeIndex final : public billing::ResponseIndex {
 public:
  const std::string& replica() const override { return self_; }
  void marked() override { ++marked_; }
  Result<std::optional<std::string>> holder(std::string_view owner, std::string_view id) override {
    if (down) return unavailable("index down");
    auto it = holders.find(std::string(owner) + "/" + std::string(id));
    return it == holders.end() ? std::optional<std::string>() : std::optional<std::string>(it->second);
  }
  std::map<std::string, std::string> holders;  // owner/id -> replica
  bool down = false;
  int marked_ = 0;

 private:
  std::string self_ = "r-self";
};

// The markers in the store, as (owner/id, deleted), in key order.
std::vector<std::pair<std::string, bool>> markersIn(billing::BillingDb& db) {
  std::vector<std::pair<std::string, bool>> out;
  EXPECT_TRUE(db.scan(billing::kResponseIndexMarkers, [&](std::string_view k, std::string_view v) {
                  auto m = billing::parseResponseIndexMarker(k, v);
                  EXPECT_TRUE(m.has_value()) << k;
                  if (m) out.emplace_back(m->owner + "/" + m->response_id, m->deleted);
                  return true;
                }).isOk());
  return out;
}

TEST(ResponseStoreTest, WithAnIndexEveryChangeIsMarkedAndRecordsElsewhereAreToldApart) {
  test::TempDir dir;
  auto db = openDb(dir);
  FakeIndex index;
  ResponseStoreOptions options;
  options.index = &index;
  ResponseStore store(*db, options);
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_1", "completed")).isOk());
  ASSERT_TRUE(store.record("key_a", true, inputItems("hi"), responseObject("resp_2", "completed")).isOk());
  ASSERT_TRUE(store.record("key_a", false, inputItems("hi"), responseObject("resp_3", "completed")).isOk());
  EXPECT_EQ(markersIn(*db), (std::vector<std::pair<std::string, bool>>{{"key_a/resp_1", false}, {"key_a/resp_2", false}}));
  EXPECT_EQ(index.marked_, 2);
  ASSERT_TRUE(*store.remove("key_a", "resp_1"));
  ASSERT_TRUE(*store.purgeOwner("key_a") == 1);
  // Markers of one response follow one another in key order.
  EXPECT_EQ(markersIn(*db), (std::vector<std::pair<std::string, bool>>{
                                {"key_a/resp_1", false}, {"key_a/resp_1", true}, {"key_a/resp_2", false}, {"key_a/resp_2", true}}));
  // Not held here: another replica's, nobody's, or this one's own (its
  // deletion not pushed yet) which counts as nobody's.
  index.holders = {{"key_a/resp_far", "r-other"}, {"key_a/resp_1", "r-self"}};
  EXPECT_EQ(store.heldElsewhere("key_a", "resp_far")->value_or(""), "r-other");
  EXPECT_FALSE(store.heldElsewhere("key_b", "resp_far")->has_value());
  EXPECT_FALSE(store.heldElsewhere("key_a", "resp_1")->has_value());
  EXPECT_FALSE(store.heldElsewhere("key_a", "../resp_far")->has_value()) << "ids that are not ours are never asked";
  index.down = true;
  EXPECT_EQ(store.heldElsewhere("key_a", "resp_far").status().code(), StatusCode::kUnavailable);
  // Without an index: nobody else holds anything, and nothing is marked.
  test::TempDir plain_dir;
  auto plain_db = openDb(plain_dir);
  ResponseStore plain(*plain_db, {});
  ASSERT_TRUE(plain.record("key_a", true, inputItems("hi"), responseObject("resp_1", "completed")).isOk());
  EXPECT_TRUE(markersIn(*plain_db).empty());
  EXPECT_FALSE(plain.heldElsewhere("key_a", "resp_far")->has_value());
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
  auto previous = store.conversation("key_a", response["id"].get<std::string>());
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

// Issue 21, item 7: a chain is stored as references, each record holding its
// own turn; reading walks it; the walk is bounded; the chain never outlives
// its records; the admin's purge removes everything of a key.
int64_t storedBytes(billing::BillingDb& db) {
  int64_t total = 0;
  EXPECT_TRUE(db.scan("resp/", [&](std::string_view k, std::string_view v) {
                  total += static_cast<int64_t>(k.size() + v.size());
                  return true;
                })
                  .isOk());
  return total;
}

json userItem(const std::string& text) { return json::array({json{{"role", "user"}, {"content", text}}}); }

// Records `turns` turns, each continuing the last; the last id.
std::string recordChain(ResponseStore& store, int turns, const std::string& prefix) {
  std::string id;
  for (int i = 0; i < turns; ++i) {
    std::optional<StoredConversation> previous;
    if (!id.empty()) {
      auto c = store.conversation("key_a", id);
      EXPECT_TRUE(c.isOk() && c->has_value()) << i;
      previous = **c;
    }
    const StoredTurn turn = store.turnFor(previous ? &*previous : nullptr, userItem("turn " + std::to_string(i)));
    const std::string next = prefix + std::to_string(i);
    EXPECT_TRUE(store.record("key_a", true, turn, responseObject(next, "completed",
                                                                  json::array({assistantMessage("reply " + std::to_string(i))})))
                    .isOk());
    id = next;
  }
  return id;
}

TEST(ResponseStoreChainTest, AChainsStoredBytesGrowWithEachTurnNotTheConversation) {
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  recordChain(store, 1, "resp_x");
  const int64_t one = storedBytes(*db);
  const std::string last = recordChain(store, 10, "resp_c");
  const int64_t ten = storedBytes(*db) - one;
  // Ten records of about one record's size each, not 1 + 2 + ... + 10.
  EXPECT_LT(ten, 10 * one + 10 * 64) << "one record " << one << ", ten " << ten;
  auto c = store.conversation("key_a", last);
  ASSERT_TRUE(c.isOk() && c->has_value());
  ASSERT_EQ((*c)->items.size(), 20u) << "every turn's input and output, oldest first";
  EXPECT_EQ((*c)->items[0]["content"], "turn 0");
  EXPECT_EQ((*c)->items[19]["content"][0]["text"], "reply 9");
  EXPECT_EQ((*c)->depth, 9);
  // What the layout before issue 21 would have written: each record holding
  // its whole conversation (printed for the record, docs/security.md).
  int64_t whole = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string id = "resp_c" + std::to_string(i);
    auto conv = store.conversation("key_a", id);
    auto rec = store.get("key_a", id);
    ASSERT_TRUE(conv.isOk() && conv->has_value() && rec.isOk() && rec->has_value());
    json items = (*conv)->items;
    items.erase(items.end() - 1);  // its own output is in the response object
    whole += static_cast<int64_t>(json{{"input", items}, {"response", (*rec)->response}}.dump().size());
  }
  std::printf("a 10-turn chain: %lld bytes stored as references, %lld if each record held its conversation\n",
              static_cast<long long>(ten), static_cast<long long>(whole));
  EXPECT_LT(ten * 2, whole);
}

TEST(ResponseStoreChainTest, ReasoningHostedItemsAndUnknownFieldsAreNotStored) {
  const json items = json::array(
      {json{{"type", "reasoning"}, {"encrypted_content", std::string(1000, 'r')}},
       json{{"type", "web_search_call"}, {"id", "ws"}},
       json{{"role", "user"}, {"content", json::array({json{{"type", "input_text"}, {"text", "hi"}, {"junk", "x"}}})},
            {"junk", std::string(1000, 'j')}},
       json{{"type", "function_call_output"}, {"call_id", "c"}, {"output", "out"}, {"junk", 1}}});
  const json kept = promptItems(items);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], (json{{"type", "message"}, {"role", "user"},
                           {"content", json::array({json{{"type", "input_text"}, {"text", "hi"}}})}}));
  EXPECT_EQ(kept[1], (json{{"type", "function_call_output"}, {"call_id", "c"}, {"output", "out"}}));
}

TEST(ResponseStoreChainTest, TheWalkIsBoundedAndAChainNeverOutlivesItsRoot) {
  test::TempDir dir;
  auto db = openDb(dir);
  FakeClock clock;
  ResponseStoreOptions o;
  o.max_chain_depth = 4;
  o.now = clock.fn();
  ResponseStore store(*db, o);
  const std::string last = recordChain(store, 6, "resp_d");
  // Depths 0 1 2 3, then a new root (0) holding the whole conversation, then 1.
  auto r4 = store.get("key_a", "resp_d4");
  ASSERT_TRUE(r4.isOk() && r4->has_value());
  EXPECT_TRUE((*r4)->parent.empty());
  EXPECT_EQ((*r4)->input.size(), 4u * 2 + 1) << "four turns' input and output, and its own";
  auto c = store.conversation("key_a", last);
  ASSERT_TRUE(c.isOk() && c->has_value());
  EXPECT_EQ((*c)->items.size(), 12u);
  // Children expire with their root: a day before the root's expiry a
  // continuation is stored whole instead.
  auto root = store.get("key_a", "resp_d0");
  auto child = store.get("key_a", "resp_d1");
  EXPECT_EQ((*child)->expires_unix, (*root)->expires_unix);
  clock.now = (*root)->expires_unix - 24 * 3600;
  auto near = store.conversation("key_a", "resp_d3");
  ASSERT_TRUE(near.isOk() && near->has_value());
  EXPECT_TRUE(store.turnFor(&**near, userItem("late")).parent.empty());
  // Once the root expired, its chain is gone (a clear not-found, no damage).
  clock.now = (*root)->expires_unix;
  auto gone = store.conversation("key_a", "resp_d3");
  ASSERT_TRUE(gone.isOk()) << gone.status().toString();
  EXPECT_FALSE(gone->has_value());
}

TEST(ResponseStoreChainTest, DeletingAParentKeepsItsChainAndThePurgeRemovesAll) {
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStore store(*db, {});
  const std::string last = recordChain(store, 3, "resp_p");
  ASSERT_TRUE(*store.remove("key_a", "resp_p0"));
  EXPECT_FALSE(store.get("key_a", "resp_p0")->has_value());
  EXPECT_FALSE(*store.remove("key_a", "resp_p0"));
  auto c = store.conversation("key_a", last);
  ASSERT_TRUE(c.isOk() && c->has_value());
  EXPECT_EQ((*c)->items.size(), 6u);
  // Another owner's records are untouched by the purge.
  ASSERT_TRUE(store.record("key_b", true, inputItems("b"), responseObject("resp_b", "completed")).isOk());
  auto purged = store.purgeOwner("key_a");
  ASSERT_TRUE(purged.isOk());
  EXPECT_EQ(*purged, 3);
  EXPECT_FALSE(store.conversation("key_a", last)->has_value());
  EXPECT_TRUE(store.get("key_b", "resp_b")->has_value());
  int64_t left = 0;
  for (std::string_view prefix : {"resp/key_a/", "respkid/key_a/"}) {
    ASSERT_TRUE(db->scan(prefix, [&](std::string_view, std::string_view) { return ++left, true; }).isOk());
  }
  EXPECT_EQ(left, 0);
}

TEST(ResponseStoreChainTest, AnOversizedRecordIsRefusedOrNotKept) {
  test::TempDir dir;
  auto db = openDb(dir);
  ResponseStoreOptions o;
  o.max_record_bytes = 2048;
  ResponseStore store(*db, o);
  const StoredTurn big = store.turnFor(nullptr, userItem(std::string(3000, 'x')));
  EXPECT_EQ(store.checkSize(big).code(), StatusCode::kInvalidArgument);
  const StoredTurn small = store.turnFor(nullptr, userItem("x"));
  EXPECT_TRUE(store.checkSize(small).isOk());
  // An output that makes the record too large: not kept, counted.
  const Status s = store.record("key_a", true, small,
                                responseObject("resp_o", "completed", json::array({assistantMessage(std::string(3000, 'y'))})));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(store.get("key_a", "resp_o")->has_value());
  EXPECT_EQ(store.oversizeDropped(), 1u);
}

}  // namespace
}  // namespace lg::proxy

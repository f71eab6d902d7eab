// The response side: chat.completion and its chunk stream, text_completion
// with logprobs and echo, the Responses object and its event sequence, SSE
// framing, usage (hit + miss = prompt, the cost hook), finish reasons and the
// mapping of scheduler refusals and final events to OpenAI errors.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/chat_response.h"
#include "proxy/openai/completion_response.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/responses_response.h"
#include "proxy/openai/sse.h"
#include "proxy/openai/usage.h"

namespace lg::proxy::openai {
namespace {

using nlohmann::json;
using serving::FinishReason;
using serving::StreamEvent;

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";

const text::Tokenizer& tokenizer() {
  static const std::unique_ptr<text::Tokenizer> t = [] {
    auto r = text::Tokenizer::loadFromDir(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer");
    EXPECT_TRUE(r.isOk());
    return std::move(*r);
  }();
  return *t;
}

StreamEvent delta(std::string text, size_t tokens = 1) {
  StreamEvent e;
  e.text = std::move(text);
  e.token_ids.assign(tokens, 100);
  return e;
}

serving::Usage usage(int32_t prompt, int32_t tier0, int32_t disk, int32_t completion) {
  serving::Usage u;
  u.prompt_tokens = prompt;
  u.hit_tokens_tier0 = tier0;
  u.hit_tokens_disk = disk;
  u.miss_tokens = prompt - tier0 - disk;
  u.completion_tokens = completion;
  return u;
}

StreamEvent finalEvent(FinishReason reason, serving::Usage u, std::string text = {}, size_t tokens = 0) {
  StreamEvent e = delta(std::move(text), tokens);
  e.final = true;
  e.finish_reason = reason;
  e.usage = u;
  return e;
}

struct Sse {
  std::string event;  // "" for data-only
  json data;          // null for [DONE]
  bool done = false;
};

// Splits SSE bytes into events, checking the framing: blocks end in a blank
// line, each has at most an `event:` line and exactly one `data:` line.
std::vector<Sse> parseSse(const std::string& bytes) {
  std::vector<Sse> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t end = bytes.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    std::string block = bytes.substr(pos, end - pos);
    pos = end + 2;
    Sse e;
    if (block.rfind("event: ", 0) == 0) {
      const size_t nl = block.find('\n');
      EXPECT_NE(nl, std::string::npos);
      e.event = block.substr(7, nl - 7);
      block = block.substr(nl + 1);
    }
    EXPECT_EQ(block.rfind("data: ", 0), 0u) << block;
    EXPECT_EQ(block.find('\n'), std::string::npos) << "one data line";
    const std::string payload = block.substr(6);
    if (payload == "[DONE]") {
      e.done = true;
    } else {
      e.data = json::parse(payload, nullptr, false);
      EXPECT_FALSE(e.data.is_discarded()) << payload;
    }
    out.push_back(std::move(e));
  }
  return out;
}

// ---------------------------------------------------------------- usage

TEST(Usage, ChatAndResponsesShapesAddUp) {
  UsageCounts u;
  u.add(usage(100, 60, 20, 7));
  u.reasoning_tokens = 3;
  const json chat = usageJson(u, UsageStyle::kChat);
  EXPECT_EQ(chat, (json{{"prompt_tokens", 100},
                        {"completion_tokens", 7},
                        {"total_tokens", 107},
                        {"prompt_tokens_details", {{"cached_tokens", 80}}},
                        {"completion_tokens_details", {{"reasoning_tokens", 3}}},
                        {"prompt_cache_hit_tokens", 80},
                        {"prompt_cache_miss_tokens", 20}}));
  EXPECT_EQ(chat["prompt_cache_hit_tokens"].get<int>() + chat["prompt_cache_miss_tokens"].get<int>(),
            chat["prompt_tokens"].get<int>());
  const json responses = usageJson(u, UsageStyle::kResponses);
  EXPECT_EQ(responses, (json{{"input_tokens", 100},
                             {"input_tokens_details", {{"cached_tokens", 80}, {"cache_write_tokens", 20}}},
                             {"output_tokens", 7},
                             {"output_tokens_details", {{"reasoning_tokens", 3}}},
                             {"total_tokens", 107}}));
}

TEST(Usage, CostHook) {
  UsageCounts u;
  u.add(usage(10, 5, 0, 2));
  const UsageCostHook hook = [](const UsageCounts& c) -> std::optional<json> {
    return json{{"currency", "USD"}, {"total", std::to_string(c.totalTokens())}};
  };
  EXPECT_EQ(usageJson(u, UsageStyle::kChat, hook)["cost"], (json{{"currency", "USD"}, {"total", "12"}}));
  EXPECT_EQ(usageJson(u, UsageStyle::kResponses, hook)["cost"]["currency"], "USD");
  EXPECT_FALSE(usageJson(u, UsageStyle::kChat).contains("cost"));
}

// ---------------------------------------------------------------- errors

TEST(Errors, RefusalsMapToOpenAIErrors) {
  const ParamNames chat{"messages", "max_completion_tokens", "top_logprobs"};
  struct Case {
    serving::Refusal refusal;
    int status;
    std::string type, code, param;
    int32_t retry;
  };
  using serving::Refusal;
  const std::vector<Case> cases = {
      {Refusal::kEmptyPrompt, 400, "invalid_request_error", "invalid_value", "messages", 0},
      {Refusal::kTokenOutOfRange, 400, "invalid_request_error", "invalid_value", "messages", 0},
      {Refusal::kMaxTokens, 400, "invalid_request_error", "invalid_value", "max_completion_tokens", 0},
      {Refusal::kTemperature, 400, "invalid_request_error", "invalid_value", "temperature", 0},
      {Refusal::kTopP, 400, "invalid_request_error", "invalid_value", "top_p", 0},
      {Refusal::kTopK, 400, "invalid_request_error", "invalid_value", "top_k", 0},
      {Refusal::kLogprobs, 400, "invalid_request_error", "invalid_value", "top_logprobs", 0},
      {Refusal::kStopStrings, 400, "invalid_request_error", "invalid_value", "stop", 0},
      {Refusal::kContextOverflow, 400, "invalid_request_error", "context_length_exceeded", "messages", 0},
      {Refusal::kExceedsPool, 400, "invalid_request_error", "context_length_exceeded", "messages", 0},
      {Refusal::kQueueFull, 429, "rate_limit_error", "rate_limit_exceeded", "", 1},
      {Refusal::kQueueTimeout, 503, "server_error", "server_overloaded", "", 2},
      {Refusal::kShuttingDown, 503, "server_error", "server_shutting_down", "", 10},
      {Refusal::kNone, 500, "server_error", "internal_error", "", 0},
  };
  for (const Case& c : cases) {
    const ApiError e = refusalError(c.refusal, "the scheduler's message", chat);
    EXPECT_EQ(e.http_status, c.status) << serving::refusalName(c.refusal);
    EXPECT_EQ(e.type, c.type) << serving::refusalName(c.refusal);
    EXPECT_EQ(e.code, c.code) << serving::refusalName(c.refusal);
    EXPECT_EQ(e.param, c.param) << serving::refusalName(c.refusal);
    EXPECT_EQ(e.retry_after_s, c.retry) << serving::refusalName(c.refusal);
  }
  const ApiError overflow = refusalError(Refusal::kContextOverflow,
                                         "the prompt has 130000 tokens and max_tokens is 4096: together 134096, more "
                                         "than the model's context of 131072 tokens",
                                         ParamNames{"input", "max_output_tokens", "top_logprobs"});
  EXPECT_NE(overflow.message.find("130000"), std::string::npos);
  EXPECT_NE(overflow.message.find("131072"), std::string::npos);
  EXPECT_EQ(overflow.param, "input");
}

TEST(Errors, ErrorJsonShape) {
  // OpenAI's field order, compact.
  EXPECT_EQ(apiErrorBody(invalidRequest("messages[0].role", "invalid_value", "bad role")),
            R"({"error":{"message":"bad role","type":"invalid_request_error","param":"messages[0].role",)"
            R"("code":"invalid_value"}})");
  const json e = json::parse(apiErrorBody(internalError()));
  EXPECT_EQ(e["error"]["param"], nullptr);
  EXPECT_EQ(invalidApiKey().http_status, 401);
  EXPECT_EQ(invalidApiKey().code, "invalid_api_key");
  const ApiError nf = modelNotFound("gpt-9");
  EXPECT_EQ(nf.http_status, 404);
  EXPECT_EQ(nf.code, "model_not_found");
  EXPECT_NE(nf.message.find("gpt-9"), std::string::npos);
  const ApiError ctx = contextLengthExceeded("messages", 1000, 500, 1024);
  EXPECT_NE(ctx.message.find("1024"), std::string::npos);
  EXPECT_NE(ctx.message.find("1500"), std::string::npos);
}

TEST(Errors, FinalEvents) {
  const ParamNames p;
  EXPECT_FALSE(finalEventError(finalEvent(FinishReason::kStop, {}), p).has_value());
  EXPECT_FALSE(finalEventError(finalEvent(FinishReason::kLength, {}), p).has_value());
  StreamEvent refused = finalEvent(FinishReason::kRefused, {});
  refused.refusal = serving::Refusal::kQueueTimeout;
  EXPECT_EQ(finalEventError(refused, p)->http_status, 503);
  StreamEvent failed = finalEvent(FinishReason::kError, {});
  failed.message = "CUDA error 700 at kernels/attention.cu:123";
  const ApiError e = *finalEventError(failed, p);
  EXPECT_EQ(e.http_status, 500);
  EXPECT_EQ(e.message.find("CUDA"), std::string::npos) << "engine internals stay in the server's log";
  EXPECT_EQ(finalEventError(finalEvent(FinishReason::kCancelled, {}), p)->http_status, 503);
}

TEST(Errors, FinishReasons) {
  EXPECT_EQ(finishReasonText(FinishReason::kStop, false), "stop");
  EXPECT_EQ(finishReasonText(FinishReason::kStop, true), "tool_calls");
  EXPECT_EQ(finishReasonText(FinishReason::kLength, true), "length");
}

// ---------------------------------------------------------------- chat

ChatResponderOptions chatOptions(bool stream) {
  ChatResponderOptions o;
  o.meta = {"chatcmpl-test", 1700000000, "deepseek-chat", ""};
  o.stream = stream;
  return o;
}

TEST(ChatResponse, NonStreamingBody) {
  ChatResponder r(chatOptions(false));
  EXPECT_EQ(r.start(), "");
  EXPECT_EQ(r.onEvent(delta("Hel")).body, "");
  ResponderOutput out = r.onEvent(finalEvent(FinishReason::kStop, usage(10, 6, 2, 3), "lo", 2));
  EXPECT_TRUE(out.done);
  EXPECT_FALSE(out.error.has_value());
  const json body = json::parse(out.body);
  EXPECT_EQ(body["id"], "chatcmpl-test");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "deepseek-chat");
  EXPECT_EQ(body["system_fingerprint"], nullptr);
  ASSERT_EQ(body["choices"].size(), 1u);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["message"], (json{{"role", "assistant"}, {"content", "Hello"}, {"refusal", nullptr}}));
  EXPECT_EQ(choice["logprobs"], nullptr);
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(body["usage"]["prompt_cache_hit_tokens"], 8);
  EXPECT_EQ(body["usage"]["prompt_cache_miss_tokens"], 2);
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["usage"]["total_tokens"], 13);
  EXPECT_TRUE(r.onEvent(delta("late")).done) << "nothing after the end";
}

TEST(ChatResponse, StreamFramingRoleContentFinishUsageDone) {
  ChatResponderOptions o = chatOptions(true);
  o.include_usage = true;
  ChatResponder r(o);
  std::string bytes = r.start();
  bytes += r.onEvent(delta("Hello")).body;
  bytes += r.onEvent(delta("")).body;  // held-back text: nothing to send
  bytes += r.onEvent(delta(", world")).body;
  ResponderOutput last = r.onEvent(finalEvent(FinishReason::kLength, usage(20, 16, 0, 3)));
  EXPECT_TRUE(last.done);
  bytes += last.body;
  ASSERT_TRUE(bytes.ends_with("data: [DONE]\n\n"));
  const std::vector<Sse> events = parseSse(bytes);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].data["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  std::string content;
  for (size_t i = 0; i < 4; ++i) {
    const json& c = events[i].data;
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], "chatcmpl-test");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null()) << "include_usage: null on every other chunk";
    ASSERT_EQ(c["choices"].size(), 1u);
    if (c["choices"][0]["delta"].contains("content")) content += c["choices"][0]["delta"]["content"].get<std::string>();
    EXPECT_EQ(c["choices"][0]["finish_reason"], i == 3 ? json("length") : json(nullptr));
  }
  EXPECT_EQ(content, "Hello, world");
  EXPECT_EQ(events[4].data["choices"], json::array());
  EXPECT_EQ(events[4].data["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(events[4].data["usage"]["prompt_cache_hit_tokens"], 16);
  EXPECT_TRUE(events[5].done);
}

// n = 2: each choice its own message and index; the response ends when both
// have finished; usage sums them.
TEST(ChatResponse, SeveralChoices) {
  ChatResponderOptions o = chatOptions(false);
  o.choices = 2;
  ChatResponder r(o);
  EXPECT_EQ(r.onEvent(1, delta("Wor")).body, "");
  EXPECT_EQ(r.onEvent(0, delta("Hel")).body, "");
  ResponderOutput first = r.onEvent(1, finalEvent(FinishReason::kStop, usage(10, 0, 2, 2), "ld", 1));
  EXPECT_FALSE(first.done);
  EXPECT_EQ(first.body, "");
  ResponderOutput out = r.onEvent(0, finalEvent(FinishReason::kLength, usage(10, 8, 2, 2), "lo", 1));
  ASSERT_TRUE(out.done);
  const json body = json::parse(out.body);
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], "World");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(body["usage"]["prompt_cache_hit_tokens"], 12);  // 0 + 2 and 8 + 2, from tier 0 and disk
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);

  // Streamed: a role chunk per choice, chunks with their index, [DONE] after both.
  ChatResponderOptions so = chatOptions(true);
  so.choices = 2;
  ChatResponder sr(so);
  std::string bytes = sr.start();
  bytes += sr.onEvent(1, delta("B")).body;
  ResponderOutput one = sr.onEvent(1, finalEvent(FinishReason::kStop, usage(5, 0, 0, 1)));
  EXPECT_FALSE(one.done);
  bytes += one.body;
  bytes += sr.onEvent(0, delta("A")).body;
  ResponderOutput two = sr.onEvent(0, finalEvent(FinishReason::kStop, usage(5, 0, 0, 1)));
  EXPECT_TRUE(two.done);
  bytes += two.body;
  const std::vector<Sse> events = parseSse(bytes);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].data["choices"][0]["index"], 0);
  EXPECT_EQ(events[1].data["choices"][0]["index"], 1);
  EXPECT_EQ(events[2].data["choices"][0]["delta"]["content"], "B");
  EXPECT_EQ(events[3].data["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[3].data["choices"][0]["index"], 1);
  EXPECT_EQ(events[4].data["choices"][0]["index"], 0);
  EXPECT_TRUE(events[6].done);
}

TEST(ChatResponse, StreamWithoutUsageHasNoUsageField) {
  ChatResponder r(chatOptions(true));
  std::string bytes = r.onEvent(delta("a")).body;  // start() implied
  bytes += r.onEvent(finalEvent(FinishReason::kStop, usage(1, 0, 0, 2), "b", 1)).body;
  const std::vector<Sse> events = parseSse(bytes);
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(events[i].data.contains("usage"));
  EXPECT_EQ(events[1].data["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(events[2].data["choices"][0]["delta"]["content"], "b") << "the final event's own text";
  EXPECT_EQ(events[2].data["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(events[3].done);
}

std::string weatherCallText() {
  return "Checking." + kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" +
         kCallEnd + "\n" + kCallBegin + "function" + kSep + "get_time\n```json\n{}\n```" + kCallEnd + kCallsEnd;
}

TEST(ChatResponse, StreamedToolCalls) {
  ChatResponderOptions o = chatOptions(true);
  o.parser.tool_calls = true;
  ChatResponder r(o);
  const std::string text = weatherCallText();
  std::string bytes = r.start();
  for (size_t i = 0; i < text.size(); i += 5) bytes += r.onEvent(delta(text.substr(i, 5))).body;
  bytes += r.onEvent(finalEvent(FinishReason::kStop, usage(50, 0, 0, 40))).body;
  const std::vector<Sse> events = parseSse(bytes);
  std::string content;
  json calls = json::array();
  std::string finish;
  for (const Sse& e : events) {
    if (e.done) continue;
    const json& d = e.data["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& tc : d["tool_calls"]) {
        const size_t index = tc["index"].get<size_t>();
        if (index == calls.size()) {
          ASSERT_TRUE(tc.contains("id")) << "the first delta of a call has its id, type and name";
          EXPECT_EQ(tc["type"], "function");
          EXPECT_EQ(tc["id"].get<std::string>().rfind("call_", 0), 0u);
          calls.push_back(tc);
        } else {
          ASSERT_EQ(index + 1, calls.size());
          EXPECT_FALSE(tc.contains("id"));
          calls[index]["function"]["arguments"] =
              calls[index]["function"]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      }
    }
    if (!e.data["choices"][0]["finish_reason"].is_null()) finish = e.data["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(ChatResponse, NonStreamingToolCallsAndReasoning) {
  ChatResponderOptions o = chatOptions(false);
  o.parser.tool_calls = true;
  ChatResponder r(o);
  r.onEvent(delta("<think>Need weather", 3));
  r.onEvent(delta(".</think>\n\n", 2));
  const std::string text = kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" +
                           kCallEnd + kCallsEnd;
  r.onEvent(delta(text, 10));
  const json body = json::parse(r.onEvent(finalEvent(FinishReason::kStop, usage(30, 0, 0, 16))).body);
  const json& m = body["choices"][0]["message"];
  EXPECT_EQ(m["content"], nullptr) << "no content beside the calls";
  EXPECT_EQ(m["reasoning_content"], "Need weather.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"], (json{{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"], 5);
}

TEST(ChatResponse, StreamedReasoningContent) {
  ChatResponderOptions o = chatOptions(true);
  o.parser.starts_in_reasoning = true;
  ChatResponder r(o);
  std::string bytes = r.start();
  for (const char* t : {"Two plus ", "two is four.", "\n</think>", "\n\n4"}) bytes += r.onEvent(delta(t)).body;
  bytes += r.onEvent(finalEvent(FinishReason::kStop, usage(5, 0, 0, 4))).body;
  std::string reasoning, content;
  for (const Sse& e : parseSse(bytes)) {
    if (e.done) continue;
    const json& d = e.data["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "Two plus two is four.");
  EXPECT_EQ(content, "4");
}

TEST(ChatResponse, Logprobs) {
  ChatResponderOptions o = chatOptions(true);
  o.logprobs = true;
  o.tokenizer = &tokenizer();
  ChatResponder r(o);
  const auto hello = tokenizer().encode("Hello");
  ASSERT_TRUE(hello.isOk());
  StreamEvent e = delta("Hello");
  e.logprobs.push_back({(*hello)[0], -0.25f, {{(*hello)[0], -0.25f}, {1, -3.5f}}});
  std::string bytes = r.start() + r.onEvent(e).body;
  StreamEvent f = finalEvent(FinishReason::kStop, usage(1, 0, 0, 2));
  f.logprobs.push_back({1, -std::numeric_limits<float>::infinity(), {}});
  bytes += r.onEvent(f).body;
  const std::vector<Sse> events = parseSse(bytes);
  ASSERT_GE(events.size(), 3u);
  const json& lp = events[1].data["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 1u);
  EXPECT_EQ(lp[0]["token"], "Hello");
  EXPECT_EQ(lp[0]["logprob"], -0.25);
  EXPECT_EQ(lp[0]["bytes"], json::array({72, 101, 108, 108, 111}));
  ASSERT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp[0]["top_logprobs"][1]["token"], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(lp[0]["top_logprobs"][1]["logprob"], -3.5);
  EXPECT_EQ(events[2].data["choices"][0]["logprobs"]["content"][0]["logprob"], -9999.0)
      << "-inf is not JSON; OpenAI writes -9999";
}

TEST(ChatResponse, FailuresBecomeErrors) {
  StreamEvent failed = finalEvent(FinishReason::kError, {});
  failed.message = "engine internals";
  ChatResponder stream(chatOptions(true));
  ResponderOutput out = stream.onEvent(failed);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->http_status, 500);
  const std::vector<Sse> events = parseSse(out.body);
  ASSERT_EQ(events.size(), 3u) << "role chunk, error, [DONE]";
  EXPECT_EQ(events[1].data["error"]["type"], "server_error");
  EXPECT_TRUE(events[2].done);

  ChatResponder plain(chatOptions(false));
  StreamEvent refused = finalEvent(FinishReason::kRefused, {});
  refused.refusal = serving::Refusal::kQueueTimeout;
  out = plain.onEvent(refused);
  EXPECT_TRUE(out.done);
  EXPECT_EQ(out.body, "");
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->http_status, 503);
  EXPECT_GT(out.error->retry_after_s, 0);
}

TEST(ChatResponse, CostHookReachesTheUsage) {
  ChatResponderOptions o = chatOptions(false);
  o.cost = [](const UsageCounts&) -> std::optional<json> { return json{{"currency", "USD"}, {"total", "0.000001"}}; };
  ChatResponder r(o);
  const json body = json::parse(r.onEvent(finalEvent(FinishReason::kStop, usage(4, 0, 0, 1), "x", 1)).body);
  EXPECT_EQ(body["usage"]["cost"]["total"], "0.000001");
}

// ---------------------------------------------------------------- completions

CompletionResponderOptions completionOptions(bool stream, size_t choices) {
  CompletionResponderOptions o;
  o.meta = {"cmpl-test", 1700000000, "deepseek-chat", "fp_lg"};
  o.stream = stream;
  o.tokenizer = &tokenizer();
  o.choices = choices;
  return o;
}

TEST(CompletionResponse, ChoicesInOrderAndUsageSummed) {
  CompletionResponder r(completionOptions(false, 2));
  EXPECT_EQ(r.onEvent(1, delta(" two")).body, "");
  EXPECT_EQ(r.onEvent(0, delta(" one")).body, "");
  EXPECT_EQ(r.onEvent(1, finalEvent(FinishReason::kLength, usage(3, 0, 0, 16))).body, "");
  ResponderOutput out = r.onEvent(0, finalEvent(FinishReason::kStop, usage(4, 2, 0, 5), "!", 1));
  ASSERT_TRUE(out.done);
  const json body = json::parse(out.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["system_fingerprint"], "fp_lg");
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0], (json{{"text", " one!"}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", "stop"}}));
  EXPECT_EQ(body["choices"][1]["text"], " two");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(body["usage"]["prompt_cache_hit_tokens"], 2);
  EXPECT_EQ(body["usage"]["prompt_cache_miss_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 21);
}

TEST(CompletionResponse, EchoWithPromptLogprobs) {
  // Scoring a prompt: echo, logprobs, max_tokens 0.
  const auto ids = tokenizer().encode("Hello world");
  ASSERT_TRUE(ids.isOk());
  ASSERT_EQ(ids->size(), 2u);
  CompletionResponderOptions o = completionOptions(false, 1);
  o.logprobs = 1;
  o.echo_texts = {completionEchoText({true, {}, *ids}, tokenizer())};
  EXPECT_EQ(o.echo_texts[0], "Hello world");
  CompletionResponder r(o);
  StreamEvent e = finalEvent(FinishReason::kLength, usage(2, 0, 0, 0));
  e.prompt_logprobs.push_back({(*ids)[0], std::nullopt, {}});
  e.prompt_logprobs.push_back({(*ids)[1], -1.5f, {{(*ids)[1], -1.5f}}});
  const json body = json::parse(r.onEvent(0, e).body);
  const json& c = body["choices"][0];
  EXPECT_EQ(c["text"], "Hello world");
  EXPECT_EQ(c["logprobs"]["tokens"], json::array({"Hello", " world"}));
  EXPECT_EQ(c["logprobs"]["token_logprobs"], json::array({nullptr, -1.5}));
  EXPECT_EQ(c["logprobs"]["top_logprobs"], json::array({nullptr, {{" world", -1.5}}}));
  EXPECT_EQ(c["logprobs"]["text_offset"], json::array({0, 5}));
}

TEST(CompletionResponse, StreamedChunksWithLogprobsAndEcho) {
  CompletionResponderOptions o = completionOptions(true, 1);
  o.logprobs = 0;
  o.include_usage = true;
  o.echo_texts = {"Q: "};
  CompletionResponder r(o);
  // A character split across two byte-level tokens: "é" is 0xC3 0xA9.
  const auto e_acute = tokenizer().encode("é");
  ASSERT_TRUE(e_acute.isOk());
  StreamEvent first = delta("A");
  first.logprobs.push_back({tokenizer().encode("A")->at(0), -0.5f, {}});
  std::string bytes = r.onEvent(0, first).body;
  StreamEvent last = finalEvent(FinishReason::kStop, usage(2, 0, 0, 2), "é", 1);
  last.logprobs.push_back({(*e_acute)[0], -0.1f, {}});
  ResponderOutput out = r.onEvent(0, last);
  EXPECT_TRUE(out.done);
  bytes += out.body;
  const std::vector<Sse> events = parseSse(bytes);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].data["choices"][0]["text"], "Q: A") << "the echo comes first";
  EXPECT_EQ(events[0].data["choices"][0]["logprobs"]["tokens"], json::array({"A"}));
  EXPECT_EQ(events[0].data["choices"][0]["logprobs"]["top_logprobs"][0], (json{{"A", -0.5}}))
      << "logprobs 0: the sampled token only";
  EXPECT_EQ(events[1].data["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[0].data["choices"][0]["logprobs"]["text_offset"], json::array({3})) << "after the echo";
  EXPECT_EQ(events[1].data["choices"][0]["logprobs"]["text_offset"], json::array({4}));
  EXPECT_EQ(events[2].data["choices"], json::array());
  EXPECT_EQ(events[2].data["usage"]["total_tokens"], 4);
  EXPECT_TRUE(events[3].done);
}

TEST(CompletionResponse, PartialCharacterTokensAreSpelledAsBytes) {
  // A byte-level token holding part of a character.
  for (int32_t id = 0; id < tokenizer().vocabSize(); ++id) {
    const std::string bytes = tokenizer().tokenBytes(id);
    if (bytes.size() == 1 && static_cast<uint8_t>(bytes[0]) >= 0x80) {
      const std::string text = completionTokenText(tokenizer(), id);
      EXPECT_EQ(text.rfind("bytes:\\x", 0), 0u) << text;
      EXPECT_EQ(text.size(), 10u);
      return;
    }
  }
  FAIL() << "no single-byte token above 0x7f";
}

TEST(CompletionResponse, OneFailedChoiceFailsTheResponse) {
  CompletionResponder r(completionOptions(true, 2));
  r.onEvent(0, delta("a"));
  ResponderOutput out = r.onEvent(1, finalEvent(FinishReason::kError, {}));
  EXPECT_TRUE(out.done);
  ASSERT_TRUE(out.error.has_value());
  const std::vector<Sse> events = parseSse(out.body);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].data.contains("error"));
  EXPECT_TRUE(events[1].done);
  EXPECT_TRUE(r.onEvent(0, delta("b")).done);
}

// ---------------------------------------------------------------- responses

ResponsesResponderOptions responsesOptions(bool stream) {
  ResponsesResponderOptions o;
  o.meta = {"resp_test", 1700000000, "deepseek-chat", ""};
  o.stream = stream;
  o.echo = {{"instructions", "Be helpful."}, {"tools", json::array()}, {"store", false}, {"temperature", 1.0}};
  o.parser.tool_calls = true;
  return o;
}

TEST(ResponsesResponse, StreamEventSequence) {
  ResponsesResponder r(responsesOptions(true));
  std::string bytes = r.start();
  for (const std::string& t : {std::string("<think>Plan: call"), std::string(" it.</think>\n\n"), std::string("Sure,"),
                               std::string(" checking."), kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n",
                               std::string("```json\n{\"city\""), std::string(": \"Paris\"}\n```") + kCallEnd + kCallsEnd}) {
    bytes += r.onEvent(delta(t)).body;
  }
  ResponderOutput out = r.onEvent(finalEvent(FinishReason::kStop, usage(100, 64, 0, 30)));
  EXPECT_TRUE(out.done);
  bytes += out.body;
  EXPECT_FALSE(bytes.ends_with("[DONE]\n\n")) << "Responses streams end without [DONE]";

  const std::vector<Sse> events = parseSse(bytes);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].event, events[i].data["type"]) << "the event line names the data's type";
    EXPECT_EQ(events[i].data["sequence_number"], i) << "sequence numbers count from 0 without gaps";
    types.push_back(events[i].event);
  }
  // Deltas collapse to one entry per run for the comparison.
  std::vector<std::string> collapsed;
  for (const std::string& t : types) {
    if (collapsed.empty() || collapsed.back() != t || t.find(".delta") == std::string::npos) collapsed.push_back(t);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      // reasoning item, output_index 0
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      // message item, output_index 1
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      // function_call item, output_index 2
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(collapsed, expected);

  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].data["response"]["id"], "resp_test");
  EXPECT_EQ(events[0].data["response"]["instructions"], "Be helpful.");
  EXPECT_EQ(events[0].data["response"]["output"], json::array());

  std::string reasoning, text, args;
  for (const Sse& e : events) {
    if (e.event == "response.reasoning_text.delta") reasoning += e.data["delta"].get<std::string>();
    if (e.event == "response.output_text.delta") {
      text += e.data["delta"].get<std::string>();
      EXPECT_EQ(e.data["output_index"], 1);
      EXPECT_EQ(e.data["content_index"], 0);
      EXPECT_EQ(e.data["logprobs"], json::array());
    }
    if (e.event == "response.function_call_arguments.delta") {
      args += e.data["delta"].get<std::string>();
      EXPECT_EQ(e.data["output_index"], 2);
    }
    if (e.event == "response.function_call_arguments.done") {
      EXPECT_EQ(e.data["arguments"], "{\"city\": \"Paris\"}");
      EXPECT_EQ(e.data["name"], "get_weather");
    }
  }
  EXPECT_EQ(reasoning, "Plan: call it.");
  EXPECT_EQ(text, "Sure, checking.");
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");

  const json& done = events.back().data["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["object"], "response");
  EXPECT_EQ(done["created_at"], 1700000000);
  EXPECT_EQ(done["store"], false);
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][0]["type"], "reasoning");
  EXPECT_EQ(done["output"][0]["summary"], json::array());
  EXPECT_EQ(done["output"][0]["content"][0], (json{{"type", "reasoning_text"}, {"text", "Plan: call it."}}));
  EXPECT_EQ(done["output"][1]["type"], "message");
  EXPECT_EQ(done["output"][1]["role"], "assistant");
  EXPECT_EQ(done["output"][1]["status"], "completed");
  EXPECT_EQ(done["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Sure, checking.");
  EXPECT_EQ(done["output"][1]["content"][0]["annotations"], json::array());
  const json& call = done["output"][2];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["id"].get<std::string>().rfind("fc_", 0), 0u);
  // The same ids through the stream.
  for (const Sse& e : events) {
    if (e.event == "response.output_item.done" && e.data["output_index"] == 2) {
      EXPECT_EQ(e.data["item"], call);
    }
  }
  EXPECT_EQ(done["usage"], (json{{"input_tokens", 100},
                                 {"input_tokens_details", {{"cached_tokens", 64}, {"cache_write_tokens", 36}}},
                                 {"output_tokens", 30},
                                 {"output_tokens_details", {{"reasoning_tokens", 2}}},
                                 {"total_tokens", 130}}));
}

// A namespace's function comes back as a function_call with `namespace` and
// its own name; a custom tool's call as a custom_tool_call whose input is the
// text of the one argument the model wrote, streamed decoded.
ResponsesResponderOptions clientToolOptions(bool stream) {
  ResponsesResponderOptions o = responsesOptions(stream);
  o.tool_origins = {{"crm.get_customer", ToolOrigin{"crm", "Customer records.", false}},
                    {"apply_patch", ToolOrigin{"", "", true}},
                    {"crm.note", ToolOrigin{"crm", "", true}}};
  return o;
}

std::string clientToolCallText() {
  return kCallsBegin + kCallBegin + "function" + kSep + "crm.get_customer\n```json\n{\"id\":\"7\"}\n```" + kCallEnd +
         "\n" + kCallBegin + "function" + kSep + "apply_patch\n```json\n{\"input\":\"*** Begin \\\"Patch\\\"\\n\\u00e9\\ud83d\\ude00\"}\n```" +
         kCallEnd + "\n" + kCallBegin + "function" + kSep + "crm.note\n```json\n{\"input\":\"hi\"}\n```" + kCallEnd +
         kCallsEnd;
}

TEST(ResponsesResponse, NamespaceAndCustomToolCalls) {
  const std::string decoded = "*** Begin \"Patch\"\n\u00e9\U0001F600";
  // Not streaming: the items.
  ResponsesResponder blocking(clientToolOptions(false));
  blocking.onEvent(delta(clientToolCallText()));
  const json body = json::parse(blocking.onEvent(finalEvent(FinishReason::kStop, usage(10, 0, 0, 20))).body);
  ASSERT_EQ(body["output"].size(), 3u);
  const json& fn = body["output"][0];
  EXPECT_EQ(fn["type"], "function_call");
  EXPECT_EQ(fn["namespace"], "crm");
  EXPECT_EQ(fn["name"], "get_customer");
  EXPECT_EQ(fn["arguments"], "{\"id\":\"7\"}");
  EXPECT_EQ(fn["id"].get<std::string>().rfind("fc_", 0), 0u);
  const json& patch = body["output"][1];
  EXPECT_EQ(patch["type"], "custom_tool_call");
  EXPECT_EQ(patch["name"], "apply_patch");
  EXPECT_EQ(patch["input"], decoded);
  EXPECT_EQ(patch["status"], "completed");
  EXPECT_FALSE(patch.contains("namespace"));
  EXPECT_FALSE(patch.contains("arguments"));
  EXPECT_EQ(patch["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(patch["id"].get<std::string>().rfind("ctc_", 0), 0u);
  const std::optional<OutputItemRef> ref = parseOutputItemId(patch["id"].get<std::string>());
  ASSERT_TRUE(ref.has_value()) << "an item_reference can name it";
  EXPECT_EQ(ref->response_id, "resp_test");
  EXPECT_EQ(ref->output_index, 1u);
  const json& note = body["output"][2];
  EXPECT_EQ(note["type"], "custom_tool_call");
  EXPECT_EQ(note["namespace"], "crm");
  EXPECT_EQ(note["name"], "note");
  EXPECT_EQ(note["input"], "hi");

  // Streaming, one byte at a time (escapes split across events): the same
  // items, and the custom calls' input as decoded deltas.
  ResponsesResponder streamed(clientToolOptions(true));
  std::string bytes = streamed.start();
  const std::string text = clientToolCallText();
  for (char c : text) bytes += streamed.onEvent(delta(std::string(1, c))).body;
  bytes += streamed.onEvent(finalEvent(FinishReason::kStop, usage(10, 0, 0, 20))).body;
  const std::vector<Sse> events = parseSse(bytes);
  std::vector<std::string> collapsed;
  std::map<int, std::string> inputs;
  for (const Sse& e : events) {
    const std::string& t = e.event;
    if (collapsed.empty() || collapsed.back() != t || t.find(".delta") == std::string::npos) collapsed.push_back(t);
    if (t == "response.custom_tool_call_input.delta") inputs[e.data["output_index"].get<int>()] += e.data["delta"].get<std::string>();
    if (t == "response.custom_tool_call_input.done") {
      EXPECT_EQ(e.data["input"], inputs[e.data["output_index"].get<int>()]);
      EXPECT_TRUE(e.data.contains("item_id"));
    }
    if (t == "response.output_item.added" && e.data["output_index"] == 1) {
      EXPECT_EQ(e.data["item"]["type"], "custom_tool_call");
      EXPECT_EQ(e.data["item"]["input"], "");
      EXPECT_EQ(e.data["item"]["status"], "in_progress");
    }
    if (t == "response.function_call_arguments.done") {
      EXPECT_EQ(e.data["name"], "get_customer");
    }
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
      "response.output_item.done",
      "response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(collapsed, expected);
  EXPECT_EQ(inputs[1], decoded);
  EXPECT_EQ(inputs[2], "hi");
  json streamed_output = events.back().data["response"]["output"];
  json blocking_output = body["output"];
  for (json* output : {&streamed_output, &blocking_output}) {
    for (json& item : *output) item.erase("call_id");  // random per call
  }
  EXPECT_EQ(streamed_output, blocking_output);
}

TEST(CustomToolInput, DecodesTheInputArgumentAndPassesAnythingElseThrough) {
  const auto decodeAll = [](std::string_view args, size_t step) {
    CustomToolInputDecoder d;
    std::string out;
    for (size_t i = 0; i < args.size(); i += step) out += d.push(args.substr(i, step));
    return out + d.finish();
  };
  for (size_t step : {1u, 3u, 100u}) {
    EXPECT_EQ(decodeAll("{\"input\":\"a\\tb\\\\c\\/\"}", step), "a\tb\\c/");
    EXPECT_EQ(decodeAll(" { \"input\" : \"x\" } ", step), "x") << "white space between tokens";
    EXPECT_EQ(decodeAll("{\"input\":\"\\ud83d\\ude00\"}", step), "\U0001F600") << "a surrogate pair";
    EXPECT_EQ(decodeAll("not json", step), "not json") << "raw when it never was the object";
    EXPECT_EQ(decodeAll("{\"text\":\"x\"}", step), "{\"text\":\"x\"}");
    EXPECT_EQ(decodeAll("{\"input\":\"ab\\q\"}", step), "ab\\q\"}") << "raw from a bad escape on";
    EXPECT_EQ(decodeAll("{\"input\":\"cut", step), "cut") << "arguments cut by the length limit";
    EXPECT_EQ(decodeAll("{\"inp", step), "{\"inp");
  }
}

TEST(ResponsesResponse, NonStreamingObject) {
  ResponsesResponder r(responsesOptions(false));
  EXPECT_EQ(r.start(), "");
  EXPECT_EQ(r.onEvent(delta("Hello")).body, "");
  ResponderOutput out = r.onEvent(finalEvent(FinishReason::kStop, usage(10, 0, 0, 2), "!", 1));
  const json body = json::parse(out.body);
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["error"], nullptr);
  EXPECT_EQ(body["incomplete_details"], nullptr);
  ASSERT_EQ(body["output"].size(), 1u);
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Hello!");
  EXPECT_EQ(body["usage"]["input_tokens"], 10);
  EXPECT_EQ(body["tool_choice"], "auto");
  EXPECT_EQ(body["parallel_tool_calls"], true);
}

TEST(ResponsesResponse, LengthIsIncomplete) {
  ResponsesResponder r(responsesOptions(true));
  std::string bytes = r.start() + r.onEvent(delta("Partial")).body;
  bytes += r.onEvent(finalEvent(FinishReason::kLength, usage(5, 0, 0, 1))).body;
  const std::vector<Sse> events = parseSse(bytes);
  EXPECT_EQ(events.back().event, "response.incomplete");
  const json& response = events.back().data["response"];
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"], (json{{"reason", "max_output_tokens"}}));
  EXPECT_EQ(response["output"][0]["status"], "incomplete");
}


// max_output_tokens cuts the stream inside a call's end marker (spelled with
// ordinary tokens, the cut fell inside one of its characters): the calls
// before it are completed, the cut one is incomplete, and its arguments hold
// nothing of the marker.
TEST(ResponsesResponse, ACallCutByTheLengthIsIncompleteAndItsArgumentsEndBeforeTheMarker) {
  ResponsesResponder r(responsesOptions(false));
  r.start();
  const std::string first = kCallBegin + "function" + kSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + kCallEnd;
  const std::string cut = kCallBegin + "function" + kSep + "get_time\n```json\n{\"zone\": \"UTC\"}\n```" +
                          kCallEnd.substr(0, std::string("<｜tool").size() + 1);  // inside "▁"
  r.onEvent(delta(kCallsBegin + first + "\n"));
  const json body = json::parse(r.onEvent(finalEvent(FinishReason::kLength, usage(5, 0, 0, 40), cut, 20)).body);
  EXPECT_EQ(body["status"], "incomplete");
  ASSERT_EQ(body["output"].size(), 2u) << body.dump();
  EXPECT_EQ(body["output"][0]["status"], "completed");
  EXPECT_EQ(body["output"][0]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(body["output"][1]["status"], "incomplete");
  EXPECT_EQ(body["output"][1]["name"], "get_time");
  EXPECT_EQ(body["output"][1]["arguments"], "{\"zone\": \"UTC\"}");
}
TEST(ResponsesResponse, FailureEndsTheStream) {
  ResponsesResponder r(responsesOptions(true));
  StreamEvent refused = finalEvent(FinishReason::kRefused, {});
  refused.refusal = serving::Refusal::kQueueFull;
  ResponderOutput out = r.onEvent(refused);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->http_status, 429);
  const std::vector<Sse> events = parseSse(out.body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].event, "response.failed");
  EXPECT_EQ(events[2].data["response"]["status"], "failed");
  EXPECT_EQ(events[2].data["response"]["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(events[2].data["sequence_number"], 2);
}

// ------------------------------------------------- responses: output_text logprobs

// A delta event of `text` as the scheduler makes it with logprobs: the
// text's own tokens, each with a log-probability and two alternatives.
StreamEvent tokensEvent(const std::string& text, float& next_logprob) {
  StreamEvent e;
  e.text = text;
  auto ids = tokenizer().encode(text);
  EXPECT_TRUE(ids.isOk());
  for (int32_t id : *ids) {
    e.token_ids.push_back(id);
    const float lp = next_logprob;
    next_logprob -= 0.125f;
    e.logprobs.push_back({id, lp, {{id, lp}, {1, lp - 2.0f}}});
  }
  return e;
}

std::string tokenBytesOf(const json& logprobs) {
  std::string bytes;
  for (const json& lp : logprobs) {
    for (const json& b : lp["bytes"]) bytes += static_cast<char>(b.get<int>());
  }
  return bytes;
}

ResponsesResponderOptions responsesLogprobOptions(bool stream) {
  ResponsesResponderOptions o = responsesOptions(stream);
  o.logprobs = true;
  o.tokenizer = &tokenizer();
  return o;
}

TEST(ResponsesResponse, OutputTextLogprobsCoverEachMessagesContentTokensOnly) {
  // Reasoning, a message, a call, and a second message: only the two
  // messages' tokens are reported, each in its own output_text part.
  ResponsesResponder r(responsesLogprobOptions(true));
  std::string bytes = r.start();
  float next = -0.125f;
  size_t content_tokens = 0;
  const std::vector<std::string> chunks = {"<think>Plan: call it.</think>", "\n\n", "Sure,", " checking.",
                                           kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n",
                                           "{\"city\": \"Paris\"}\n```" + kCallEnd + kCallsEnd, "Done", " now."};
  for (const std::string& chunk : chunks) {
    StreamEvent e = tokensEvent(chunk, next);
    if (chunk == "Sure," || chunk == " checking." || chunk == "Done" || chunk == " now.") content_tokens += e.logprobs.size();
    bytes += r.onEvent(e).body;
  }
  bytes += r.onEvent(finalEvent(FinishReason::kStop, usage(10, 0, 0, 40))).body;
  const std::vector<Sse> events = parseSse(bytes);

  const json& output = events.back().data["response"]["output"];
  ASSERT_EQ(output.size(), 4u);  // reasoning, message, function_call, message
  size_t reported = 0;
  for (size_t index : {1u, 3u}) {
    const json& part = output[index]["content"][0];
    const json& logprobs = part["logprobs"];
    ASSERT_FALSE(logprobs.empty()) << index;
    EXPECT_EQ(tokenBytesOf(logprobs), part["text"].get<std::string>()) << "the part's tokens spell its text";
    for (const json& lp : logprobs) {
      EXPECT_LE(lp["logprob"].get<double>(), 0.0);
      ASSERT_EQ(lp["top_logprobs"].size(), 2u);
      EXPECT_TRUE(lp["top_logprobs"][1].contains("bytes"));
    }
    reported += logprobs.size();
  }
  EXPECT_EQ(reported, content_tokens) << "reasoning and tool-call tokens are in no output_text";
  EXPECT_EQ(output[1]["content"][0]["text"], "Sure, checking.");
  EXPECT_EQ(output[3]["content"][0]["text"], "Done now.");

  // The stream: each delta carries its own tokens (OpenAI's ResponseLogProb,
  // without bytes); .done and content_part.done the whole part's.
  std::map<int, json> delta_logprobs;
  std::map<int, std::string> delta_text;
  for (const Sse& e : events) {
    const int index = e.data.value("output_index", -1);
    if (e.event == "response.output_text.delta") {
      for (const json& lp : e.data["logprobs"]) {
        EXPECT_FALSE(lp.contains("bytes"));
        EXPECT_EQ(lp["top_logprobs"].size(), 2u);
        delta_logprobs[index].push_back(lp);
      }
      delta_text[index] += e.data["delta"].get<std::string>();
    }
    if (e.event == "response.output_text.done") {
      const json& part_logprobs = output[index]["content"][0]["logprobs"];
      ASSERT_EQ(e.data["logprobs"].size(), part_logprobs.size());
      for (size_t k = 0; k < part_logprobs.size(); ++k) {
        EXPECT_EQ(e.data["logprobs"][k]["token"], part_logprobs[k]["token"]);
        EXPECT_EQ(e.data["logprobs"][k]["logprob"], part_logprobs[k]["logprob"]);
      }
      EXPECT_EQ(e.data["logprobs"], delta_logprobs[index]) << "the deltas' logprobs add up to the part's";
    }
    if (e.event == "response.content_part.done" && e.data["part"]["type"] == "output_text") {
      EXPECT_EQ(e.data["part"], output[index]["content"][0]);
    }
  }
  EXPECT_EQ(delta_text[1], "Sure, checking.");
  EXPECT_EQ(delta_text[3], "Done now.");
}

int32_t singleByteToken(uint8_t byte) {
  for (int32_t id = 0; id < tokenizer().vocabSize(); ++id) {
    if (tokenizer().tokenBytes(id) == std::string(1, static_cast<char>(byte))) return id;
  }
  ADD_FAILURE() << "no token for byte " << static_cast<int>(byte);
  return 0;
}

TEST(ResponsesResponse, OutputTextLogprobsKeepTheTokensOfASplitCharacterAndDropAStopString) {
  // "好" (e5 a5 bd) as three byte tokens: the first event has no text (the
  // scheduler holds the partial character back), the second all of it. Then
  // " stop" is a stop string: its token made no text, and is not reported.
  ResponsesResponder r(responsesLogprobOptions(false));
  StreamEvent first;
  first.token_ids = {singleByteToken(0xe5)};
  first.logprobs.push_back({first.token_ids[0], -1.0f, {}});
  EXPECT_EQ(r.onEvent(first).body, "");
  StreamEvent second;
  second.text = "好";
  second.token_ids = {singleByteToken(0xa5), singleByteToken(0xbd)};
  for (int32_t id : second.token_ids) second.logprobs.push_back({id, -0.5f, {}});
  EXPECT_EQ(r.onEvent(second).body, "");
  float next = -0.25f;
  StreamEvent stop = tokensEvent(" stop", next);
  stop.text.clear();  // the stop string is cut from the text
  stop.final = true;
  stop.finish_reason = FinishReason::kStop;
  stop.usage = usage(4, 0, 0, 4);
  const json body = json::parse(r.onEvent(stop).body);
  const json& part = body["output"][0]["content"][0];
  EXPECT_EQ(part["text"], "好");
  ASSERT_EQ(part["logprobs"].size(), 3u) << part;
  EXPECT_EQ(tokenBytesOf(part["logprobs"]), "好");
  EXPECT_EQ(part["logprobs"][0]["logprob"], -1.0);
  EXPECT_EQ(part["logprobs"][0]["top_logprobs"], json::array());
}

TEST(ResponsesResponse, WithoutTheIncludeOutputTextLogprobsAreEmpty) {
  ResponsesResponder r(responsesOptions(false));
  float next = -0.125f;
  r.onEvent(tokensEvent("Hello", next));  // logprobs in the events are not asked for here
  const json body = json::parse(r.onEvent(finalEvent(FinishReason::kStop, usage(3, 0, 0, 1))).body);
  EXPECT_EQ(body["output"][0]["content"][0]["logprobs"], json::array());
}

TEST(Sse, Framing) {
  EXPECT_EQ(sseData(json{{"a", "line\nbreak"}}), "data: {\"a\":\"line\\nbreak\"}\n\n");
  EXPECT_EQ(sseEvent("response.created", json{{"x", 1}}), "event: response.created\ndata: {\"x\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_EQ(jsonText(json("é\xff")), "\"é\xef\xbf\xbd\"") << "invalid UTF-8 is replaced, not thrown";
}

}  // namespace
}  // namespace lg::proxy::openai

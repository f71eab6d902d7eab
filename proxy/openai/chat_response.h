// ChatResponder: a chat completion's scheduler events as OpenAI's
// `chat.completion` object, or as the `chat.completion.chunk` stream.
//
// Generated text goes through the DeepSeekOutputParser: reasoning becomes
// `reasoning_content` (DeepSeek's field), tool-call text becomes `tool_calls`
// (streamed as deltas: the first with index, id, type and name, then argument
// chunks), the rest `content`. finish_reason is "tool_calls" when the reply
// called a tool.
//
// Stream: a first chunk with the role, content chunks, a chunk with the
// finish_reason and an empty delta, then (stream_options.include_usage) a
// chunk with `usage` and no choices, then `data: [DONE]`. With include_usage
// every other chunk has "usage": null, as OpenAI sends.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/output_parser.h"
#include "proxy/openai/responder.h"
#include "proxy/openai/usage.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

struct ChatResponderOptions {
  ResponseMeta meta;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;                        // the request's logprobs (top_logprobs come with the events)
  const text::Tokenizer* tokenizer = nullptr;   // token text for logprobs; required when logprobs
  OutputParserOptions parser;                   // PromptEncoder::outputOptions
  ParamNames params;                            // for refusals in final events
  RetryAfter retry;
  UsageCostHook cost;                           // usage.cost (billing)
};

class ChatResponder final : public Responder {
 public:
  explicit ChatResponder(ChatResponderOptions options);

  // Streaming: the first chunk (role "assistant"), to send as soon as the
  // request is accepted. Called implicitly by the first onEvent otherwise.
  // Not streaming: "".
  std::string start() override;

  ResponderOutput onEvent(const serving::StreamEvent& event);
  // One choice only: `choice` is 0.
  ResponderOutput onEvent(size_t /*choice*/, const serving::StreamEvent& event) override { return onEvent(event); }

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  // Adds the parser's pieces to `delta` (streaming) and to the accumulated message.
  void apply(const std::vector<OutputPiece>& pieces, nlohmann::json* delta);
  ResponderOutput finish(const serving::StreamEvent& event);

  ChatResponderOptions o_;
  DeepSeekOutputParser parser_;
  bool started_ = false;
  bool done_ = false;
  UsageCounts usage_;
  // The whole reply (non-streaming; also tells whether tools were called).
  std::string content_;
  std::string reasoning_;
  nlohmann::json tool_calls_ = nlohmann::json::array();
  nlohmann::json logprobs_ = nlohmann::json::array();  // non-streaming: all; streaming: not yet sent
  std::vector<OutputPiece> pieces_;  // scratch
};

}  // namespace lg::proxy::openai

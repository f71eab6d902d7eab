// ChatResponder: a chat completion's scheduler events as OpenAI's
// `chat.completion` object, or as the `chat.completion.chunk` stream.
//
// Generated text goes through the DeepSeekOutputParser: reasoning becomes
// `reasoning_content` (DeepSeek's field), tool-call text becomes `tool_calls`
// (streamed as deltas: the first with index, id, type and name, then argument
// chunks), the rest `content`. finish_reason is "tool_calls" when the reply
// called a tool.
//
// With n > 1 each choice (one scheduler request each) has its own parser and
// message, and its chunks carry its `index`; usage sums the choices, and the
// response ends once every choice finished (or at the first that failed).
//
// Stream: a first chunk per choice with the role, content chunks, a chunk per
// choice with its finish_reason, then (stream_options.include_usage) a chunk
// with `usage` and no choices, then `data: [DONE]`. With include_usage every
// other chunk has "usage": null, as OpenAI sends.
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
  size_t choices = 1;                           // n
};

class ChatResponder final : public Responder {
 public:
  explicit ChatResponder(ChatResponderOptions options);

  // Streaming: the first chunk of each choice (role "assistant"), to send as
  // soon as the request is accepted. Called implicitly by the first onEvent
  // otherwise. Not streaming: "".
  std::string start() override;

  // An event of choice `choice` (0 .. n-1).
  ResponderOutput onEvent(size_t choice, const serving::StreamEvent& event) override;
  // The only choice's (n = 1).
  ResponderOutput onEvent(const serving::StreamEvent& event) { return onEvent(0, event); }

 private:
  struct Choice {
    explicit Choice(const OutputParserOptions& o) : parser(o) {}
    DeepSeekOutputParser parser;
    bool finished = false;
    std::string finish_reason;
    // The whole reply (non-streaming; also tells whether tools were called).
    std::string content;
    std::string reasoning;
    nlohmann::json tool_calls = nlohmann::json::array();
    nlohmann::json logprobs = nlohmann::json::array();  // non-streaming: all; streaming: not yet sent
  };
  nlohmann::json chunk(nlohmann::json choices) const;
  // Adds the parser's pieces to `delta` (streaming) and to the choice's message.
  void apply(Choice& c, const std::vector<OutputPiece>& pieces, nlohmann::json* delta);
  // The choice's final event: its last chunk (streaming), and the end of the
  // response once every choice finished.
  ResponderOutput finish(size_t index, const serving::StreamEvent& event);
  nlohmann::json logprobsJson(const Choice& c) const;

  ChatResponderOptions o_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  bool started_ = false;
  bool done_ = false;
  UsageCounts usage_;
  std::vector<OutputPiece> pieces_;  // scratch
};

}  // namespace lg::proxy::openai

// CompletionResponder: the scheduler events of a /v1/completions request (one
// scheduler request per prompt, each a choice) as OpenAI's `text_completion`
// object or its stream of `text_completion` chunks.
//
// Text is passed through as generated (no reasoning or tool parsing: the
// legacy endpoint returns raw text). With echo the prompt's text comes first
// (in the choice's first chunk when streaming), and with echo + logprobs the
// prompt tokens' log-probabilities too, the first token's null. Usage sums the
// choices. The stream ends, after every choice finished, with the usage chunk
// (include_usage) and `data: [DONE]`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/completion_request.h"
#include "proxy/openai/logprobs.h"
#include "proxy/openai/responder.h"
#include "proxy/openai/usage.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

struct CompletionResponderOptions {
  ResponseMeta meta;
  bool stream = false;
  bool include_usage = false;
  std::optional<int32_t> logprobs;             // the request's legacy logprobs
  const text::Tokenizer* tokenizer = nullptr;  // required
  // With echo: each choice's prompt text (completionEchoText); empty: no echo.
  std::vector<std::string> echo_texts;
  size_t choices = 1;
  ParamNames params{"prompt", "max_tokens", "logprobs"};
  RetryAfter retry;
  UsageCostHook cost;
};

// The text echo returns for a prompt: the client's string, or its ids decoded
// (an id outside the vocabulary contributes nothing; the scheduler refuses
// such a prompt anyway).
std::string completionEchoText(const CompletionPrompt& prompt, const text::Tokenizer& tokenizer);

class CompletionResponder final : public Responder {
 public:
  explicit CompletionResponder(CompletionResponderOptions options);

  // `choice` is the prompt's index (0 .. choices-1).
  ResponderOutput onEvent(size_t choice, const serving::StreamEvent& event) override;

 private:
  struct Choice {
    std::string text;  // non-streaming: the whole text
    CompletionLogprobs logprobs;
    bool started = false;
    bool finished = false;
    std::string finish_reason;
  };
  nlohmann::json object(nlohmann::json choices) const;

  CompletionResponderOptions o_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  bool done_ = false;
  UsageCounts usage_;
};

}  // namespace lg::proxy::openai

// Log-probabilities in the two OpenAI shapes, from the scheduler's
// serving::SampledToken (generated) and serving::PromptLogprob (echo).
//
// Tokens are byte-level BPE pieces, so one may hold part of a UTF-8
// character. Chat gives each token's text (lossy: U+FFFD for a partial
// character) and its exact `bytes`; legacy completions, which have no bytes
// field, spell a token that is not valid UTF-8 as "bytes:\xNN..." as OpenAI does.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/events.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

// A non-finite log-probability (a masked token) as OpenAI writes it.
double finiteLogprob(float logprob);

// Chat: one element of logprobs.content:
// {"token", "logprob", "bytes": [...], "top_logprobs": [{"token", "logprob", "bytes"}]}.
nlohmann::json chatLogprob(const text::Tokenizer& tokenizer, const serving::SampledToken& token);

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"},
// built token by token. text_offset counts characters (code points) into the
// choice's `text`, prompt included when echoed.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  void addPrompt(const serving::PromptLogprob& token);  // the first has no log-probability: null
  void addGenerated(const serving::SampledToken& token);
  // Text before the next token that has no log-probabilities of its own
  // (an echoed prompt whose tokens were not scored).
  void advance(std::string_view text);
  // Takes what was added since the last take (streaming) or all of it.
  nlohmann::json take();
  bool empty() const { return tokens_.empty(); }

 private:
  void addToken(int32_t id, std::optional<float> logprob, std::span<const serving::TokenLogprob> top, bool has_top);

  const text::Tokenizer& tokenizer_;
  nlohmann::json tokens_ = nlohmann::json::array();
  nlohmann::json token_logprobs_ = nlohmann::json::array();
  nlohmann::json top_logprobs_ = nlohmann::json::array();
  nlohmann::json text_offset_ = nlohmann::json::array();
  int64_t offset_ = 0;  // characters so far
};

// The text a token contributes in completions' logprobs (see above).
std::string completionTokenText(const text::Tokenizer& tokenizer, int32_t id);

}  // namespace lg::proxy::openai

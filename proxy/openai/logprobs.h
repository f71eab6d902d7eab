// Log-probabilities in the two OpenAI shapes, from the scheduler's
// serving::SampledToken (generated) and serving::PromptLogprob (echo).
//
// Tokens are byte-level BPE pieces, so one may hold part of a UTF-8
// character. Chat gives each token's text (lossy: U+FFFD for a partial
// character) and its exact `bytes`; legacy completions, which have no bytes
// field, spell a token that is not valid UTF-8 as "bytes:\xNN..." as OpenAI does.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/events.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

// A non-finite log-probability (a masked token) as OpenAI writes it.
double finiteLogprob(float logprob);

// Chat: one element of logprobs.content:
// {"token", "logprob", "bytes": [...], "top_logprobs": [{"token", "logprob", "bytes"}]}.
// The Responses API's output_text part has the same shape in its `logprobs`.
nlohmann::json chatLogprob(const text::Tokenizer& tokenizer, const serving::SampledToken& token);

// Responses streaming events (response.output_text.delta and .done): OpenAI's
// ResponseLogProb, {"token", "logprob", "top_logprobs": [{"token", "logprob"}]},
// without the bytes the output_text part carries.
nlohmann::json responsesEventLogprob(const text::Tokenizer& tokenizer, const serving::SampledToken& token);

// Which generated tokens produced a stretch of the reply's text, so that the
// log-probabilities of one part of a reply (the Responses API's output_text,
// not its reasoning or tool calls) can be picked out of all of them.
//
// It decodes the tokens as the scheduler's TextStream does (text::StreamDecoder,
// special tokens kept), so its offsets are those of the concatenated
// StreamEvent::text, which a stop string only cuts short. A token that ends
// inside a UTF-8 character spans no text of its own: it goes with the token
// that completes the character.
//
// Not thread-safe: one per reply.
class TokenTextSpans {
 public:
  explicit TokenTextSpans(const text::Tokenizer& tokenizer) : decoder_(tokenizer) {}

  // In generation order (StreamEvent::logprobs), before the text they made is read.
  void add(serving::SampledToken token);
  // End of generation: a character left incomplete is decoded as U+FFFD, as the scheduler does.
  void finish();
  // The tokens whose text overlaps [begin, end) of the reply's text and that
  // no earlier call returned, in order. Calls must come with nondecreasing
  // `begin` (pieces in the order of the text); tokens wholly before `begin`
  // are forgotten.
  std::vector<serving::SampledToken> take(size_t begin, size_t end);

 private:
  struct Span {
    serving::SampledToken token;
    size_t begin = 0;
    size_t end = 0;  // set once the token's character is complete
    bool taken = false;
  };

  text::StreamDecoder decoder_;
  std::deque<Span> spans_;  // not yet forgotten
  size_t open_ = 0;         // spans at the back whose end is not known yet
  size_t decoded_ = 0;      // bytes of text so far
};

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

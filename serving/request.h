// GenerationRequest: what the gateway hands the scheduler. The prompt is
// already templated and tokenized; the scheduler knows nothing of HTTP, JSON
// or prices. validateRequest() refuses bad input before any work, each
// problem with its own Refusal, so the gateway can map it to an HTTP status
// and an OpenAI error without parsing messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/namespace.h"
#include "serving/token_constraint.h"

namespace lg::serving {

using Clock = std::chrono::steady_clock;

struct SamplingOptions {
  float temperature = 1.0f;  // >= 0, finite; 0 is greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // >= 0; 0: no limit
  std::optional<uint64_t> seed;  // the same seed gives the same tokens, whatever else runs in the batch
  // Tokens to generate at most; required (> 0) unless only prompt log-
  // probabilities are wanted (evaluation harnesses send max_tokens 0 + echo).
  int32_t max_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // besides the model's end-of-sequence tokens
  std::vector<std::string> stop;        // the text ends before the first of these
  bool logprobs = false;                // each generated token's log-probability
  int32_t top_logprobs = 0;             // 0..20 alternatives per generated (and prompt) token
  bool prompt_logprobs = false;         // OpenAI `echo` with `logprobs`: every prompt token's log-probability

  // Logit processing before sampling (serving/logits_processor.h), in vLLM's
  // order: penalties, bias, then min_p after temperature.
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit, each in [-100, 100]
  float presence_penalty = 0.0f;    // [-2, 2]: subtracted from every token generated at least once (OpenAI)
  float frequency_penalty = 0.0f;   // [-2, 2]: subtracted per time a token was generated (OpenAI)
  float repetition_penalty = 1.0f;  // (0, 2]: a token of the prompt or the output has its logit divided (if
                                    // positive) or multiplied (if negative) by it (vLLM's)
  float min_p = 0.0f;               // [0, 1]: drop tokens less likely than min_p times the likeliest (vLLM's)
  // Structured output (serving/token_constraint.h): each sequence makes its
  // own; only allowed tokens are sampled, masked before temperature, top-p,
  // top-k and log-probabilities. Empty: free text.
  TokenConstraintFactory constraint;
};

struct GenerationRequest {
  explicit GenerationRequest(cache::TeamNamespace team) : ns(std::move(team)) {}

  std::vector<int32_t> prompt;
  cache::TeamNamespace ns;                      // the cache namespace the request reads and feeds
  std::vector<cache::SharedNamespace> shared;   // shared namespaces it may also read (if granted)
  SamplingOptions sampling;
  int32_t priority = 0;                         // higher is admitted first and preempted last
  std::optional<Clock::time_point> deadline;    // not admitted by then: refused; running past it: cancelled
};

// Why a request was refused. Bad input is the client's to fix (HTTP 400);
// kContextOverflow and kExceedsPool name the numbers; the last three are
// overload or shutdown (HTTP 429 or 503 with Retry-After).
enum class Refusal : uint8_t {
  kNone,
  kEmptyPrompt,
  kTokenOutOfRange,   // a prompt or stop token id outside the model's vocabulary
  kMaxTokens,         // max_tokens negative, or 0 without prompt log-probabilities
  kTemperature,       // negative, NaN or infinite
  kTopP,              // outside (0, 1]
  kTopK,              // negative
  kLogprobs,          // top_logprobs outside 0..20
  kStopStrings,       // too many, or an empty one
  kLogitProcessing,   // logit_bias, a penalty or min_p out of range
  kContextOverflow,   // prompt (+ max_tokens) longer than the model's context
  kExceedsPool,       // prompt + max_tokens larger than the whole latent pool
  kTooManyChoices,    // a group larger than can ever run at once (max_running): it is admitted whole or not at all
  kQueueFull,         // too many requests waiting for admission
  kQueueTimeout,      // waited for admission past the queue's limit or the request's deadline
  kShuttingDown,
};
inline constexpr size_t kRefusalCount = static_cast<size_t>(Refusal::kShuttingDown) + 1;

std::string_view refusalName(Refusal refusal);  // "empty_prompt", "context_overflow", ...
// The overload refusals (kQueueFull, kQueueTimeout, kShuttingDown): retrying later may succeed.
bool isOverload(Refusal refusal);

struct RequestLimits {
  int32_t vocab_size = 0;
  int32_t max_context = 0;
  int32_t max_stop_strings = 4;
  int64_t pool_tokens = 0;             // the latent pool's capacity in tokens
};

struct Refused {
  Refusal reason = Refusal::kNone;
  std::string message;  // names the field and the values; never prompt text
  explicit operator bool() const { return reason != Refusal::kNone; }
};

// Refuses a request that can never run, before any work.
Refused validateRequest(const GenerationRequest& request, const RequestLimits& limits);

// Pool tokens held for a request's output: min(max_tokens, reservation).
int32_t outputReservation(int32_t max_tokens, int32_t reservation_tokens);

}  // namespace lg::serving

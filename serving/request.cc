#include "serving/request.h"

#include <array>
#include <algorithm>
#include <cmath>

namespace lg::serving {

namespace {
constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's limit; engine/sampler.cc enforces the same

Refused refuse(Refusal reason, std::string message) { return Refused{reason, std::move(message)}; }
}  // namespace

std::string_view refusalName(Refusal refusal) {
  static constexpr std::array<std::string_view, kRefusalCount> kNames = {
      "none",          "empty_prompt",     "token_out_of_range", "max_tokens", "temperature",
      "top_p",         "top_k",            "logprobs",           "stop",       "logit_processing", "context_overflow",
      "exceeds_pool",  "too_many_choices", "queue_full",         "queue_timeout", "shutting_down"};
  return kNames[static_cast<size_t>(refusal)];
}

bool isOverload(Refusal refusal) {
  return refusal == Refusal::kQueueFull || refusal == Refusal::kQueueTimeout || refusal == Refusal::kShuttingDown;
}

int32_t outputReservation(int32_t max_tokens, int32_t reservation_tokens) {
  return std::max(0, std::min(max_tokens, reservation_tokens));
}

Refused validateRequest(const GenerationRequest& request, const RequestLimits& limits) {
  const SamplingOptions& s = request.sampling;
  const auto prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return refuse(Refusal::kEmptyPrompt, "the prompt has no tokens");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t id = request.prompt[i];
    if (id < 0 || id >= limits.vocab_size) {
      return refuse(Refusal::kTokenOutOfRange, "prompt token " + std::to_string(i) + " is " + std::to_string(id) +
                                                   ", outside the vocabulary [0, " +
                                                   std::to_string(limits.vocab_size) + ")");
    }
  }
  for (int32_t id : s.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return refuse(Refusal::kTokenOutOfRange, "stop token id " + std::to_string(id) +
                                                   " is outside the vocabulary [0, " +
                                                   std::to_string(limits.vocab_size) + ")");
    }
  }
  if (s.max_tokens < 0) return refuse(Refusal::kMaxTokens, "max_tokens must be >= 0, got " + std::to_string(s.max_tokens));
  if (s.max_tokens == 0 && !s.prompt_logprobs) {
    return refuse(Refusal::kMaxTokens, "max_tokens must be >= 1 (0 only to score the prompt, with prompt logprobs)");
  }
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    return refuse(Refusal::kTemperature, "temperature must be a finite number >= 0, got " + std::to_string(s.temperature));
  }
  if (!(s.top_p > 0 && s.top_p <= 1)) {  // also false for NaN
    return refuse(Refusal::kTopP, "top_p must be in (0, 1], got " + std::to_string(s.top_p));
  }
  if (s.top_k < 0) return refuse(Refusal::kTopK, "top_k must be >= 0, got " + std::to_string(s.top_k));
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
    return refuse(Refusal::kLogprobs, "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                                          std::to_string(s.top_logprobs));
  }
  if (static_cast<int32_t>(s.stop.size()) > limits.max_stop_strings) {
    return refuse(Refusal::kStopStrings, "at most " + std::to_string(limits.max_stop_strings) +
                                             " stop strings are allowed, got " + std::to_string(s.stop.size()));
  }
  for (const std::string& stop : s.stop) {
    if (stop.empty()) return refuse(Refusal::kStopStrings, "a stop string is empty");
  }
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= limits.vocab_size) {
      return refuse(Refusal::kTokenOutOfRange, "logit_bias names token " + std::to_string(id) +
                                                   ", outside the vocabulary [0, " + std::to_string(limits.vocab_size) +
                                                   ")");
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return refuse(Refusal::kLogitProcessing, "logit_bias values must be in [-100, 100]");
    }
  }
  if (!(s.presence_penalty >= -2.0f && s.presence_penalty <= 2.0f)) {
    return refuse(Refusal::kLogitProcessing, "presence_penalty must be in [-2, 2]");
  }
  if (!(s.frequency_penalty >= -2.0f && s.frequency_penalty <= 2.0f)) {
    return refuse(Refusal::kLogitProcessing, "frequency_penalty must be in [-2, 2]");
  }
  if (!(s.repetition_penalty > 0.0f && s.repetition_penalty <= 2.0f)) {
    return refuse(Refusal::kLogitProcessing, "repetition_penalty must be in (0, 2]");
  }
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) return refuse(Refusal::kLogitProcessing, "min_p must be in [0, 1]");
  if (prompt_len + s.max_tokens > limits.max_context) {
    return refuse(Refusal::kContextOverflow,
                  "the prompt has " + std::to_string(prompt_len) + " tokens and max_tokens is " +
                      std::to_string(s.max_tokens) + ": together " + std::to_string(prompt_len + s.max_tokens) +
                      ", more than the model's context of " + std::to_string(limits.max_context) + " tokens");
  }
  // So that a request running alone always fits, however long it generates.
  const int64_t needed = prompt_len + s.max_tokens;
  if (needed > limits.pool_tokens) {
    return refuse(Refusal::kExceedsPool, "the prompt and max_tokens need " + std::to_string(needed) +
                                             " tokens of latent pool, more than its capacity of " +
                                             std::to_string(limits.pool_tokens));
  }
  return {};
}

}  // namespace lg::serving

// Token sampling for one request: greedy, temperature, top-k, top-p with a
// per-request RNG (a request with a seed gets the same tokens for the same
// logits), OpenAI-style log-probabilities, and stop conditions.
//
// Order of operations (vLLM / OpenAI semantics): logits / temperature, keep the
// top_k most likely tokens, keep the smallest most-likely set whose probability
// reaches top_p, renormalize, draw. temperature == 0 is greedy (ties: lowest id).
// Log-probabilities are those of the model's distribution (log_softmax of the
// raw logits), independent of the sampling settings.
//
// Thread-safety: a Sampler or StopChecker belongs to one request; no sharing.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "common/status.h"

namespace lg::engine {

struct SamplingParams {
  float temperature = 1.0f;         // >= 0; 0 means greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // 0: no limit
  std::optional<uint64_t> seed;     // absent: the caller's fallback seed
  int32_t max_tokens = 0;           // 0: until a stop condition or the context limit
  std::vector<int32_t> eos_token_ids;
  std::vector<std::vector<int32_t>> stop_sequences;  // token-id sequences
  int32_t top_logprobs = 0;         // 0..20 alternatives per position
  bool logprobs = false;
};

// Checks ranges (temperature, top_p, top_k, top_logprobs <= 20, empty stop
// sequences, ids within the vocabulary).
Status validateSamplingParams(const SamplingParams& params, int32_t vocab_size);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;            // set when params.logprobs
  std::vector<TokenLogprob> top;   // params.top_logprobs entries, most likely first
};

// The model's log-probability of `token` under `logits` and its
// `top_logprobs` most likely alternatives (ties: lowest id first). `order` is
// scratch. Also scores prompt tokens (OpenAI `echo` with `logprobs`).
SampledToken scoreToken(std::span<const float> logits, int32_t token, int32_t top_logprobs,
                        std::vector<int32_t>& order);

class Sampler {
 public:
  // fallback_seed is used when params.seed is absent (the engine passes fresh
  // entropy, so unseeded requests differ).
  Sampler(SamplingParams params, uint64_t fallback_seed);

  SampledToken sample(std::span<const float> logits);

 private:
  int32_t draw(std::span<const float> logits);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch
  std::vector<double> probs_;
};

enum class FinishReason { kNone, kStop, kLength };

// Watches generated tokens for EOS, stop sequences and max_tokens.
class StopChecker {
 public:
  explicit StopChecker(const SamplingParams& params);

  // Feeds one generated token; returns why generation must finish after it.
  FinishReason push(int32_t token);
  // Trailing generated tokens that belong to the matched EOS or stop sequence
  // and are not part of the visible output (0 when not stopped on them).
  int32_t matchedLength() const { return matched_; }
  // Trailing tokens that could still be the start of a stop sequence: a
  // streaming caller holds them back until they are resolved.
  int32_t pendingLength() const;
  int32_t generated() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  std::vector<int32_t> eos_;
  std::vector<std::vector<int32_t>> stops_;
  int32_t max_tokens_;
  std::vector<int32_t> tokens_;
  int32_t matched_ = 0;
};

}  // namespace lg::engine

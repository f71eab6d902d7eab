// LogitsProcessor: what happens to a sequence's logits between the forward
// pass and the sampler, in vLLM's order:
//   1. repetition_penalty (vLLM's): a token of the prompt or the output has a
//      positive logit divided by it, a negative one multiplied;
//   2. presence_penalty and frequency_penalty (OpenAI's): subtracted from the
//      logit of every token generated so far, once, and once per time;
//   3. logit_bias: added to the named tokens' logits;
//   4. the constraint's mask (a grammar, proxy-independent: a bitmask over
//      the vocabulary from text/grammar/): disallowed tokens get -inf;
//   5. min_p: after temperature, tokens less likely than min_p times the
//      likeliest get -inf (p_i / p_max < min_p <=> x_i < x_max + T ln min_p).
// The sampler then applies temperature, top_k and top_p to what is left, and
// reports log-probabilities of this processed distribution (as vLLM does).
// A sequence without any of these samples the forward pass's row directly.
//
// Not thread-safe: one per sequence, used on the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "serving/request.h"

namespace lg::serving {

class LogitsProcessor {
 public:
  LogitsProcessor(const SamplingOptions& sampling, std::span<const int32_t> prompt);

  // Whether the row must be processed (any penalty, bias or min_p).
  bool active() const { return active_; }

  // Writes the processed `row` into `out` (same size). `allowed` (null: no
  // constraint) is a bitmask over the vocabulary: bit t of word t / 32 set
  // when token t may come next.
  void apply(std::span<const float> row, std::span<float> out, const uint32_t* allowed) const;

  // A token was generated (the penalties count it).
  void accepted(int32_t token);

 private:
  float presence_, frequency_, repetition_, min_p_, temperature_;
  std::vector<std::pair<int32_t, float>> bias_;
  std::unordered_map<int32_t, int32_t> generated_;  // token -> times generated
  std::vector<int32_t> prompt_tokens_;              // distinct, for repetition_penalty
  bool active_ = false;
};

}  // namespace lg::serving

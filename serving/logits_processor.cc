#include "serving/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lg::serving {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float repeated(float logit, float penalty) { return logit > 0 ? logit / penalty : logit * penalty; }

}  // namespace

LogitsProcessor::LogitsProcessor(const SamplingOptions& s, std::span<const int32_t> prompt)
    : presence_(s.presence_penalty),
      frequency_(s.frequency_penalty),
      repetition_(s.repetition_penalty),
      min_p_(s.temperature > 0 ? s.min_p : 0.0f),  // greedy picks the likeliest whatever min_p says
      temperature_(s.temperature),
      bias_(s.logit_bias) {
  if (repetition_ != 1.0f) {
    prompt_tokens_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
    prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
  }
  active_ = presence_ != 0.0f || frequency_ != 0.0f || repetition_ != 1.0f || min_p_ > 0.0f || !bias_.empty();
}

void LogitsProcessor::accepted(int32_t token) {
  if (presence_ != 0.0f || frequency_ != 0.0f || repetition_ != 1.0f) ++generated_[token];
}

void LogitsProcessor::apply(std::span<const float> row, std::span<float> out, const uint32_t* allowed) const {
  std::copy(row.begin(), row.end(), out.begin());
  const auto vocab = static_cast<int32_t>(out.size());
  if (repetition_ != 1.0f) {
    for (int32_t t : prompt_tokens_) {
      if (!generated_.contains(t)) out[static_cast<size_t>(t)] = repeated(out[static_cast<size_t>(t)], repetition_);
    }
    for (const auto& [t, n] : generated_) out[static_cast<size_t>(t)] = repeated(out[static_cast<size_t>(t)], repetition_);
  }
  if (presence_ != 0.0f || frequency_ != 0.0f) {
    for (const auto& [t, n] : generated_) out[static_cast<size_t>(t)] -= presence_ + frequency_ * static_cast<float>(n);
  }
  for (const auto& [t, b] : bias_) out[static_cast<size_t>(t)] += b;
  if (allowed != nullptr) {
    for (int32_t w = 0; w * 32 < vocab; ++w) {
      const uint32_t bits = allowed[w];
      if (bits == ~0u) continue;  // all 32 allowed: free text's common case
      const int32_t end = std::min(vocab, (w + 1) * 32);
      if (bits == 0) {  // none allowed: a constraint's common case (a vectorized fill)
        std::fill(out.begin() + w * 32, out.begin() + end, kNegInf);
        continue;
      }
      for (int32_t t = w * 32; t < end; ++t) {
        if ((bits >> (t & 31) & 1u) == 0) out[static_cast<size_t>(t)] = kNegInf;
      }
    }
  }
  if (min_p_ > 0.0f) {
    const float mx = *std::max_element(out.begin(), out.end());
    if (std::isfinite(mx)) {
      const float threshold = mx + temperature_ * std::log(min_p_);
      for (float& x : out) {
        if (x < threshold) x = kNegInf;
      }
    }
  }
}

}  // namespace lg::serving

#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace lg::engine {
namespace {

constexpr int32_t kMaxTopLogprobs = 20;

// Uniform in [0, 1) from 53 random bits: fixed across standard libraries,
// unlike std::uniform_real_distribution.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
  }
  return best;
}

}  // namespace

Status validateSamplingParams(const SamplingParams& p, int32_t vocab_size) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return invalidArgument("temperature must be a finite number >= 0");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return invalidArgument("top_p must be in (0, 1]");
  if (p.top_k < 0) return invalidArgument("top_k must be >= 0");
  if (p.max_tokens < 0) return invalidArgument("max_tokens must be >= 0");
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return invalidArgument("top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
  }
  for (const auto& s : p.stop_sequences) {
    if (s.empty()) return invalidArgument("stop sequences must not be empty");
    for (int32_t id : s) {
      if (id < 0 || id >= vocab_size) return invalidArgument("stop sequence token " + std::to_string(id) + " out of range");
    }
  }
  for (int32_t id : p.eos_token_ids) {
    if (id < 0 || id >= vocab_size) return invalidArgument("eos token " + std::to_string(id) + " out of range");
  }
  return Status::ok();
}

Sampler::Sampler(SamplingParams params, uint64_t fallback_seed)
    : params_(std::move(params)), rng_(params_.seed.value_or(fallback_seed)) {}

SampledToken scoreToken(std::span<const float> logits, int32_t token, int32_t top_logprobs,
                        std::vector<int32_t>& order) {
  SampledToken out;
  out.token = token;
  // log_softmax in double: logprob = x - max - log(sum exp(x - max)).
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double log_z = static_cast<double>(mx) + std::log(sum);
  out.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - log_z);
  const int32_t n = std::min<int32_t>(top_logprobs, static_cast<int32_t>(logits.size()));
  if (n > 0) {
    order.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = order[static_cast<size_t>(i)];
      // Masked tokens (-inf: a constraint, min_p) are no alternatives.
      if (!std::isfinite(logits[static_cast<size_t>(t)])) break;
      out.top.push_back({t, static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - log_z)});
    }
  }
  return out;
}

SampledToken Sampler::sample(std::span<const float> logits) {
  const int32_t token = draw(logits);
  if (params_.logprobs || params_.top_logprobs > 0) return scoreToken(logits, token, params_.top_logprobs, order_);
  SampledToken out;
  out.token = token;
  return out;
}

int32_t Sampler::draw(std::span<const float> logits) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (params_.temperature == 0.0f || params_.top_k == 1) return argmax(logits);
  const double inv_t = 1.0 / params_.temperature;
  const float mx = logits[static_cast<size_t>(argmax(logits))];
  const bool filtered = params_.top_k > 0 || params_.top_p < 1.0f;
  if (!filtered) {
    // Inverse CDF over the whole vocabulary in id order: no sort needed.
    probs_.resize(static_cast<size_t>(vocab));
    double total = 0.0;
    for (int32_t i = 0; i < vocab; ++i) {
      // A masked token (a constraint, min_p) weighs nothing: skip its exp.
      const float x = logits[static_cast<size_t>(i)];
      if (x != -std::numeric_limits<float>::infinity()) total += std::exp((static_cast<double>(x) - mx) * inv_t);
      probs_[static_cast<size_t>(i)] = total;
    }
    const double u = uniform01(rng_) * total;
    auto it = std::upper_bound(probs_.begin(), probs_.end(), u);
    return static_cast<int32_t>(std::min<ptrdiff_t>(it - probs_.begin(), vocab - 1));
  }
  // Candidates in descending probability (ties: lower id first), sorted only
  // as far as needed: the top-k set, or growing prefixes until top-p is reached.
  order_.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) order_[static_cast<size_t>(i)] = i;
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  int32_t sorted = 0;
  auto sortPrefix = [&](int32_t n) {
    n = std::min(n, vocab);
    if (n <= sorted) return;
    std::partial_sort(order_.begin() + sorted, order_.begin() + n, order_.end(), more_likely);
    sorted = n;
  };
  auto weight = [&](int32_t i) {
    return std::exp((static_cast<double>(logits[static_cast<size_t>(order_[static_cast<size_t>(i)])]) - mx) * inv_t);
  };
  const int32_t k = params_.top_k > 0 ? std::min(params_.top_k, vocab) : vocab;
  double k_mass = 0.0;  // top_p applies to the distribution renormalized over the top-k set
  if (k < vocab) {
    sortPrefix(k);
    for (int32_t i = 0; i < k; ++i) k_mass += weight(i);
  } else {
    for (int32_t i = 0; i < vocab; ++i) {
      const float x = logits[static_cast<size_t>(i)];
      if (x != -std::numeric_limits<float>::infinity()) k_mass += std::exp((static_cast<double>(x) - mx) * inv_t);
    }
  }
  const double target = static_cast<double>(params_.top_p) * k_mass;
  int32_t keep = 0;
  double kept_mass = 0.0;
  while (keep < k) {
    if (keep == sorted) sortPrefix(std::max(64, sorted * 8));
    kept_mass += weight(keep);
    ++keep;
    if (params_.top_p < 1.0f && kept_mass >= target) break;
  }
  double u = uniform01(rng_) * kept_mass;
  for (int32_t i = 0; i < keep; ++i) {
    u -= weight(i);
    if (u < 0.0) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(keep - 1)];
}

StopChecker::StopChecker(const SamplingParams& params)
    : eos_(params.eos_token_ids), stops_(params.stop_sequences), max_tokens_(params.max_tokens) {}

FinishReason StopChecker::push(int32_t token) {
  tokens_.push_back(token);
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) {
    matched_ = 1;
    return FinishReason::kStop;
  }
  for (const auto& s : stops_) {
    if (s.size() <= tokens_.size() && std::equal(s.rbegin(), s.rend(), tokens_.rbegin())) {
      matched_ = static_cast<int32_t>(s.size());
      return FinishReason::kStop;
    }
  }
  if (max_tokens_ > 0 && static_cast<int32_t>(tokens_.size()) >= max_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

int32_t StopChecker::pendingLength() const {
  int32_t longest = 0;
  for (const auto& s : stops_) {
    // The longest proper prefix of s that is a suffix of the output.
    const int32_t max_len = std::min<int32_t>(static_cast<int32_t>(s.size()) - 1, static_cast<int32_t>(tokens_.size()));
    for (int32_t len = max_len; len > longest; --len) {
      if (std::equal(s.begin(), s.begin() + len, tokens_.end() - len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace lg::engine

#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace lg::engine {
namespace {

double yarnMscale(double factor, double mscale) {
  if (factor <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(factor) + 1.0;
}

// The dimension index at which a frequency completes `rotations` turns over
// the original context length.
double correctionDim(double rotations, int dim, double base, double original_len) {
  return (dim * std::log(original_len / (rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

}  // namespace

RopeParams computeRope(const ModelConfig& c) {
  RopeParams out;
  const int dim = c.qk_rope_head_dim;
  const int half = dim / 2;
  const float base = static_cast<float>(c.rope_theta);
  // transformers computes base ** (arange(0, dim, 2) / dim) in fp32; do the
  // same steps in fp32 so the table matches to the last bit or two.
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[static_cast<size_t>(i)] = std::pow(base, exponent);
  }
  out.inv_freq.resize(static_cast<size_t>(half));
  if (!c.yarn.enabled) {
    for (int i = 0; i < half; ++i) out.inv_freq[static_cast<size_t>(i)] = 1.0f / pos_freqs[static_cast<size_t>(i)];
    return out;
  }
  const double factor = c.yarn.factor;
  const double original = static_cast<double>(c.yarn.original_max_position_embeddings);
  double low = std::floor(correctionDim(c.yarn.beta_fast, dim, c.rope_theta, original));
  double high = std::ceil(correctionDim(c.yarn.beta_slow, dim, c.rope_theta, original));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  const float flow = static_cast<float>(low);
  const float fhigh = static_cast<float>(high);
  for (int i = 0; i < half; ++i) {
    const float pf = pos_freqs[static_cast<size_t>(i)];
    const float extrapolation = 1.0f / pf;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pf);
    const float ramp = std::clamp((static_cast<float>(i) - flow) / (fhigh - flow), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.inv_freq[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  // As transformers: mscale / mscale_all_dim when both are set (non-zero),
  // otherwise the plain yarn mscale of the factor.
  if (c.yarn.mscale != 0.0 && c.yarn.mscale_all_dim != 0.0) {
    out.attention_factor =
        static_cast<float>(yarnMscale(factor, c.yarn.mscale) / yarnMscale(factor, c.yarn.mscale_all_dim));
  } else {
    out.attention_factor = static_cast<float>(yarnMscale(factor, 1.0));
  }
  return out;
}

void ropeCosSin(const RopeParams& rope, int64_t pos, float* cos_out, float* sin_out) {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < rope.inv_freq.size(); ++i) {
    const float angle = rope.inv_freq[i] * p;  // one fp32 product, as transformers
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * rope.attention_factor;
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * rope.attention_factor;
  }
}

}  // namespace lg::engine

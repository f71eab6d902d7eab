// Rotary position embedding as DeepSeek uses it: YaRN-scaled inverse
// frequencies, applied to ADJACENT pairs (x[2i], x[2i+1]) of the rope part of
// q and k (the reference treats them as complex numbers). The half-split "NeoX"
// rotation gives wrong logits for these checkpoints.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model_config.h"

namespace lg::engine {

struct RopeParams {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn: mscale/mscale_all_dim)
};

// Matches transformers' rope initialisation (default and yarn) in fp32.
RopeParams computeRope(const ModelConfig& config);

// cos/sin of position `pos` for every frequency, scaled by attention_factor.
void ropeCosSin(const RopeParams& rope, int64_t pos, float* cos_out, float* sin_out);

// Rotates the interleaved pairs of x[0 .. 2*half) in place.
inline void applyRope(float* x, const float* cos, const float* sin, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = x[2 * i];
    const float b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = a * sin[i] + b * cos[i];
  }
}

}  // namespace lg::engine

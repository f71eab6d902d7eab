#include "engine/attention_form.h"

namespace lg::engine {

AttentionArithmetic attentionArithmetic(const ModelConfig& c, int64_t cached_len, int64_t num_tokens) {
  const double heads = c.num_attention_heads;
  const double kv = c.kv_lora_rank, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, v = c.v_head_dim;
  const double s = static_cast<double>(num_tokens);
  const double ctx = static_cast<double>(cached_len) + s;
  const double pairs = s * static_cast<double>(cached_len) + s * (s + 1) / 2;
  AttentionArithmetic a;
  a.absorbed_flops = 2 * s * heads * (nope * kv + kv * v) + 2 * pairs * heads * ((kv + rope) + kv);
  a.standard_flops = 2 * ctx * kv * heads * (nope + v) + 2 * pairs * heads * ((nope + rope) + v);
  return a;
}

AttentionForm chooseAttentionForm(AttentionForm option, const ModelConfig& config, int64_t cached_len,
                                  int64_t num_tokens) {
  if (option != AttentionForm::kAuto) return option;
  const AttentionArithmetic a = attentionArithmetic(config, cached_len, num_tokens);
  return a.standard_flops < a.absorbed_flops ? AttentionForm::kStandard : AttentionForm::kAbsorbed;
}

}  // namespace lg::engine

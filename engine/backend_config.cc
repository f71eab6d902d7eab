#include "engine/backend_config.h"

namespace lg::engine {

LatentDType latentDType(LatentDTypeSetting setting) {
  return setting == LatentDTypeSetting::kBF16 ? LatentDType::kBF16 : LatentDType::kF32;
}

AttentionForm attentionForm(PrefillAttentionSetting setting) {
  switch (setting) {
    case PrefillAttentionSetting::kAbsorbed: return AttentionForm::kAbsorbed;
    case PrefillAttentionSetting::kStandard: return AttentionForm::kStandard;
    case PrefillAttentionSetting::kAuto: break;
  }
  return AttentionForm::kAuto;
}

BackendOptions backendOptions(const Config& config) {
  BackendOptions o;
  o.threads = config.engine.threads;
  o.block_tokens = config.cache.block_tokens;
  o.latent_dtype = latentDType(config.engine.latent_dtype);
  o.num_blocks = config.engine.pool_blocks;
  o.max_context = config.engine.max_context;
  o.max_batch_tokens = config.engine.max_batch_tokens;
  o.attention_form = attentionForm(config.engine.prefill_attention);
  return o;
}

}  // namespace lg::engine

// The backend's options from the process configuration: the one place where
// engine.* (and cache.block_tokens, the latent page size) become
// BackendOptions. The values were validated when the Config was loaded.
#pragma once

#include "config/options.h"
#include "engine/backend.h"

namespace lg::engine {

LatentDType latentDType(LatentDTypeSetting setting);
AttentionForm attentionForm(PrefillAttentionSetting setting);
BackendOptions backendOptions(const Config& config);

}  // namespace lg::engine

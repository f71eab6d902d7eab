// InstantBackend: an engine that answers at once, for measuring the gateway
// apart from the engine (docs/benchmarks.md, "the gateway alone"), as
// LiteLLM measures its proxy against a fake upstream.
//
// It has the real model's configuration (so the tokenizer, the chat
// template, the context and the pool's layout are the real ones) and a real
// latent pool (so the scheduler and the prefix cache do all their work), but
// its forward pass computes nothing: every logit row it is asked for is one
// fixed token's. The weights are mapped and never read.
//
// Only the gateway benchmark builds it (bench/, never linked into
// `latentgate`): nothing in serve's configuration can select it.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/model.h"

namespace lg::bench {

// `token`: the id every step generates.
Result<std::unique_ptr<engine::Backend>> createInstantBackend(std::unique_ptr<engine::Model> model,
                                                              const engine::BackendOptions& options, int32_t token);

}  // namespace lg::bench

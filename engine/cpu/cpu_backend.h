// The CPU backend: the reference implementation of Backend, always built.
// fp32 activations, weights read from the checkpoint map in their stored dtype,
// latents in host memory (an anonymous mapping: pages are committed as blocks
// are first written), all kernels on one ThreadPool.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/backend.h"

namespace lg::engine {

// Takes ownership of the model. Errors: invalid options (block size, dtype),
// a pool that cannot be mapped.
Result<std::unique_ptr<Backend>> createCpuBackend(std::unique_ptr<Model> model, const BackendOptions& options);

}  // namespace lg::engine

// createBackend: the backend engine.backend names, over a loaded model: the
// CPU reference, or the CUDA backend when this build has it (the one place
// that knows whether it does; callers never test for CUDA themselves).
#pragma once

#include <memory>

#include "common/status.h"
#include "config/options.h"
#include "engine/backend.h"

namespace lg::engine {

// Whether this build includes the CUDA backend (built with the toolkit).
bool cudaBackendBuilt();

// Unavailable for cuda in a build without it, or on a machine without a GPU.
Result<std::unique_ptr<Backend>> createBackend(BackendSetting which, std::unique_ptr<Model> model,
                                               const BackendOptions& options);

}  // namespace lg::engine

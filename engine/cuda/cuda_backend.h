// The CUDA backend (docs/cuda.md): the engine's Backend on an NVIDIA GPU,
// with the latent pool (the prefix cache's tier 0) in device memory. Built
// when the CUDA toolkit is found (LG_HAVE_CUDA); this header has no CUDA
// types, so callers need no CUDA headers.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/backend.h"

namespace lg::engine {

// GPUs this process can use (0: none, or no driver).
int cudaDeviceCount();

// The model's weights are copied to the current device (bf16, FP8 kept as
// stored), the latent pool allocated there (options.latent_dtype: BF16
// halves it). Unavailable when there is no GPU.
Result<std::unique_ptr<Backend>> createCudaBackend(std::unique_ptr<Model> model, const BackendOptions& options);

}  // namespace lg::engine

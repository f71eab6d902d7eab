#include "engine/backend_factory.h"

#include "engine/cpu/cpu_backend.h"
#if LG_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace lg::engine {

bool cudaBackendBuilt() { return LG_HAVE_CUDA != 0; }

Result<std::unique_ptr<Backend>> createBackend(BackendSetting which, std::unique_ptr<Model> model,
                                               const BackendOptions& options) {
  if (which == BackendSetting::kCpu) return createCpuBackend(std::move(model), options);
#if LG_HAVE_CUDA
  return createCudaBackend(std::move(model), options);
#else
  return unavailable("engine.backend = cuda, but this build has no CUDA backend (it was built without the CUDA toolkit)");
#endif
}

}  // namespace lg::engine

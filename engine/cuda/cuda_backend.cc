#include "engine/cuda/cuda_backend.h"

#include <string>

#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_latent_pool.h"
#include "engine/cuda/device_weights.h"
#include "engine/forward_plan.h"

namespace lg::engine {

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<Model> model, std::unique_ptr<cuda::DeviceLatentPool> pool,
              std::unique_ptr<cuda::CudaEngine> engine, int max_context, int64_t max_batch_tokens)
      : model_(std::move(model)),
        pool_(std::move(pool)),
        engine_(std::move(engine)),
        max_context_(max_context),
        max_batch_tokens_(max_batch_tokens) {}
  ~CudaBackend() override {
    engine_.reset();  // before the pool it writes into
  }

  std::string_view name() const override { return "cuda"; }
  const Model& model() const override { return *model_; }
  LatentPool& latentPool() override { return *pool_; }
  const LatentPool& latentPool() const override { return *pool_; }
  int maxContext() const override { return max_context_; }
  int64_t maxBatchTokens() const override { return max_batch_tokens_; }
  Status run(const ForwardPlan& plan, ForwardOutput& out) override { return engine_->run(plan, out); }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<cuda::DeviceLatentPool> pool_;
  std::unique_ptr<cuda::CudaEngine> engine_;
  int max_context_;
  int64_t max_batch_tokens_;
};

}  // namespace

Result<std::unique_ptr<Backend>> createCudaBackend(std::unique_ptr<Model> model, const BackendOptions& options) {
  if (model == nullptr) return invalidArgument("createCudaBackend: no model");
  if (cudaDeviceCount() == 0) return unavailable("CUDA backend: no GPU is visible to this process");
  LG_ASSIGN_OR_RETURN(const BackendShape shape, resolveBackendShape(model->config(), options));
  // Its own numerics class: bf16 GEMMs and fused kernels round differently
  // from the CPU's fp32, so the cache never serves one's latents as the other's.
  const std::string numerics = shape.layout.dtype == LatentDType::kBF16 ? "cuda-bf16" : "cuda-f32";
  LG_ASSIGN_OR_RETURN(auto pool, cuda::DeviceLatentPool::create(shape.layout, shape.num_blocks, numerics));
  cuda::Stream upload_stream;
  LG_RETURN_IF_ERROR(upload_stream.create());
  LG_ASSIGN_OR_RETURN(auto weights, cuda::DeviceWeights::upload(*model, upload_stream.get()));
  cuda::CudaEngineOptions eo;
  eo.max_batch_tokens = options.max_batch_tokens;
  LG_ASSIGN_OR_RETURN(auto engine, cuda::CudaEngine::create(std::move(weights), *pool, eo));
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(std::move(model), std::move(pool), std::move(engine), shape.max_context,
                                    options.max_batch_tokens));
}

}  // namespace lg::engine

#include "bench/gateway/instant_backend.h"

#include <algorithm>

#include "engine/cpu/host_latent_pool.h"
#include "engine/forward_plan.h"

namespace lg::bench {
namespace {

class InstantBackend final : public engine::Backend {
 public:
  InstantBackend(std::unique_ptr<engine::Model> model, const engine::BackendOptions& options, int max_context,
                 std::unique_ptr<engine::HostLatentPool> latents, int32_t token)
      : model_(std::move(model)),
        latents_(std::move(latents)),
        max_context_(max_context),
        max_batch_tokens_(options.max_batch_tokens),
        token_(token) {}

  std::string_view name() const override { return "instant"; }
  const engine::Model& model() const override { return *model_; }
  engine::LatentPool& latentPool() override { return *latents_; }
  const engine::LatentPool& latentPool() const override { return *latents_; }
  int maxContext() const override { return max_context_; }
  int64_t maxBatchTokens() const override { return max_batch_tokens_; }

  Status run(const engine::ForwardPlan& plan, engine::ForwardOutput& out) override {
    const int32_t vocab = model_->config().vocab_size;
    plan.layOutLogitRows(vocab, out);
    const size_t rows = plan.logit_tokens.size();
    out.logits.assign(rows * static_cast<size_t>(vocab), 0.0f);
    // One token far ahead of the rest: greedy picks it, sampling nearly always does.
    for (size_t r = 0; r < rows; ++r) out.logits[r * static_cast<size_t>(vocab) + static_cast<size_t>(token_)] = 100.0f;
    return Status::ok();
  }

 private:
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::HostLatentPool> latents_;
  int max_context_;
  int64_t max_batch_tokens_;
  int32_t token_;
};

}  // namespace

Result<std::unique_ptr<engine::Backend>> createInstantBackend(std::unique_ptr<engine::Model> model,
                                                              const engine::BackendOptions& options, int32_t token) {
  if (model == nullptr) return invalidArgument("createInstantBackend: no model");
  if (token < 0 || token >= model->config().vocab_size) return invalidArgument("createInstantBackend: token out of range");
  LG_ASSIGN_OR_RETURN(const engine::BackendShape shape, engine::resolveBackendShape(model->config(), options));
  LG_ASSIGN_OR_RETURN(auto latents, engine::HostLatentPool::create(shape.layout, shape.num_blocks, "instant"));
  return std::unique_ptr<engine::Backend>(
      std::make_unique<InstantBackend>(std::move(model), options, shape.max_context, std::move(latents), token));
}

}  // namespace lg::bench

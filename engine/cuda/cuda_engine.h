// CudaEngine: the forward pass on the GPU over a ForwardPlan (the planner's
// flat arrays, engine/forward_plan.h), with the weights in device memory
// (device_weights.h) and the latents in a device pool (device_latent_pool.h).
// docs/cuda.md walks through one layer.
//
// Everything runs on one compute stream: cuBLAS GEMMs (bf16 in, fp32
// accumulation) for the projections, the kernels of kernels/ for the rest,
// the absorbed MLA form for decode steps and prefill chunks alike. A call
// uploads the plan in one copy, runs every layer, and copies the wanted
// logits back; it returns when they are on the host. MoE layers of small
// batches (at most `moe_gemv_max_tokens` tokens) run their routed experts as
// device-side GEMVs with no host round trip; larger batches sort the
// assignments by expert and read the per-expert counts back once per layer
// to size one cuBLAS GEMM per expert.
//
// Thread-safety: run() from one thread at a time (the engine thread).
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/device_latent_pool.h"
#include "engine/cuda/device_weights.h"
#include "engine/forward_plan.h"
#include "engine/model/rope.h"
#include "kernels/mla_attention.h"
#include "kernels/moe_routing.h"

namespace lg::engine::cuda {

// The routing rules of `config` as moe_routing.h takes them (the tensors
// and token count are the caller's).
kernels::MoeRoutingParams moeRoutingParams(const ModelConfig& config);

struct CudaEngineOptions {
  int64_t max_batch_tokens = 16384;
  kernels::MlaPath mla_path = kernels::MlaPath::kAuto;
  int32_t moe_gemv_max_tokens = 16;
  bool copy_logits = true;  // false: the logits stay on the device (benchmarks)
};

class CudaEngine {
 public:
  // `pool` must outlive the engine.
  static Result<std::unique_ptr<CudaEngine>> create(std::unique_ptr<DeviceWeights> weights, DeviceLatentPool& pool,
                                                    CudaEngineOptions options);
  ~CudaEngine();
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  Status run(const ForwardPlan& plan, ForwardOutput& out);

  const DeviceWeights& weights() const { return *weights_; }
  cudaStream_t stream() const { return stream_.get(); }
  // The logits of the last run, on the device: [rows, vocab] fp32.
  const float* deviceLogits() const { return logits_.get<float>(); }

 private:
  CudaEngine(std::unique_ptr<DeviceWeights> weights, DeviceLatentPool& pool, CudaEngineOptions options);

  struct Plan;  // the uploaded plan's device pointers (cuda_engine.cc)
  Status upload(const ForwardPlan& plan, Plan& d);
  Status attention(const Plan& d, int layer, int64_t T);
  Status feedForward(const Plan& d, int layer, int64_t T);
  Status moe(const DeviceLayer& l, int64_t T);
  Status mlp(const DeviceMlp& m, int64_t inter, int64_t T, const void* h, float* x);
  // RMSNorm of `rows` rows of x (row_index: which; null: the first rows) into
  // y (bf16) and, when y_f32 is set, fp32; both with row stride `cols`.
  Status rmsNorm(const float* x, int64_t x_stride, const float* weight, int64_t cols, int64_t rows,
                 __nv_bfloat16* y, float* y_f32, const int32_t* row_index, const char* what);
  // y[M, N] = x[M, K] . w^T (+ beta y), row-major; x bf16; y fp32 or bf16.
  Status gemm(const DeviceMatrix& w, const void* x, int64_t ldx, int64_t M, void* y, bool y_bf16, int64_t ldy,
              float beta);
  // The matrix as bf16: itself, or dequantized into the FP8 scratch.
  Result<const void*> bf16Of(const DeviceMatrix& w);

  std::unique_ptr<DeviceWeights> weights_;
  DeviceLatentPool& pool_;
  const CudaEngineOptions options_;
  const ModelConfig& c_;
  RopeParams rope_;
  Stream stream_;
  cublasHandle_t cublas_ = nullptr;

  // Host staging of the plan, and device scratch grown to the largest batch.
  PinnedBuffer plan_host_;
  PinnedBuffer counts_host_;
  DeviceBuffer plan_dev_, x_, h_, h_f32_, kv_a_, q_a_, q_a_n_, q_, q_cat_, q_cat_bf16_, o_lat_, o_v_, mla_workspace_,
      gate_up_, act_, router_logits_, experts_, expert_weights_, sort_, gathered_, expert_out_, fp8_scratch_, logits_;
  PinnedBuffer logits_host_;
};

}  // namespace lg::engine::cuda

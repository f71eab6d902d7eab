// DeviceWeights: a model's weights in device memory, as the CUDA kernels and
// cuBLAS read them (docs/cuda.md).
//
// Matrices are bf16, or FP8 E4M3 with their fp32 128 x 128 block scales
// (DeepSeek V3's checkpoints), kept as stored: the decode path reads FP8
// natively and the GEMM path dequantizes one matrix at a time into a scratch
// buffer. F32 and F16 checkpoint tensors are rounded to bf16 on upload (the
// backend computes in bf16 with fp32 accumulation). Norm weights, the router
// (routing is decided in fp32, as the reference does) and V3's correction
// bias are fp32.
//
// Made from a loaded checkpoint (upload), or at a model's shapes with random
// weights generated on the device from a seed (benchmarks at real sizes
// without a checkpoint).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cuda/cuda_util.h"
#include "engine/model/model.h"
#include "kernels/device_matrix.h"

namespace lg::engine::cuda {

using kernels::DeviceMatrix;
using kernels::ExpertMlp;

struct DeviceMlp {
  DeviceMatrix gate, up, down;
};

struct DeviceLayer {
  const float* input_norm = nullptr;
  const float* post_attention_norm = nullptr;
  DeviceMatrix q_proj;  // or the q LoRA:
  DeviceMatrix q_a_proj;
  const float* q_a_norm = nullptr;
  DeviceMatrix q_b_proj;
  DeviceMatrix kv_a_proj;
  const float* kv_a_norm = nullptr;
  DeviceMatrix kv_b_proj;
  DeviceMatrix o_proj;
  bool moe = false;
  DeviceMlp mlp;
  const float* router = nullptr;       // [experts, hidden] fp32
  const float* router_bias = nullptr;  // [experts] fp32 or null
  std::vector<ExpertMlp> experts;      // host copy of the table
  const ExpertMlp* expert_table = nullptr;  // the same in device memory
  bool has_shared = false;
  DeviceMlp shared;
  bool fp8 = false;  // any of its matrices is FP8
};

class DeviceWeights {
 public:
  static Result<std::unique_ptr<DeviceWeights>> upload(const Model& model, cudaStream_t stream);
  static Result<std::unique_ptr<DeviceWeights>> random(const ModelConfig& config, uint64_t seed, cudaStream_t stream);

  const ModelConfig& config() const { return config_; }
  const DeviceLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  const DeviceMatrix& embedding() const { return embedding_; }  // bf16 [vocab, hidden]
  const DeviceMatrix& lmHead() const { return lm_head_; }        // bf16 [vocab, hidden]
  const float* finalNorm() const { return final_norm_; }
  uint64_t deviceBytes() const { return bytes_; }
  // The largest FP8 matrix (elements): the dequantization scratch's size.
  int64_t maxFp8Elements() const { return max_fp8_elements_; }

 private:
  explicit DeviceWeights(const ModelConfig& config) : config_(config) {}
  void* allocate(size_t bytes, Status& status);

  ModelConfig config_;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix embedding_;
  DeviceMatrix lm_head_;
  const float* final_norm_ = nullptr;
  std::vector<DeviceBuffer> buffers_;
  uint64_t bytes_ = 0;
  int64_t max_fp8_elements_ = 0;

  friend class WeightUploader;
  friend class RandomWeights;
};

}  // namespace lg::engine::cuda

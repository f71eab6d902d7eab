#include "engine/cuda/device_weights.h"

#include <cmath>
#include <cstring>

#include "common/bfloat16.h"
#include "kernels/random_fill.h"

namespace lg::engine::cuda {

void* DeviceWeights::allocate(size_t bytes, Status& status) {
  if (!status.isOk()) return nullptr;
  DeviceBuffer b;
  // 256-byte alignment (cudaMalloc's) keeps every row of a matrix whose
  // width is a multiple of 16 aligned for 16-byte loads.
  status = b.ensure(std::max<size_t>(bytes, 1));
  if (!status.isOk()) return nullptr;
  void* p = b.get();
  bytes_ += bytes;
  buffers_.push_back(std::move(b));
  return p;
}

// ------------------------------------------------------------ from a model

class WeightUploader {
 public:
  WeightUploader(DeviceWeights& w, cudaStream_t stream) : w_(w), stream_(stream) {}

  Status status() const { return status_; }

  template <typename T>
  const T* copy(const T* host, size_t count) {
    void* d = w_.allocate(sizeof(T) * count, status_);
    if (d && count > 0) status_ = cudaStatus(cudaMemcpy(d, host, sizeof(T) * count, cudaMemcpyHostToDevice), "upload");
    return status_.isOk() ? static_cast<const T*>(d) : nullptr;
  }

  const float* vector(const std::vector<float>& v) { return v.empty() ? nullptr : copy(v.data(), v.size()); }

  // A whole tensor's view: bf16 as stored, FP8 with its scales, others rounded to bf16.
  DeviceMatrix matrix(const WeightView& v) {
    DeviceMatrix m;
    if (v.empty()) return m;
    m.rows = v.rows;
    m.cols = v.cols;
    m.ld = v.cols;
    if (v.dtype == DType::kF8E4M3) {
      std::vector<uint8_t> host(static_cast<size_t>(v.rows * v.cols));
      for (int64_t r = 0; r < v.rows; ++r) std::memcpy(host.data() + r * v.cols, v.at(r, 0), static_cast<size_t>(v.cols));
      m.type = kernels::WeightType::kFp8E4M3;
      m.data = copy(host.data(), host.size());
      const int64_t scale_rows = (v.row0 + v.rows + v.block_rows - 1) / v.block_rows;
      m.scales = copy(v.scales, static_cast<size_t>(scale_rows * v.scale_ld));
      m.scale_ld = v.scale_ld;
      m.block_rows = v.block_rows;
      m.block_cols = v.block_cols;
      w_.max_fp8_elements_ = std::max(w_.max_fp8_elements_, v.rows * v.cols);
      return m;
    }
    std::vector<uint16_t> host(static_cast<size_t>(v.rows * v.cols));
    for (int64_t r = 0; r < v.rows; ++r) {
      uint16_t* dst = host.data() + r * v.cols;
      if (v.dtype == DType::kBF16) {
        std::memcpy(dst, v.at(r, 0), static_cast<size_t>(v.cols) * 2);
      } else {
        for (int64_t c = 0; c < v.cols; ++c) dst[c] = floatToBf16(v.value(r, c));
      }
    }
    m.type = kernels::WeightType::kBf16;
    m.data = copy(host.data(), host.size());
    return m;
  }

  // An fp32 copy of a matrix (the router).
  const float* matrixF32(const WeightView& v) {
    std::vector<float> host(static_cast<size_t>(v.rows * v.cols));
    for (int64_t r = 0; r < v.rows; ++r) {
      for (int64_t c = 0; c < v.cols; ++c) host[static_cast<size_t>(r * v.cols + c)] = v.value(r, c);
    }
    return copy(host.data(), host.size());
  }

  DeviceMlp mlp(const MlpWeights& m) { return {matrix(m.gate), matrix(m.up), matrix(m.down)}; }

 private:
  DeviceWeights& w_;
  cudaStream_t stream_;
  Status status_ = Status::ok();
};

namespace {

bool anyFp8(const DeviceLayer& l) {
  auto is = [](const DeviceMatrix& m) { return m.type == kernels::WeightType::kFp8E4M3; };
  if (is(l.q_proj) || is(l.q_a_proj) || is(l.q_b_proj) || is(l.kv_a_proj) || is(l.kv_b_proj) || is(l.o_proj)) return true;
  if (is(l.mlp.gate) || is(l.shared.gate)) return true;
  for (const ExpertMlp& e : l.experts) {
    if (is(e.gate)) return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::upload(const Model& model, cudaStream_t stream) {
  const ModelConfig& c = model.config();
  std::unique_ptr<DeviceWeights> w(new DeviceWeights(c));
  WeightUploader up(*w, stream);
  w->embedding_ = up.matrix(model.embedding());
  w->lm_head_ = model.lmHead().data == model.embedding().data ? w->embedding_ : up.matrix(model.lmHead());
  w->final_norm_ = up.vector(model.finalNorm());
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = model.layer(i);
    DeviceLayer d;
    d.input_norm = up.vector(l.input_norm);
    d.post_attention_norm = up.vector(l.post_attention_norm);
    d.q_proj = up.matrix(l.q_proj);
    d.q_a_proj = up.matrix(l.q_a_proj);
    d.q_a_norm = up.vector(l.q_a_norm);
    d.q_b_proj = up.matrix(l.q_b_proj);
    d.kv_a_proj = up.matrix(l.kv_a_proj);
    d.kv_a_norm = up.vector(l.kv_a_norm);
    d.kv_b_proj = up.matrix(l.kv_b_proj);
    d.o_proj = up.matrix(l.o_proj);
    d.moe = l.moe;
    if (!l.moe) {
      d.mlp = up.mlp(l.mlp);
    } else {
      d.router = up.matrixF32(l.router);
      d.router_bias = up.vector(l.router_bias);
      for (const MlpWeights& e : l.experts) {
        const DeviceMlp m = up.mlp(e);
        d.experts.push_back({m.gate, m.up, m.down});
      }
      d.expert_table = up.copy(d.experts.data(), d.experts.size());
      d.has_shared = l.has_shared;
      if (l.has_shared) d.shared = up.mlp(l.shared);
    }
    d.fp8 = anyFp8(d);
    w->layers_.push_back(std::move(d));
    LG_RETURN_IF_ERROR(up.status());
  }
  LG_RETURN_IF_ERROR(up.status());
  if (w->embedding_.type != kernels::WeightType::kBf16 || w->lm_head_.type != kernels::WeightType::kBf16) {
    return invalidArgument("CUDA backend: FP8 embeddings or lm_head are not supported (DeepSeek keeps them bf16)");
  }
  return w;
}

// --------------------------------------------------------- random weights

class RandomWeights {
 public:
  RandomWeights(DeviceWeights& w, uint64_t seed, cudaStream_t stream) : w_(w), seed_(seed), stream_(stream) {}
  Status status() const { return status_; }

  // Uniform in [-1, 1) x scale (+ offset).
  void* fill(int64_t count, bool bf16, float scale, float offset = 0.0f) {
    void* d = w_.allocate(static_cast<size_t>(count) * (bf16 ? 2 : 4), status_);
    if (!d) return nullptr;
    kernels::RandomFillParams p;
    p.data = d;
    p.bf16 = bf16;
    p.count = count;
    p.seed = seed_ + 0x9e37 * ++next_;
    p.scale = scale;
    p.offset = offset;
    status_ = cudaStatus(kernels::launchRandomFill(p, stream_), "random weights");
    return d;
  }
  // Scaled so that a product with a unit-variance input keeps unit variance.
  DeviceMatrix matrix(int64_t rows, int64_t cols) {
    DeviceMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.ld = cols;
    m.data = fill(rows * cols, true, std::sqrt(3.0f / static_cast<float>(cols)));
    return m;
  }
  const float* norm(int64_t n) { return static_cast<const float*>(fill(n, false, 0.05f, 1.0f)); }
  DeviceMlp mlp(int64_t hidden, int64_t inter) {
    return {matrix(inter, hidden), matrix(inter, hidden), matrix(hidden, inter)};
  }

 private:
  DeviceWeights& w_;
  uint64_t seed_;
  cudaStream_t stream_;
  uint64_t next_ = 0;
  Status status_ = Status::ok();
};

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::random(const ModelConfig& c, uint64_t seed, cudaStream_t stream) {
  std::unique_ptr<DeviceWeights> w(new DeviceWeights(c));
  RandomWeights r(*w, seed, stream);
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  w->embedding_.rows = c.vocab_size;
  w->embedding_.cols = hidden;
  w->embedding_.ld = hidden;
  w->embedding_.data = r.fill(int64_t{c.vocab_size} * hidden, true, 1.0f);  // unit-scale token vectors
  w->lm_head_ = r.matrix(c.vocab_size, hidden);
  w->final_norm_ = r.norm(hidden);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    DeviceLayer d;
    d.input_norm = r.norm(hidden);
    d.post_attention_norm = r.norm(hidden);
    if (c.q_lora_rank > 0) {
      d.q_a_proj = r.matrix(c.q_lora_rank, hidden);
      d.q_a_norm = r.norm(c.q_lora_rank);
      d.q_b_proj = r.matrix(heads * c.qHeadDim(), c.q_lora_rank);
    } else {
      d.q_proj = r.matrix(heads * c.qHeadDim(), hidden);
    }
    d.kv_a_proj = r.matrix(c.latentDim(), hidden);
    d.kv_a_norm = r.norm(c.kv_lora_rank);
    d.kv_b_proj = r.matrix(heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    d.o_proj = r.matrix(hidden, heads * c.v_head_dim);
    d.moe = c.isMoeLayer(i);
    if (!d.moe) {
      d.mlp = r.mlp(hidden, c.intermediate_size);
    } else {
      d.router = static_cast<const float*>(r.fill(int64_t{c.n_routed_experts} * hidden, false,
                                                  std::sqrt(3.0f / static_cast<float>(hidden))));
      if (c.topk_method == TopkMethod::kNoauxTc) d.router_bias = static_cast<const float*>(r.fill(c.n_routed_experts, false, 0.0f));
      for (int e = 0; e < c.n_routed_experts; ++e) {
        const DeviceMlp m = r.mlp(hidden, c.moe_intermediate_size);
        d.experts.push_back({m.gate, m.up, m.down});
      }
      Status s = r.status();
      void* table = w->allocate(sizeof(ExpertMlp) * d.experts.size(), s);
      LG_RETURN_IF_ERROR(s);
      LG_CUDA_RETURN_IF_ERROR(cudaMemcpy(table, d.experts.data(), sizeof(ExpertMlp) * d.experts.size(),
                                         cudaMemcpyHostToDevice),
                              "expert table");
      d.expert_table = static_cast<const ExpertMlp*>(table);
      d.has_shared = c.n_shared_experts > 0;
      if (d.has_shared) d.shared = r.mlp(hidden, int64_t{c.n_shared_experts} * c.moe_intermediate_size);
    }
    w->layers_.push_back(std::move(d));
    LG_RETURN_IF_ERROR(r.status());
  }
  LG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "random weights");
  return w;
}

}  // namespace lg::engine::cuda

#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu/host_buffer.h"
#include "engine/cpu/host_latent_pool.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/mla_attention.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/forward_plan.h"
#include "engine/model/rope.h"

namespace lg::engine {
namespace {

using cpu::LinearProblem;
using cpu::WeightLayout;

// Activation buffers, grown to the largest batch seen and reused.
struct Activations {
  cpu::HostBuffer<float> x, h, q_a, q, kv_a, q_cat, o_lat, o_v, final_h, rope_cos, rope_sin;
  cpu::FeedForwardScratch ffn;
};

template <typename T>
T* sized(cpu::HostBuffer<T>& v, int64_t n) {
  return v.ensure(static_cast<size_t>(n));
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::unique_ptr<Model> model, const BackendOptions& options, int max_context,
             std::unique_ptr<HostLatentPool> latents)
      : model_(std::move(model)),
        pool_(options.threads),
        latents_(std::move(latents)),
        layout_(latents_->layout()),
        max_context_(max_context),
        max_batch_tokens_(options.max_batch_tokens),
        rope_(computeRope(model_->config())) {}

  std::string_view name() const override { return "cpu"; }
  const Model& model() const override { return *model_; }
  LatentPool& latentPool() override { return *latents_; }
  const LatentPool& latentPool() const override { return *latents_; }
  int maxContext() const override { return max_context_; }
  int64_t maxBatchTokens() const override { return max_batch_tokens_; }

  Status run(const ForwardPlan& plan, ForwardOutput& out) override;
  Status runLayers(const ForwardPlan& plan, ForwardOutput& out);

 private:
  void attentionLayer(const ForwardPlan& plan, int layer_index, int64_t T);
  void storeLatents(const ForwardPlan& plan, int layer_index, int64_t T);

  std::unique_ptr<Model> model_;
  ThreadPool pool_;
  std::unique_ptr<HostLatentPool> latents_;
  const LatentLayout& layout_;
  int max_context_;
  int64_t max_batch_tokens_;
  RopeParams rope_;
  Activations a_;
  cpu::LinearStats linear_stats_;  // of the current run()
  double attention_seconds_ = 0;
  double attention_flops_ = 0;
};

// Normalizes c_kv, rotates k_pe and writes each new token's latent row into
// its block slot (converting to the pool dtype).
void CpuBackend::storeLatents(const ForwardPlan& plan, int layer_index, int64_t T) {
  const ModelConfig& c = model_->config();
  const LayerWeights& l = model_->layer(layer_index);
  const int64_t D = c.latentDim();
  const int half = c.qk_rope_head_dim / 2;
  auto one = [&](int64_t t) {
    float* row = a_.kv_a.data() + t * D;
    cpu::rmsNorm(row, l.kv_a_norm.data(), row, c.kv_lora_rank, static_cast<float>(c.rms_norm_eps));
    applyRope(row + c.kv_lora_rank, a_.rope_cos.data() + t * half, a_.rope_sin.data() + t * half, half);
    uint8_t* dst = latents_->blockData(plan.write_block[static_cast<size_t>(t)]) +
                   layout_.offset(layer_index, plan.write_slot[static_cast<size_t>(t)]) * layout_.elementBytes();
    if (layout_.dtype == LatentDType::kF32) {
      std::memcpy(dst, row, static_cast<size_t>(D) * sizeof(float));
    } else {
      cpu::floatToBf16Row(row, reinterpret_cast<uint16_t*>(dst), D);
    }
  };
  if (T < 32) {
    for (int64_t t = 0; t < T; ++t) one(t);
  } else {
    pool_.parallelFor(T, [&](int64_t t, int) { one(t); });
  }
}

void CpuBackend::attentionLayer(const ForwardPlan& plan, int layer_index, int64_t T) {
  const ModelConfig& c = model_->config();
  const LayerWeights& l = model_->layer(layer_index);
  const int64_t hidden = c.hidden_size;
  const int64_t H = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim;
  const int64_t rope = c.qk_rope_head_dim;
  const int64_t qhd = c.qHeadDim();
  const int64_t vd = c.v_head_dim;
  const int64_t kv = c.kv_lora_rank;
  const int64_t D = c.latentDim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* h = a_.h.data();
  cpu::rmsNormRows(pool_, a_.x.data(), hidden, l.input_norm.data(), h, hidden, T, hidden, eps);

  // q (through the q LoRA when present) and [c_kv | k_pe], sharing one pass over h.
  float* q = sized(a_.q, T * H * qhd);
  float* kv_a = sized(a_.kv_a, T * D);
  std::vector<LinearProblem> problems;
  problems.push_back({h, T, hidden, l.kv_a_proj, WeightLayout::kOutIn, kv_a, D, false});
  if (c.q_lora_rank > 0) {
    float* q_a = sized(a_.q_a, T * c.q_lora_rank);
    problems.push_back({h, T, hidden, l.q_a_proj, WeightLayout::kOutIn, q_a, c.q_lora_rank, false});
    cpu::runLinear(pool_, problems, &linear_stats_);
    cpu::rmsNormRows(pool_, q_a, c.q_lora_rank, l.q_a_norm.data(), q_a, c.q_lora_rank, T, c.q_lora_rank, eps);
    LinearProblem qb{q_a, T, c.q_lora_rank, l.q_b_proj, WeightLayout::kOutIn, q, H * qhd, false};
    cpu::runLinear(pool_, std::span<const LinearProblem>(&qb, 1), &linear_stats_);
  } else {
    problems.push_back({h, T, hidden, l.q_proj, WeightLayout::kOutIn, q, H * qhd, false});
    cpu::runLinear(pool_, problems, &linear_stats_);
  }
  storeLatents(plan, layer_index, T);

  // Absorbed query per head: [q_nope @ W_UK | rope(q_pe)] x softmax scale.
  float* q_cat = sized(a_.q_cat, T * H * D);
  problems.clear();
  for (int64_t hd = 0; hd < H; ++hd) {
    problems.push_back({q + hd * qhd, T, H * qhd, l.kv_b_proj.rowSlice(hd * (nope + vd), nope), WeightLayout::kInOut,
                        q_cat + hd * D, H * D, false});
  }
  cpu::runLinear(pool_, problems, &linear_stats_);
  const float scale = static_cast<float>(c.softmaxScale());
  const int half = static_cast<int>(rope / 2);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hd = 0; hd < H; ++hd) {
      float* dst = q_cat + (t * H + hd) * D;
      std::copy_n(q + (t * H + hd) * qhd + nope, rope, dst + kv);
      applyRope(dst + kv, a_.rope_cos.data() + t * half, a_.rope_sin.data() + t * half, half);
      for (int64_t i = 0; i < D; ++i) dst[i] *= scale;
    }
  }

  float* o_lat = sized(a_.o_lat, T * H * kv);
  std::vector<cpu::AttentionSequence> seqs;
  for (const PlannedSequence& s : plan.sequences) {
    seqs.push_back({q_cat + s.first_token * H * D, o_lat + s.first_token * H * kv, s.num_tokens, s.cached_len,
                    std::span<const BlockId>(s.blocks)});
  }
  const auto attention_start = std::chrono::steady_clock::now();
  cpu::mlaAttention(pool_, cpu::LatentPoolView{latents_->data(), layout_}, layer_index, static_cast<int32_t>(H), seqs);
  attention_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - attention_start).count();
  for (const PlannedSequence& s : plan.sequences) {
    // Query i of a sequence scores cached_len + i + 1 keys: D MACs each, then kv MACs for the output.
    const double pairs = double(s.num_tokens) * s.cached_len + double(s.num_tokens) * (s.num_tokens + 1) / 2;
    attention_flops_ += 2.0 * pairs * static_cast<double>(H) * static_cast<double>(D + kv);
  }

  // Back from latent space per head (W_UV), then o_proj straight into the residual.
  float* o_v = sized(a_.o_v, T * H * vd);
  problems.clear();
  for (int64_t hd = 0; hd < H; ++hd) {
    problems.push_back({o_lat + hd * kv, T, H * kv, l.kv_b_proj.rowSlice(hd * (nope + vd) + nope, vd),
                        WeightLayout::kOutIn, o_v + hd * vd, H * vd, false});
  }
  cpu::runLinear(pool_, problems, &linear_stats_);
  LinearProblem o{o_v, T, H * vd, l.o_proj, WeightLayout::kOutIn, a_.x.data(), hidden, true};
  cpu::runLinear(pool_, std::span<const LinearProblem>(&o, 1), &linear_stats_);
}

Status CpuBackend::run(const ForwardPlan& plan, ForwardOutput& out) {
  const auto start = std::chrono::steady_clock::now();
  linear_stats_ = {};
  attention_seconds_ = 0;
  attention_flops_ = 0;
  Status s = runLayers(plan, out);
  out.timing.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.timing.linear_seconds = linear_stats_.seconds;
  out.timing.linear_flops = linear_stats_.flops;
  out.timing.attention_seconds = attention_seconds_;
  out.timing.attention_flops = attention_flops_;
  return s;
}

Status CpuBackend::runLayers(const ForwardPlan& plan, ForwardOutput& out) {
  const ModelConfig& c = model_->config();
  const int64_t T = plan.numTokens();
  const int64_t hidden = c.hidden_size;
  const int half = c.qk_rope_head_dim / 2;
  float* x = sized(a_.x, T * hidden);
  sized(a_.h, T * hidden);
  float* cos = sized(a_.rope_cos, T * half);
  float* sin = sized(a_.rope_sin, T * half);
  for (int64_t t = 0; t < T; ++t) {
    cpu::weightRow(model_->embedding(), plan.tokens[static_cast<size_t>(t)], x + t * hidden);
    ropeCosSin(rope_, plan.positions[static_cast<size_t>(t)], cos + t * half, sin + t * half);
  }
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    attentionLayer(plan, layer, T);
    const LayerWeights& l = model_->layer(layer);
    cpu::rmsNormRows(pool_, x, hidden, l.post_attention_norm.data(), a_.h.data(), hidden, T, hidden,
                     static_cast<float>(c.rms_norm_eps));
    cpu::feedForward(pool_, c, l, a_.h.data(), T, x, a_.ffn, &linear_stats_);
  }
  const int64_t rows = static_cast<int64_t>(plan.logit_tokens.size());
  out.vocab_size = c.vocab_size;
  out.first_row.clear();
  out.num_rows.clear();
  for (const PlannedSequence& s : plan.sequences) {
    out.first_row.push_back(s.first_logit_row);
    out.num_rows.push_back(s.num_logit_rows);
  }
  out.logits.assign(static_cast<size_t>(rows * c.vocab_size), 0.0f);
  if (rows == 0) return Status::ok();
  float* fh = sized(a_.final_h, rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::rmsNorm(x + plan.logit_tokens[static_cast<size_t>(r)] * hidden, model_->finalNorm().data(), fh + r * hidden,
                 hidden, static_cast<float>(c.rms_norm_eps));
  }
  LinearProblem head{fh, rows, hidden, model_->lmHead(), WeightLayout::kOutIn, out.logits.data(), c.vocab_size, false};
  cpu::runLinear(pool_, std::span<const LinearProblem>(&head, 1), &linear_stats_);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> createCpuBackend(std::unique_ptr<Model> model, const BackendOptions& options) {
  if (model == nullptr) return invalidArgument("createCpuBackend: no model");
  if (options.block_tokens < 1 || options.block_tokens > 4096) {
    return invalidArgument("block_tokens must be in [1, 4096] (got " + std::to_string(options.block_tokens) + ")");
  }
  if (options.max_batch_tokens < 1) return invalidArgument("max_batch_tokens must be positive");
  const ModelConfig& c = model->config();
  int max_context = options.max_context > 0 ? options.max_context : c.max_position_embeddings;
  if (max_context > c.max_position_embeddings) {
    return invalidArgument("max_context " + std::to_string(max_context) + " exceeds the model's max_position_embeddings " +
                           std::to_string(c.max_position_embeddings));
  }
  int64_t num_blocks = options.num_blocks;
  if (num_blocks <= 0) num_blocks = 4 * ((int64_t{max_context} + options.block_tokens - 1) / options.block_tokens);
  if (num_blocks > (int64_t{1} << 30)) return invalidArgument("num_blocks too large");
  LatentLayout layout;
  layout.layers = c.num_hidden_layers;
  layout.block_tokens = options.block_tokens;
  layout.kv_lora_rank = c.kv_lora_rank;
  layout.latent_dim = c.latentDim();
  layout.dtype = options.latent_dtype;
  // fp32 arithmetic throughout (docs/engine.md); a kernel change that rounds
  // differently bumps kLatentFormatVersion, a new backend gets its own class.
  LG_ASSIGN_OR_RETURN(auto latents, HostLatentPool::create(layout, static_cast<int32_t>(num_blocks), "cpu-fp32"));
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(std::move(model), options, max_context, std::move(latents)));
}

}  // namespace lg::engine

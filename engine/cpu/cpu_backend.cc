#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu/host_buffer.h"
#include "engine/attention_form.h"
#include "engine/cpu/host_latent_pool.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/mha_attention.h"
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
  cpu::MhaScratch mha;
};

// A run of consecutive sequences that attend in the absorbed form: their
// tokens [first_token, first_token + count) share the W_UK / W_UV products,
// whose inputs and outputs (q_cat, o_lat) hold only absorbed tokens, from
// row `packed_first` on.
struct AbsorbedRange {
  int64_t first_token = 0;
  int64_t count = 0;
  int64_t packed_first = 0;
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
        attention_form_(options.attention_form),
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
  // Chooses each sequence's attention form for this run (forms_, absorbed_).
  void planAttentionForms(const ForwardPlan& plan);
  // Attention of the absorbed / standard sequences: from q (and the latents
  // in the pool) to o_v, the input of o_proj.
  void absorbedAttention(const ForwardPlan& plan, int layer_index, float* q, float* o_v);
  void standardAttention(const ForwardPlan& plan, int layer_index, float* q, float* o_v);

  std::unique_ptr<Model> model_;
  ThreadPool pool_;
  std::unique_ptr<HostLatentPool> latents_;
  const LatentLayout& layout_;
  int max_context_;
  int64_t max_batch_tokens_;
  AttentionForm attention_form_;
  RopeParams rope_;
  Activations a_;
  std::vector<AttentionForm> forms_;      // per planned sequence, for the current run()
  std::vector<AbsorbedRange> absorbed_;   // the absorbed sequences' token runs
  std::vector<int64_t> packed_first_;     // per absorbed sequence: its first row in q_cat / o_lat
  int64_t absorbed_tokens_ = 0;
  cpu::LinearStats linear_stats_;  // of the current run()
  cpu::LinearStats attention_linear_stats_;  // the attention forms' own products (their time is attention's)
  int32_t experts_touched_ = 0;
  double attention_seconds_ = 0;
  double attention_flops_ = 0;
  int32_t standard_sequences_ = 0;
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
  const int64_t qhd = c.qHeadDim();
  const int64_t vd = c.v_head_dim;
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

  float* o_v = sized(a_.o_v, T * H * vd);
  const auto attention_start = std::chrono::steady_clock::now();
  absorbedAttention(plan, layer_index, q, o_v);
  standardAttention(plan, layer_index, q, o_v);
  attention_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - attention_start).count();
  LinearProblem o{o_v, T, H * vd, l.o_proj, WeightLayout::kOutIn, a_.x.data(), hidden, true};
  cpu::runLinear(pool_, std::span<const LinearProblem>(&o, 1), &linear_stats_);
}

void CpuBackend::planAttentionForms(const ForwardPlan& plan) {
  const ModelConfig& c = model_->config();
  forms_.clear();
  absorbed_.clear();
  packed_first_.assign(plan.sequences.size(), -1);
  absorbed_tokens_ = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& s = plan.sequences[i];
    const AttentionForm form = chooseAttentionForm(attention_form_, c, s.cached_len, s.num_tokens);
    forms_.push_back(form);
    const AttentionArithmetic a = attentionArithmetic(c, s.cached_len, s.num_tokens);
    attention_flops_ +=
        c.num_hidden_layers * (form == AttentionForm::kStandard ? a.standard_flops : a.absorbed_flops);
    if (form == AttentionForm::kStandard) {
      ++standard_sequences_;
      continue;
    }
    packed_first_[i] = absorbed_tokens_;
    if (!absorbed_.empty() && absorbed_.back().first_token + absorbed_.back().count == s.first_token) {
      absorbed_.back().count += s.num_tokens;
    } else {
      absorbed_.push_back({s.first_token, s.num_tokens, absorbed_tokens_});
    }
    absorbed_tokens_ += s.num_tokens;
  }
}

void CpuBackend::absorbedAttention(const ForwardPlan& plan, int layer_index, float* q, float* o_v) {
  if (absorbed_tokens_ == 0) return;
  const ModelConfig& c = model_->config();
  const LayerWeights& l = model_->layer(layer_index);
  const int64_t H = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim;
  const int64_t rope = c.qk_rope_head_dim;
  const int64_t qhd = c.qHeadDim();
  const int64_t vd = c.v_head_dim;
  const int64_t kv = c.kv_lora_rank;
  const int64_t D = c.latentDim();

  // Absorbed query per head: [q_nope @ W_UK | rope(q_pe)] x softmax scale.
  float* q_cat = sized(a_.q_cat, absorbed_tokens_ * H * D);
  std::vector<LinearProblem> problems;
  for (const AbsorbedRange& r : absorbed_) {
    for (int64_t hd = 0; hd < H; ++hd) {
      problems.push_back({q + r.first_token * H * qhd + hd * qhd, r.count, H * qhd,
                          l.kv_b_proj.rowSlice(hd * (nope + vd), nope), WeightLayout::kInOut,
                          q_cat + (r.packed_first * H + hd) * D, H * D, false});
    }
  }
  cpu::runLinear(pool_, problems, &attention_linear_stats_);
  const float scale = static_cast<float>(c.softmaxScale());
  const int half = static_cast<int>(rope / 2);
  for (const AbsorbedRange& r : absorbed_) {
    auto one = [&](int64_t i) {
      const int64_t t = r.first_token + i;
      for (int64_t hd = 0; hd < H; ++hd) {
        float* dst = q_cat + ((r.packed_first + i) * H + hd) * D;
        std::copy_n(q + (t * H + hd) * qhd + nope, rope, dst + kv);
        applyRope(dst + kv, a_.rope_cos.data() + t * half, a_.rope_sin.data() + t * half, half);
        for (int64_t j = 0; j < D; ++j) dst[j] *= scale;
      }
    };
    if (r.count < 32) {
      for (int64_t i = 0; i < r.count; ++i) one(i);
    } else {
      pool_.parallelFor(r.count, [&](int64_t i, int) { one(i); });
    }
  }

  float* o_lat = sized(a_.o_lat, absorbed_tokens_ * H * kv);
  std::vector<cpu::AttentionSequence> seqs;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    if (forms_[i] != AttentionForm::kAbsorbed) continue;
    const PlannedSequence& s = plan.sequences[i];
    seqs.push_back({q_cat + packed_first_[i] * H * D, o_lat + packed_first_[i] * H * kv, s.num_tokens, s.cached_len,
                    std::span<const BlockId>(s.blocks)});
  }
  cpu::mlaAttention(pool_, cpu::LatentPoolView{latents_->data(), layout_}, layer_index, static_cast<int32_t>(H), seqs);

  // Back from latent space per head (W_UV).
  problems.clear();
  for (const AbsorbedRange& r : absorbed_) {
    for (int64_t hd = 0; hd < H; ++hd) {
      problems.push_back({o_lat + r.packed_first * H * kv + hd * kv, r.count, H * kv,
                          l.kv_b_proj.rowSlice(hd * (nope + vd) + nope, vd), WeightLayout::kOutIn,
                          o_v + r.first_token * H * vd + hd * vd, H * vd, false});
    }
  }
  cpu::runLinear(pool_, problems, &attention_linear_stats_);
}

void CpuBackend::standardAttention(const ForwardPlan& plan, int layer_index, float* q, float* o_v) {
  const ModelConfig& c = model_->config();
  const LayerWeights& l = model_->layer(layer_index);
  const int64_t H = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim;
  const int64_t qhd = c.qHeadDim();
  const int64_t vd = c.v_head_dim;
  const float scale = static_cast<float>(c.softmaxScale());
  const int half = c.qk_rope_head_dim / 2;
  const cpu::MhaShape shape{static_cast<int32_t>(H), c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim};
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    if (forms_[i] != AttentionForm::kStandard) continue;
    const PlannedSequence& s = plan.sequences[i];
    // The query as the kernel takes it: q_pe roped in place, all of it scaled.
    auto one = [&](int64_t t) {
      for (int64_t hd = 0; hd < H; ++hd) {
        float* row = q + (t * H + hd) * qhd;
        applyRope(row + nope, a_.rope_cos.data() + t * half, a_.rope_sin.data() + t * half, half);
        for (int64_t j = 0; j < qhd; ++j) row[j] *= scale;
      }
    };
    if (s.num_tokens < 32) {
      for (int64_t t = s.first_token; t < s.first_token + s.num_tokens; ++t) one(t);
    } else {
      pool_.parallelFor(s.num_tokens, [&](int64_t t, int) { one(s.first_token + t); });
    }
    cpu::mhaAttention(pool_, cpu::LatentPoolView{latents_->data(), layout_}, layer_index, l.kv_b_proj, shape,
                      {q + s.first_token * H * qhd, o_v + s.first_token * H * vd, s.num_tokens, s.cached_len,
                       std::span<const BlockId>(s.blocks)},
                      a_.mha, 0, &attention_linear_stats_);
  }
}

Status CpuBackend::run(const ForwardPlan& plan, ForwardOutput& out) {
  const auto start = std::chrono::steady_clock::now();
  linear_stats_ = {};
  attention_linear_stats_ = {};
  experts_touched_ = 0;
  attention_seconds_ = 0;
  attention_flops_ = 0;
  standard_sequences_ = 0;
  planAttentionForms(plan);
  Status s = runLayers(plan, out);
  out.timing.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.timing.linear_seconds = linear_stats_.seconds;
  out.timing.linear_flops = linear_stats_.flops;
  out.timing.attention_seconds = attention_seconds_;
  out.timing.attention_flops = attention_flops_;
  out.timing.standard_form_sequences = standard_sequences_;
  out.timing.experts_touched = experts_touched_;
  const ModelConfig& c = model_->config();
  out.timing.weight_bytes_read = linear_stats_.weight_bytes + attention_linear_stats_.weight_bytes +
                                 static_cast<double>(plan.numTokens()) * c.hidden_size *
                                     static_cast<double>(dtypeSize(model_->embedding().dtype));
  double latent_rows = 0;
  for (const PlannedSequence& seq : plan.sequences) latent_rows += static_cast<double>(seq.cached_len) + seq.num_tokens;
  out.timing.latent_bytes_read =
      latent_rows * layout_.layers * layout_.latent_dim * static_cast<double>(layout_.elementBytes());
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
    experts_touched_ += cpu::feedForward(pool_, c, l, a_.h.data(), T, x, a_.ffn, &linear_stats_);
  }
  const int64_t rows = static_cast<int64_t>(plan.logit_tokens.size());
  plan.layOutLogitRows(c.vocab_size, out);
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
  LG_ASSIGN_OR_RETURN(const BackendShape shape, resolveBackendShape(model->config(), options));
  // fp32 arithmetic throughout (docs/engine.md); a kernel change that rounds
  // differently bumps kLatentFormatVersion, a new backend gets its own class.
  LG_ASSIGN_OR_RETURN(auto latents, HostLatentPool::create(shape.layout, shape.num_blocks, "cpu-fp32"));
  return std::unique_ptr<Backend>(
      std::make_unique<CpuBackend>(std::move(model), options, shape.max_context, std::move(latents)));
}

}  // namespace lg::engine

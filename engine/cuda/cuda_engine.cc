#include "engine/cuda/cuda_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/embedding.h"
#include "kernels/fp8_dequant.h"
#include "kernels/latent_store.h"
#include "kernels/moe_dispatch.h"
#include "kernels/moe_gemv.h"
#include "kernels/moe_routing.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/silu_mul.h"

namespace lg::engine::cuda {

namespace {

using kernels::DeviceMatrix;
using kernels::WeightType;

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

template <typename T>
Status sized(DeviceBuffer& b, int64_t count) {
  return b.ensure(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T));
}

#define LG_LAUNCH(expr, what) LG_CUDA_RETURN_IF_ERROR((expr), (what))

// Where `layer`'s latents are in the pool, in the fields that the latent
// store's and the attention's parameters both name the same way.
template <typename Params>
void setPoolFields(Params& p, const DeviceLatentPool& pool, int layer, int64_t kv_lora, int64_t latent_dim) {
  p.pool = pool.data();
  p.pool_bf16 = pool.layout().dtype == LatentDType::kBF16;
  p.block_values = static_cast<int64_t>(pool.layout().blockValues());
  p.layer = layer;
  p.block_tokens = pool.layout().block_tokens;
  p.kv_lora = static_cast<int32_t>(kv_lora);
  p.latent_dim = static_cast<int32_t>(latent_dim);
}

}  // namespace

kernels::MoeRoutingParams moeRoutingParams(const ModelConfig& c) {
  kernels::MoeRoutingParams p;
  p.num_experts = c.n_routed_experts;
  p.k = c.num_experts_per_tok;
  p.n_group = c.n_group;
  p.topk_group = c.topk_group;
  p.scoring = c.scoring_func == ScoringFunc::kSoftmax ? kernels::MoeScoring::kSoftmax : kernels::MoeScoring::kSigmoid;
  p.method = c.topk_method == TopkMethod::kGreedy               ? kernels::MoeTopk::kGreedy
             : c.topk_method == TopkMethod::kGroupLimitedGreedy ? kernels::MoeTopk::kGroupLimitedGreedy
                                                                : kernels::MoeTopk::kNoauxTc;
  p.renormalize = c.renormalizesTopkWeights();
  p.scale = c.scalesRoutedWeights();
  p.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  return p;
}

// The plan's arrays in device memory (one upload), as the kernels index them.
struct CudaEngine::Plan {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* sequence_of = nullptr;
  const int32_t* write_block = nullptr;
  const int32_t* write_slot = nullptr;
  const int32_t* logit_rows = nullptr;
  const int32_t* block_tables = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int32_t max_blocks = 0;
  int32_t max_context = 0;
  int64_t logit_count = 0;
};

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(std::unique_ptr<DeviceWeights> weights, DeviceLatentPool& pool,
                                                       CudaEngineOptions options) {
  if (!weights) return invalidArgument("CudaEngine: no weights");
  const ModelConfig& c = weights->config();
  if (c.kv_lora_rank > 512 || c.latentDim() % 8 != 0 || c.hidden_size % 8 != 0) {
    return invalidArgument("CUDA backend: kv_lora_rank <= 512 and latent and hidden widths that are multiples of 8 are needed");
  }
  std::unique_ptr<CudaEngine> e(new CudaEngine(std::move(weights), pool, options));
  LG_RETURN_IF_ERROR(e->stream_.create());
  LG_CUBLAS_RETURN_IF_ERROR(cublasCreate(&e->cublas_), "cublasCreate");
  LG_CUBLAS_RETURN_IF_ERROR(cublasSetStream(e->cublas_, e->stream_.get()), "cublasSetStream");
  LG_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(e->cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // Sized once for the largest FP8 matrix: a later, larger dequantization
  // would otherwise free the buffer under a GEMM still queued on the stream.
  LG_RETURN_IF_ERROR(sized<uint16_t>(e->fp8_scratch_, e->weights_->maxFp8Elements()));
  return e;
}

CudaEngine::CudaEngine(std::unique_ptr<DeviceWeights> weights, DeviceLatentPool& pool, CudaEngineOptions options)
    : weights_(std::move(weights)),
      pool_(pool),
      options_(options),
      c_(weights_->config()),
      rope_(computeRope(weights_->config())) {}

CudaEngine::~CudaEngine() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());
  if (cublas_) cublasDestroy(cublas_);
}

// ----------------------------------------------------------------- GEMMs

Result<const void*> CudaEngine::bf16Of(const DeviceMatrix& w) {
  if (w.type == WeightType::kBf16) return w.data;
  LG_RETURN_IF_ERROR(sized<uint16_t>(fp8_scratch_, w.rows * w.cols));
  kernels::Fp8DequantParams p;
  p.w = w;
  p.out = fp8_scratch_.get<__nv_bfloat16>();
  p.ld_out = w.cols;
  LG_LAUNCH(kernels::launchFp8Dequant(p, stream_.get()), "fp8 dequant");
  return static_cast<const void*>(fp8_scratch_.get());
}

Status CudaEngine::gemm(const DeviceMatrix& w, const void* x, int64_t ldx, int64_t M, void* y, bool y_bf16, int64_t ldy,
                        float beta) {
  if (M == 0) return Status::ok();
  LG_ASSIGN_OR_RETURN(const void* wd, bf16Of(w));
  const int64_t ldw = w.type == WeightType::kBf16 ? w.ld : w.cols;
  const float alpha = 1.0f;
  // Row-major y = x w^T is column-major y^T = w x^T: A = w (transposed), B = x.
  LG_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(M),
                   static_cast<int>(w.cols), &alpha, wd, CUDA_R_16BF, static_cast<int>(ldw), x, CUDA_R_16BF,
                   static_cast<int>(ldx), &beta, y, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, static_cast<int>(ldy),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "gemm");
  return Status::ok();
}

// ------------------------------------------------------------------ plan

Status CudaEngine::upload(const ForwardPlan& plan, Plan& d) {
  const int64_t T = plan.numTokens();
  const int half = c_.qk_rope_head_dim / 2;
  int32_t max_blocks = 1, max_context = 1;
  for (const PlannedSequence& s : plan.sequences) {
    max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(s.blocks.size()));
    max_context = std::max(max_context, s.cached_len + s.num_tokens);
  }
  const int64_t S = static_cast<int64_t>(plan.sequences.size());
  const int64_t R = static_cast<int64_t>(plan.logit_tokens.size());
  // Layout of the one upload: 6 int arrays of T (or R), the block tables, cos, sin.
  const size_t ints_t = aligned(sizeof(int32_t) * T);
  const size_t off_logits = 5 * ints_t;
  const size_t off_tables = off_logits + aligned(sizeof(int32_t) * std::max<int64_t>(R, 1));
  const size_t off_cos = off_tables + aligned(sizeof(int32_t) * S * max_blocks);
  const size_t off_sin = off_cos + aligned(sizeof(float) * T * half);
  const size_t total = off_sin + aligned(sizeof(float) * T * half);
  LG_RETURN_IF_ERROR(plan_host_.ensure(total));
  LG_RETURN_IF_ERROR(plan_dev_.ensure(total));
  uint8_t* h = plan_host_.get<uint8_t>();
  auto ints = [&](size_t offset) { return reinterpret_cast<int32_t*>(h + offset); };
  std::memcpy(ints(0), plan.tokens.data(), sizeof(int32_t) * T);
  std::memcpy(ints(ints_t), plan.positions.data(), sizeof(int32_t) * T);
  std::memcpy(ints(2 * ints_t), plan.sequence_of.data(), sizeof(int32_t) * T);
  std::memcpy(ints(3 * ints_t), plan.write_block.data(), sizeof(int32_t) * T);
  std::memcpy(ints(4 * ints_t), plan.write_slot.data(), sizeof(int32_t) * T);
  for (int64_t r = 0; r < R; ++r) ints(off_logits)[r] = static_cast<int32_t>(plan.logit_tokens[static_cast<size_t>(r)]);
  int32_t* tables = ints(off_tables);
  for (int64_t s = 0; s < S; ++s) {
    const auto& blocks = plan.sequences[static_cast<size_t>(s)].blocks;
    for (int32_t b = 0; b < max_blocks; ++b) {
      tables[s * max_blocks + b] = b < static_cast<int32_t>(blocks.size()) ? blocks[static_cast<size_t>(b)] : 0;
    }
  }
  float* cos = reinterpret_cast<float*>(h + off_cos);
  float* sin = reinterpret_cast<float*>(h + off_sin);
  for (int64_t t = 0; t < T; ++t) ropeCosSin(rope_, plan.positions[static_cast<size_t>(t)], cos + t * half, sin + t * half);
  LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(plan_dev_.get(), h, total, cudaMemcpyHostToDevice, stream_.get()), "plan upload");
  uint8_t* dv = plan_dev_.get<uint8_t>();
  d.tokens = reinterpret_cast<const int32_t*>(dv);
  d.positions = reinterpret_cast<const int32_t*>(dv + ints_t);
  d.sequence_of = reinterpret_cast<const int32_t*>(dv + 2 * ints_t);
  d.write_block = reinterpret_cast<const int32_t*>(dv + 3 * ints_t);
  d.write_slot = reinterpret_cast<const int32_t*>(dv + 4 * ints_t);
  d.logit_rows = reinterpret_cast<const int32_t*>(dv + off_logits);
  d.block_tables = reinterpret_cast<const int32_t*>(dv + off_tables);
  d.cos = reinterpret_cast<const float*>(dv + off_cos);
  d.sin = reinterpret_cast<const float*>(dv + off_sin);
  d.max_blocks = max_blocks;
  d.max_context = max_context;
  d.logit_count = R;
  return Status::ok();
}

// ------------------------------------------------------------- attention

Status CudaEngine::attention(const Plan& d, int layer, int64_t T) {
  const DeviceLayer& l = weights_->layer(layer);
  const int64_t hidden = c_.hidden_size, H = c_.num_attention_heads, qhd = c_.qHeadDim();
  const int64_t nope = c_.qk_nope_head_dim, vd = c_.v_head_dim, kv = c_.kv_lora_rank, D = c_.latentDim();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  cudaStream_t s = stream_.get();
  __nv_bfloat16* h = h_.get<__nv_bfloat16>();
  LG_RETURN_IF_ERROR(rmsNorm(x_.get<float>(), hidden, l.input_norm, hidden, T, h, nullptr, nullptr, "input norm"));
  LG_RETURN_IF_ERROR(gemm(l.kv_a_proj, h, hidden, T, kv_a_.get(), false, D, 0.0f));
  __nv_bfloat16* q = q_.get<__nv_bfloat16>();
  if (c_.q_lora_rank > 0) {
    const int64_t r = c_.q_lora_rank;
    LG_RETURN_IF_ERROR(gemm(l.q_a_proj, h, hidden, T, q_a_.get(), false, r, 0.0f));
    LG_RETURN_IF_ERROR(rmsNorm(q_a_.get<float>(), r, l.q_a_norm, r, T, q_a_n_.get<__nv_bfloat16>(), nullptr, nullptr,
                               "q_a norm"));
    LG_RETURN_IF_ERROR(gemm(l.q_b_proj, q_a_n_.get(), r, T, q, true, H * qhd, 0.0f));
  } else {
    LG_RETURN_IF_ERROR(gemm(l.q_proj, h, hidden, T, q, true, H * qhd, 0.0f));
  }
  {
    kernels::LatentStoreParams p;
    p.kv_a = kv_a_.get<float>();
    p.kv_a_stride = D;
    p.norm_weight = l.kv_a_norm;
    p.eps = eps;
    p.cos = d.cos;
    p.sin = d.sin;
    p.half = c_.qk_rope_head_dim / 2;
    p.write_block = d.write_block;
    p.write_slot = d.write_slot;
    setPoolFields(p, pool_, layer, kv, D);
    p.tokens = static_cast<int32_t>(T);
    LG_LAUNCH(kernels::launchLatentStore(p, s), "latent store");
  }
  // The absorbed query: per head q_nope @ W_UK (kv_b_proj's first `nope` rows of the head), then the roped q_pe.
  LG_ASSIGN_OR_RETURN(const void* kv_b, bf16Of(l.kv_b_proj));
  const float one = 1.0f, zero = 0.0f;
  LG_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(kv), static_cast<int>(T),
                                 static_cast<int>(nope), &one, kv_b, CUDA_R_16BF, static_cast<int>(kv), (nope + vd) * kv,
                                 q, CUDA_R_16BF, static_cast<int>(H * qhd), qhd, &zero, q_cat_.get(), CUDA_R_32F,
                                 static_cast<int>(H * D), D, static_cast<int>(H), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
      "absorbed query");
  kernels::MlaAttentionParams ap;
  ap.q = q_cat_.get<float>();
  const bool tensor_cores = options_.mla_path != kernels::MlaPath::kSimt && pool_.layout().dtype == LatentDType::kBF16;
  {
    kernels::RopeQueryParams p;
    p.src = q;
    p.src_head_stride = static_cast<int32_t>(qhd);
    p.src_offset = static_cast<int32_t>(nope);
    p.dst = q_cat_.get<float>();
    p.dst_bf16 = tensor_cores ? q_cat_bf16_.get<__nv_bfloat16>() : nullptr;
    p.dst_head_stride = static_cast<int32_t>(D);
    p.dst_offset = static_cast<int32_t>(kv);
    p.dst_width = static_cast<int32_t>(D);
    p.cos = d.cos;
    p.sin = d.sin;
    p.half = c_.qk_rope_head_dim / 2;
    p.tokens = static_cast<int32_t>(T);
    p.heads = static_cast<int32_t>(H);
    p.scale = static_cast<float>(c_.softmaxScale());
    LG_LAUNCH(kernels::launchRopeQuery(p, s), "query rope");
  }
  ap.q_bf16 = tensor_cores ? q_cat_bf16_.get<__nv_bfloat16>() : nullptr;
  ap.out = o_lat_.get<__nv_bfloat16>();
  setPoolFields(ap, pool_, layer, kv, D);
  ap.block_tables = d.block_tables;
  ap.max_blocks = d.max_blocks;
  ap.query_sequence = d.sequence_of;
  ap.query_position = d.positions;
  ap.tokens = static_cast<int32_t>(T);
  ap.heads = static_cast<int32_t>(H);
  ap.max_context = d.max_context;
  ap.workspace = mla_workspace_.get();
  ap.workspace_bytes = mla_workspace_.bytes();
  ap.path = tensor_cores ? options_.mla_path : kernels::MlaPath::kSimt;
  LG_LAUNCH(kernels::launchMlaAttention(ap, s), "mla attention");
  // Back from latent space per head: o_lat @ W_UV^T (kv_b_proj's last `v` rows of the head).
  LG_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(vd), static_cast<int>(T),
                                 static_cast<int>(kv), &one, static_cast<const __nv_bfloat16*>(kv_b) + nope * kv,
                                 CUDA_R_16BF, static_cast<int>(kv), (nope + vd) * kv, o_lat_.get(), CUDA_R_16BF,
                                 static_cast<int>(H * kv), kv, &zero, o_v_.get(), CUDA_R_16BF,
                                 static_cast<int>(H * vd), vd, static_cast<int>(H), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
      "W_UV");
  return gemm(l.o_proj, o_v_.get(), H * vd, T, x_.get(), false, hidden, 1.0f);  // x += o_proj(o_v)
}

// ------------------------------------------------------------- the MLPs

Status CudaEngine::rmsNorm(const float* x, int64_t x_stride, const float* weight, int64_t cols, int64_t rows,
                           __nv_bfloat16* y, float* y_f32, const int32_t* row_index, const char* what) {
  kernels::RmsNormParams p;
  p.x = x;
  p.x_stride = x_stride;
  p.weight = weight;
  p.y_bf16 = y;
  p.y_f32 = y_f32;
  p.y_stride = cols;
  p.row_index = row_index;
  p.rows = static_cast<int32_t>(rows);
  p.cols = static_cast<int32_t>(cols);
  p.eps = static_cast<float>(c_.rms_norm_eps);
  return cudaStatus(kernels::launchRmsNorm(p, stream_.get()), what);
}

Status CudaEngine::mlp(const DeviceMlp& m, int64_t inter, int64_t T, const void* h, float* x) {
  const int64_t hidden = c_.hidden_size;
  float* gate_up = gate_up_.get<float>();
  LG_RETURN_IF_ERROR(gemm(m.gate, h, hidden, T, gate_up, false, 2 * inter, 0.0f));
  LG_RETURN_IF_ERROR(gemm(m.up, h, hidden, T, gate_up + inter, false, 2 * inter, 0.0f));
  kernels::SiluMulParams p;
  p.gate_up = gate_up;
  p.out = act_.get<__nv_bfloat16>();
  p.rows = T;
  p.width = static_cast<int32_t>(inter);
  LG_LAUNCH(kernels::launchSiluMul(p, stream_.get()), "silu");
  return gemm(m.down, act_.get(), inter, T, x, false, hidden, 1.0f);
}

Status CudaEngine::moe(const DeviceLayer& l, int64_t T) {
  const int64_t hidden = c_.hidden_size, n = c_.n_routed_experts, k = c_.num_experts_per_tok;
  const int64_t inter = c_.moe_intermediate_size, A = T * k;
  cudaStream_t s = stream_.get();
  const float one = 1.0f, zero = 0.0f;
  // Router logits in fp32 from the fp32 normed hidden state.
  LG_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(T),
                                        static_cast<int>(hidden), &one, l.router, static_cast<int>(hidden),
                                        h_f32_.get<float>(), static_cast<int>(hidden), &zero,
                                        router_logits_.get<float>(), static_cast<int>(n)),
                            "router");
  {
    kernels::MoeRoutingParams p = moeRoutingParams(c_);
    p.logits = router_logits_.get<float>();
    p.bias = l.router_bias;
    p.experts = experts_.get<int32_t>();
    p.weights = expert_weights_.get<float>();
    p.tokens = static_cast<int32_t>(T);
    LG_LAUNCH(kernels::launchMoeRouting(p, s), "moe routing");
  }
  const __nv_bfloat16* h = h_.get<__nv_bfloat16>();
  float* expert_out = expert_out_.get<float>();
  const int32_t* row_of = nullptr;
  if (T <= options_.moe_gemv_max_tokens && hidden % 16 == 0 && inter % 16 == 0) {
    kernels::MoeGemvParams p;
    p.h = h;
    p.experts = experts_.get<int32_t>();
    p.table = l.expert_table;
    p.act = gate_up_.get<float>();
    p.expert_out = expert_out;
    p.tokens = static_cast<int32_t>(T);
    p.k = static_cast<int32_t>(k);
    p.hidden = static_cast<int32_t>(hidden);
    p.inter = static_cast<int32_t>(inter);
    LG_LAUNCH(kernels::launchMoeGemv(p, s), "moe gemv");
  } else {
    int32_t* sort = sort_.get<int32_t>();  // counts [n], offsets [n + 1], order [A], row_of [A]
    kernels::MoeSortParams sp;
    sp.experts = experts_.get<int32_t>();
    sp.assignments = static_cast<int32_t>(A);
    sp.num_experts = static_cast<int32_t>(n);
    sp.counts = sort;
    sp.offsets = sort + n;
    sp.order = sort + 2 * n + 1;
    sp.row_of = sort + 2 * n + 1 + A;
    LG_LAUNCH(kernels::launchMoeSort(sp, s), "moe sort");
    LG_RETURN_IF_ERROR(counts_host_.ensure(sizeof(int32_t) * (2 * n + 1)));
    LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counts_host_.get(), sort, sizeof(int32_t) * (2 * n + 1),
                                            cudaMemcpyDeviceToHost, s),
                            "expert counts");
    kernels::MoeGatherParams gp;
    gp.h = h;
    gp.order = sp.order;
    gp.gathered = gathered_.get<__nv_bfloat16>();
    gp.rows = static_cast<int32_t>(A);
    gp.k = static_cast<int32_t>(k);
    gp.hidden = static_cast<int32_t>(hidden);
    LG_LAUNCH(kernels::launchMoeGather(gp, s), "moe gather");
    LG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "expert counts");  // the host sizes the GEMMs
    const int32_t* counts = counts_host_.get<int32_t>();
    const int32_t* offsets = counts + n;
    float* gate_up = gate_up_.get<float>();
    for (int64_t e = 0; e < n; ++e) {
      if (counts[e] == 0) continue;
      const ExpertMlp& m = l.experts[static_cast<size_t>(e)];
      const __nv_bfloat16* rows = gathered_.get<__nv_bfloat16>() + int64_t{offsets[e]} * hidden;
      float* gu = gate_up + int64_t{offsets[e]} * 2 * inter;
      LG_RETURN_IF_ERROR(gemm(m.gate, rows, hidden, counts[e], gu, false, 2 * inter, 0.0f));
      LG_RETURN_IF_ERROR(gemm(m.up, rows, hidden, counts[e], gu + inter, false, 2 * inter, 0.0f));
    }
    kernels::SiluMulParams ap;
    ap.gate_up = gate_up;
    ap.out = act_.get<__nv_bfloat16>();
    ap.rows = A;
    ap.width = static_cast<int32_t>(inter);
    LG_LAUNCH(kernels::launchSiluMul(ap, s), "expert silu");
    for (int64_t e = 0; e < n; ++e) {
      if (counts[e] == 0) continue;
      const ExpertMlp& m = l.experts[static_cast<size_t>(e)];
      LG_RETURN_IF_ERROR(gemm(m.down, act_.get<__nv_bfloat16>() + int64_t{offsets[e]} * inter, inter, counts[e],
                              expert_out + int64_t{offsets[e]} * hidden, false, hidden, 0.0f));
    }
    row_of = sp.row_of;
  }
  kernels::MoeCombineParams cp;
  cp.expert_out = expert_out;
  cp.row_of = row_of;
  cp.weights = expert_weights_.get<float>();
  cp.x = x_.get<float>();
  cp.tokens = static_cast<int32_t>(T);
  cp.k = static_cast<int32_t>(k);
  cp.hidden = static_cast<int32_t>(hidden);
  LG_LAUNCH(kernels::launchMoeCombine(cp, s), "moe combine");
  if (l.has_shared) {
    LG_RETURN_IF_ERROR(mlp(l.shared, int64_t{c_.n_shared_experts} * inter, T, h, x_.get<float>()));
  }
  return Status::ok();
}

Status CudaEngine::feedForward(const Plan&, int layer, int64_t T) {
  const DeviceLayer& l = weights_->layer(layer);
  LG_RETURN_IF_ERROR(rmsNorm(x_.get<float>(), c_.hidden_size, l.post_attention_norm, c_.hidden_size, T,
                             h_.get<__nv_bfloat16>(), l.moe ? h_f32_.get<float>() : nullptr,  // the router's input
                             nullptr, "post-attention norm"));
  if (!l.moe) return mlp(l.mlp, c_.intermediate_size, T, h_.get(), x_.get<float>());
  return moe(l, T);
}

// ------------------------------------------------------------------- run

Status CudaEngine::run(const ForwardPlan& plan, ForwardOutput& out) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t T = plan.numTokens();
  const int64_t hidden = c_.hidden_size, H = c_.num_attention_heads, D = c_.latentDim();
  const int64_t kv = c_.kv_lora_rank, k = std::max(c_.num_experts_per_tok, 1);
  const int64_t moe_inter = std::max<int64_t>(c_.moe_intermediate_size, int64_t{c_.n_shared_experts} * c_.moe_intermediate_size);
  const int64_t inter_rows = std::max<int64_t>(T * c_.intermediate_size, T * k * c_.moe_intermediate_size);
  const int64_t shared_rows = T * int64_t{c_.n_shared_experts} * c_.moe_intermediate_size;
  LG_RETURN_IF_ERROR(sized<float>(x_, T * hidden));
  LG_RETURN_IF_ERROR(sized<uint16_t>(h_, T * hidden));
  LG_RETURN_IF_ERROR(sized<float>(h_f32_, T * hidden));
  LG_RETURN_IF_ERROR(sized<float>(kv_a_, T * D));
  LG_RETURN_IF_ERROR(sized<float>(q_a_, T * std::max(c_.q_lora_rank, 1)));
  LG_RETURN_IF_ERROR(sized<uint16_t>(q_a_n_, T * std::max(c_.q_lora_rank, 1)));
  LG_RETURN_IF_ERROR(sized<uint16_t>(q_, T * H * c_.qHeadDim()));
  LG_RETURN_IF_ERROR(sized<float>(q_cat_, T * H * D));
  LG_RETURN_IF_ERROR(sized<uint16_t>(q_cat_bf16_, T * H * D));
  LG_RETURN_IF_ERROR(sized<uint16_t>(o_lat_, T * H * kv));
  LG_RETURN_IF_ERROR(sized<uint16_t>(o_v_, T * H * c_.v_head_dim));
  LG_RETURN_IF_ERROR(sized<float>(gate_up_, 2 * std::max({inter_rows, shared_rows, T * moe_inter})));
  LG_RETURN_IF_ERROR(sized<uint16_t>(act_, std::max({inter_rows, shared_rows, T * moe_inter})));
  LG_RETURN_IF_ERROR(sized<float>(router_logits_, T * std::max(c_.n_routed_experts, 1)));
  LG_RETURN_IF_ERROR(sized<int32_t>(experts_, T * k));
  LG_RETURN_IF_ERROR(sized<float>(expert_weights_, T * k));
  LG_RETURN_IF_ERROR(sized<int32_t>(sort_, 2 * int64_t{c_.n_routed_experts} + 1 + 2 * T * k));
  LG_RETURN_IF_ERROR(sized<uint16_t>(gathered_, T * k * hidden));
  LG_RETURN_IF_ERROR(sized<float>(expert_out_, T * k * hidden));
  Plan d;
  LG_RETURN_IF_ERROR(upload(plan, d));
  // The split attention's partials, for the splits these queries get (mla_attention.h).
  const int32_t splits = kernels::mlaDefaultSplits(static_cast<int32_t>(T), static_cast<int32_t>(H), d.max_context);
  LG_RETURN_IF_ERROR(mla_workspace_.ensure(std::max<size_t>(
      kernels::mlaWorkspaceBytes(static_cast<int32_t>(T), static_cast<int32_t>(H), static_cast<int32_t>(kv), splits), 1)));
  cudaStream_t s = stream_.get();
  {
    kernels::EmbeddingParams p;
    p.table = static_cast<const __nv_bfloat16*>(weights_->embedding().data);
    p.ids = d.tokens;
    p.x = x_.get<float>();
    p.tokens = static_cast<int32_t>(T);
    p.hidden = static_cast<int32_t>(hidden);
    LG_LAUNCH(kernels::launchEmbedding(p, s), "embedding");
  }
  for (int layer = 0; layer < c_.num_hidden_layers; ++layer) {
    LG_RETURN_IF_ERROR(attention(d, layer, T));
    LG_RETURN_IF_ERROR(feedForward(d, layer, T));
  }
  const int64_t rows = d.logit_count;
  plan.layOutLogitRows(c_.vocab_size, out);
  out.logits.clear();
  if (rows > 0) {
    LG_RETURN_IF_ERROR(rmsNorm(x_.get<float>(), hidden, weights_->finalNorm(), hidden, rows, h_.get<__nv_bfloat16>(),
                               nullptr, d.logit_rows, "final norm"));
    LG_RETURN_IF_ERROR(sized<float>(logits_, rows * c_.vocab_size));
    LG_RETURN_IF_ERROR(gemm(weights_->lmHead(), h_.get(), hidden, rows, logits_.get(), false, c_.vocab_size, 0.0f));
    if (options_.copy_logits) {
      const size_t bytes = sizeof(float) * static_cast<size_t>(rows * c_.vocab_size);
      LG_RETURN_IF_ERROR(logits_host_.ensure(bytes));
      LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_host_.get(), logits_.get(), bytes, cudaMemcpyDeviceToHost, s),
                              "logits");
      LG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "forward");
      out.logits.assign(logits_host_.get<float>(), logits_host_.get<float>() + rows * c_.vocab_size);
    }
  }
  LG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "forward");
  out.timing.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double latent_rows = 0;
  for (const PlannedSequence& sq : plan.sequences) latent_rows += static_cast<double>(sq.cached_len) + sq.num_tokens;
  out.timing.latent_bytes_read = latent_rows * pool_.layout().layers * pool_.layout().latent_dim *
                                 static_cast<double>(pool_.layout().elementBytes());
  return Status::ok();
}

}  // namespace lg::engine::cuda

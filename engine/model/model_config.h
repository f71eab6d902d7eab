// ModelConfig: the architecture of a DeepSeek V2/V3 checkpoint, parsed from
// Hugging Face's config.json and validated once. Everything the engine needs to
// know about a model's shape and numerics is here; nothing else reads config.json.
//
// Supported: model_type deepseek_v2 and deepseek_v3 (V2, V2-Lite, V2.5, V3, R1,
// V3.1, Moonlight-style), q_lora_rank null or set, rope_scaling null or yarn,
// topk_method greedy / group_limited_greedy / noaux_tc, scoring softmax / sigmoid,
// hidden_act silu, FP8 e4m3 with block-wise weight_scale_inv. Anything else is an
// Unimplemented error naming the field and value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace lg::engine {

enum class ModelType { kDeepseekV2, kDeepseekV3 };
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };
enum class ScoringFunc { kSoftmax, kSigmoid };

struct YarnScaling {
  bool enabled = false;
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0: absent (as transformers treats a falsy value)
  double mscale_all_dim = 0.0;  // 0: absent
  int64_t original_max_position_embeddings = 4096;
};

struct ModelConfig {
  ModelType model_type = ModelType::kDeepseekV3;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP width (layers < first_k_dense_replace)
  int moe_intermediate_size = 0;  // one routed expert's width
  int num_hidden_layers = 0;      // excludes V3's MTP layers
  int num_attention_heads = 0;
  int q_lora_rank = 0;  // 0: no q LoRA (plain q_proj, as V2-Lite)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int n_routed_experts = 0;  // 0: a dense model
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  TopkMethod topk_method = TopkMethod::kGreedy;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  YarnScaling yarn;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  int num_nextn_predict_layers = 0;  // V3 MTP layers: present in the checkpoint, ignored
  // FP8 block quantization (quantization_config.quant_method == "fp8").
  bool fp8 = false;
  int fp8_block_rows = 128;
  int fp8_block_cols = 128;

  bool isMoeLayer(int layer) const;
  int qHeadDim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Values per token per layer in the latent cache: normed c_kv then roped k_pe.
  int latentDim() const { return kv_lora_rank + qk_rope_head_dim; }
  // How the chosen experts' weights are finished, as the reference does:
  // renormalized to sum to one when norm_topk_prob (V3, or V2 with k > 1),
  // then times routed_scaling_factor (V3 always; V2 only when not renormalized).
  bool renormalizesTopkWeights() const;
  bool scalesRoutedWeights() const;
  // The attention softmax scale: qHeadDim^-0.5, times mscale(factor,
  // mscale_all_dim)^2 under yarn. The absorbed form keeps this scale.
  double softmaxScale() const;
};

Result<ModelConfig> parseModelConfig(std::string_view json_text);
// Reads DIR/config.json.
Result<ModelConfig> loadModelConfig(const std::string& dir);
// The Hugging Face config.json text for a config (used by `model init`).
std::string modelConfigToJson(const ModelConfig& config);

}  // namespace lg::engine

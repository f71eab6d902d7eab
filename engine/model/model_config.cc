#include "engine/model/model_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace lg::engine {
namespace {

using nlohmann::json;

double yarnMscale(double factor, double mscale) {
  if (factor <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(factor) + 1.0;
}

// Typed access to config.json fields with errors that name the field.
class Fields {
 public:
  explicit Fields(const json& obj, std::string prefix = "") : obj_(obj), prefix_(std::move(prefix)) {}

  bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  Status error(const char* key, const std::string& what) const {
    return invalidArgument("config.json: field \"" + prefix_ + key + "\" " + what);
  }
  Result<int> integer(const char* key, int min_value, std::optional<int> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, "is missing");
    }
    const json& v = obj_.at(key);
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return error(key, "must be an integer (got " + v.dump() + ")");
    }
    const double d = v.get<double>();
    if (d < min_value || d > 1e9) return error(key, "is out of range (got " + v.dump() + ")");
    return static_cast<int>(d);
  }
  Result<double> number(const char* key, std::optional<double> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, "is missing");
    }
    const json& v = obj_.at(key);
    if (!v.is_number()) return error(key, "must be a number (got " + v.dump() + ")");
    const double d = v.get<double>();
    if (!std::isfinite(d)) return error(key, "must be finite");
    return d;
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    if (!v.is_boolean()) return error(key, "must be a boolean (got " + v.dump() + ")");
    return v.get<bool>();
  }
  Result<std::string> string(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, "is missing");
    }
    const json& v = obj_.at(key);
    if (!v.is_string()) return error(key, "must be a string (got " + v.dump() + ")");
    return v.get<std::string>();
  }

 private:
  const json& obj_;
  std::string prefix_;
};

Status parseRope(const json& root, ModelConfig& c) {
  // transformers >= 5 may write "rope_parameters" (with rope_theta inside);
  // older configs write rope_theta at the top and "rope_scaling".
  const json* rope = nullptr;
  if (auto it = root.find("rope_parameters"); it != root.end() && !it->is_null()) rope = &*it;
  if (rope == nullptr) {
    if (auto it = root.find("rope_scaling"); it != root.end() && !it->is_null()) rope = &*it;
  }
  Fields top(root);
  LG_ASSIGN_OR_RETURN(c.rope_theta, top.number("rope_theta", 10000.0));
  if (rope == nullptr) return Status::ok();
  if (!rope->is_object()) return invalidArgument("config.json: field \"rope_scaling\" must be an object or null");
  Fields f(*rope, "rope_scaling.");
  std::string type = "default";
  if (f.has("type")) {
    LG_ASSIGN_OR_RETURN(type, f.string("type"));
  } else if (f.has("rope_type")) {
    LG_ASSIGN_OR_RETURN(type, f.string("rope_type"));
  }
  if (f.has("rope_theta")) {
    LG_ASSIGN_OR_RETURN(c.rope_theta, f.number("rope_theta"));
  }
  if (type == "default") return Status::ok();
  if (type != "yarn") return unimplemented("config.json: rope_scaling type \"" + type + "\" (only yarn is supported)");
  if (f.has("attention_factor")) {
    return unimplemented("config.json: rope_scaling.attention_factor (DeepSeek configs use mscale/mscale_all_dim)");
  }
  c.yarn.enabled = true;
  LG_ASSIGN_OR_RETURN(c.yarn.factor, f.number("factor"));
  LG_ASSIGN_OR_RETURN(c.yarn.beta_fast, f.number("beta_fast", 32.0));
  LG_ASSIGN_OR_RETURN(c.yarn.beta_slow, f.number("beta_slow", 1.0));
  LG_ASSIGN_OR_RETURN(c.yarn.mscale, f.number("mscale", 0.0));
  LG_ASSIGN_OR_RETURN(c.yarn.mscale_all_dim, f.number("mscale_all_dim", 0.0));
  LG_ASSIGN_OR_RETURN(int original, f.integer("original_max_position_embeddings", 1, c.max_position_embeddings));
  c.yarn.original_max_position_embeddings = original;
  if (c.yarn.factor <= 0) return f.error("factor", "must be positive");
  return Status::ok();
}

Status validate(const ModelConfig& c) {
  auto bad = [](const std::string& m) { return invalidArgument("config.json: " + m); };
  if (c.qk_rope_head_dim % 2 != 0) return bad("qk_rope_head_dim must be even");
  if (c.n_routed_experts > 0) {
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.n_routed_experts) {
      return bad("num_experts_per_tok must be in [1, n_routed_experts]");
    }
    if (c.moe_intermediate_size < 1) return bad("moe_intermediate_size must be positive for a MoE model");
    if (c.n_group < 1 || c.n_routed_experts % c.n_group != 0) return bad("n_routed_experts must be a multiple of n_group");
    if (c.topk_group < 1 || c.topk_group > c.n_group) return bad("topk_group must be in [1, n_group]");
    const bool grouped = c.topk_method != TopkMethod::kGreedy && c.n_group > 1;
    if (grouped && c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
      return bad("num_experts_per_tok exceeds the experts in topk_group groups");
    }
  }
  if (c.first_k_dense_replace < c.num_hidden_layers && c.n_routed_experts == 0 && c.intermediate_size < 1) {
    return bad("intermediate_size must be positive");
  }
  if (c.fp8 && (c.fp8_block_rows < 1 || c.fp8_block_cols < 1)) return bad("weight_block_size must be positive");
  if (c.yarn.enabled && c.yarn.original_max_position_embeddings < 1) {
    return bad("rope_scaling.original_max_position_embeddings must be positive");
  }
  return Status::ok();
}

}  // namespace

bool ModelConfig::renormalizesTopkWeights() const {
  return norm_topk_prob && (model_type == ModelType::kDeepseekV3 || num_experts_per_tok > 1);
}

bool ModelConfig::scalesRoutedWeights() const {
  return model_type == ModelType::kDeepseekV3 || !renormalizesTopkWeights();
}

bool ModelConfig::isMoeLayer(int layer) const {
  return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % std::max(1, moe_layer_freq) == 0;
}

double ModelConfig::softmaxScale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qHeadDim()));
  if (yarn.enabled && yarn.mscale_all_dim != 0.0) {
    const double m = yarnMscale(yarn.factor, yarn.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

Result<ModelConfig> parseModelConfig(std::string_view json_text) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalidArgument("config.json is not valid JSON");
  if (!root.is_object()) return invalidArgument("config.json is not a JSON object");
  Fields f(root);
  ModelConfig c;
  LG_ASSIGN_OR_RETURN(std::string model_type, f.string("model_type"));
  if (model_type == "deepseek_v2") {
    c.model_type = ModelType::kDeepseekV2;
  } else if (model_type == "deepseek_v3") {
    c.model_type = ModelType::kDeepseekV3;
  } else {
    return unimplemented("config.json: model_type \"" + model_type + "\" (supported: deepseek_v2, deepseek_v3)");
  }
  const bool v3 = c.model_type == ModelType::kDeepseekV3;
  LG_ASSIGN_OR_RETURN(std::string act, f.string("hidden_act", std::string("silu")));
  if (act != "silu") return unimplemented("config.json: hidden_act \"" + act + "\" (only silu is supported)");
  LG_ASSIGN_OR_RETURN(bool attention_bias, f.boolean("attention_bias", false));
  if (attention_bias) return unimplemented("config.json: attention_bias true");
  LG_ASSIGN_OR_RETURN(c.vocab_size, f.integer("vocab_size", 1));
  LG_ASSIGN_OR_RETURN(c.hidden_size, f.integer("hidden_size", 1));
  LG_ASSIGN_OR_RETURN(c.num_hidden_layers, f.integer("num_hidden_layers", 1));
  LG_ASSIGN_OR_RETURN(c.num_attention_heads, f.integer("num_attention_heads", 1));
  LG_ASSIGN_OR_RETURN(c.q_lora_rank, f.integer("q_lora_rank", 1, 0));
  LG_ASSIGN_OR_RETURN(c.kv_lora_rank, f.integer("kv_lora_rank", 1));
  LG_ASSIGN_OR_RETURN(c.qk_nope_head_dim, f.integer("qk_nope_head_dim", 1));
  LG_ASSIGN_OR_RETURN(c.qk_rope_head_dim, f.integer("qk_rope_head_dim", 2));
  LG_ASSIGN_OR_RETURN(c.v_head_dim, f.integer("v_head_dim", 1));
  LG_ASSIGN_OR_RETURN(c.max_position_embeddings, f.integer("max_position_embeddings", 1));
  LG_ASSIGN_OR_RETURN(c.n_routed_experts, f.integer("n_routed_experts", 0, 0));
  LG_ASSIGN_OR_RETURN(c.intermediate_size, f.integer("intermediate_size", 0, 0));
  LG_ASSIGN_OR_RETURN(c.first_k_dense_replace, f.integer("first_k_dense_replace", 0, 0));
  if (c.n_routed_experts > 0) {
    LG_ASSIGN_OR_RETURN(c.moe_intermediate_size, f.integer("moe_intermediate_size", 1));
    LG_ASSIGN_OR_RETURN(c.n_shared_experts, f.integer("n_shared_experts", 0, 0));
    LG_ASSIGN_OR_RETURN(c.num_experts_per_tok, f.integer("num_experts_per_tok", 1));
    LG_ASSIGN_OR_RETURN(c.n_group, f.integer("n_group", 1, 1));
    LG_ASSIGN_OR_RETURN(c.topk_group, f.integer("topk_group", 1, 1));
    LG_ASSIGN_OR_RETURN(c.moe_layer_freq, f.integer("moe_layer_freq", 1, 1));
    LG_ASSIGN_OR_RETURN(std::string method, f.string("topk_method", std::string(v3 ? "noaux_tc" : "greedy")));
    if (method == "greedy") {
      c.topk_method = TopkMethod::kGreedy;
    } else if (method == "group_limited_greedy") {
      c.topk_method = TopkMethod::kGroupLimitedGreedy;
    } else if (method == "noaux_tc") {
      c.topk_method = TopkMethod::kNoauxTc;
    } else {
      return unimplemented("config.json: topk_method \"" + method +
                           "\" (supported: greedy, group_limited_greedy, noaux_tc)");
    }
    LG_ASSIGN_OR_RETURN(std::string scoring, f.string("scoring_func", std::string(v3 ? "sigmoid" : "softmax")));
    if (scoring == "softmax") {
      c.scoring_func = ScoringFunc::kSoftmax;
    } else if (scoring == "sigmoid") {
      c.scoring_func = ScoringFunc::kSigmoid;
    } else {
      return unimplemented("config.json: scoring_func \"" + scoring + "\" (supported: softmax, sigmoid)");
    }
    LG_ASSIGN_OR_RETURN(c.norm_topk_prob, f.boolean("norm_topk_prob", v3));
    LG_ASSIGN_OR_RETURN(c.routed_scaling_factor, f.number("routed_scaling_factor", v3 ? 2.5 : 1.0));
  } else {
    c.first_k_dense_replace = c.num_hidden_layers;
  }
  if (c.first_k_dense_replace > 0 && c.intermediate_size < 1) {
    return invalidArgument("config.json: field \"intermediate_size\" is missing or zero but layers use a dense MLP");
  }
  LG_ASSIGN_OR_RETURN(c.rms_norm_eps, f.number("rms_norm_eps", 1e-6));
  LG_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.boolean("tie_word_embeddings", false));
  LG_ASSIGN_OR_RETURN(c.num_nextn_predict_layers, f.integer("num_nextn_predict_layers", 0, 0));
  LG_ASSIGN_OR_RETURN(c.bos_token_id, f.integer("bos_token_id", 0, -1));
  if (f.has("eos_token_id")) {
    const json& eos = root.at("eos_token_id");
    if (eos.is_number_integer()) {
      c.eos_token_ids.push_back(eos.get<int>());
    } else if (eos.is_array()) {
      for (const json& e : eos) {
        if (!e.is_number_integer()) return f.error("eos_token_id", "must be an integer or a list of integers");
        c.eos_token_ids.push_back(e.get<int>());
      }
    } else {
      return f.error("eos_token_id", "must be an integer or a list of integers");
    }
  }
  LG_RETURN_IF_ERROR(parseRope(root, c));
  if (f.has("quantization_config")) {
    const json& q = root.at("quantization_config");
    if (!q.is_object()) return f.error("quantization_config", "must be an object");
    Fields qf(q, "quantization_config.");
    LG_ASSIGN_OR_RETURN(std::string method, qf.string("quant_method"));
    if (method != "fp8") return unimplemented("config.json: quantization_config.quant_method \"" + method + "\"");
    LG_ASSIGN_OR_RETURN(std::string fmt, qf.string("fmt", std::string("e4m3")));
    if (fmt != "e4m3") return unimplemented("config.json: quantization_config.fmt \"" + fmt + "\"");
    auto bs = q.find("weight_block_size");
    if (bs == q.end() || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
        !(*bs)[1].is_number_integer()) {
      return unimplemented("config.json: quantization_config.weight_block_size must be [rows, cols] (per-tensor FP8 is not supported)");
    }
    c.fp8 = true;
    c.fp8_block_rows = (*bs)[0].get<int>();
    c.fp8_block_cols = (*bs)[1].get<int>();
  }
  LG_RETURN_IF_ERROR(validate(c));
  return c;
}

Result<ModelConfig> loadModelConfig(const std::string& dir) {
  LG_ASSIGN_OR_RETURN(std::string text, readFile(dir + "/config.json", 16u << 20));
  auto config = parseModelConfig(text);
  if (!config.isOk()) return config.status().withContext(dir);
  return config;
}

std::string modelConfigToJson(const ModelConfig& c) {
  const bool v3 = c.model_type == ModelType::kDeepseekV3;
  json j = json::object();
  j["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  j["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_routed_experts"] = c.n_routed_experts;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["topk_method"] = c.topk_method == TopkMethod::kGreedy                ? "greedy"
                     : c.topk_method == TopkMethod::kGroupLimitedGreedy ? "group_limited_greedy"
                                                                         : "noaux_tc";
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["scoring_func"] = c.scoring_func == ScoringFunc::kSoftmax ? "softmax" : "sigmoid";
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = 0.02;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["use_cache"] = true;
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["rope_theta"] = c.rope_theta;
  if (c.yarn.enabled) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", c.yarn.factor},
                         {"original_max_position_embeddings", c.yarn.original_max_position_embeddings},
                         {"beta_fast", c.yarn.beta_fast},
                         {"beta_slow", c.yarn.beta_slow},
                         {"mscale", c.yarn.mscale},
                         {"mscale_all_dim", c.yarn.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["torch_dtype"] = "bfloat16";
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  if (c.fp8) {
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {c.fp8_block_rows, c.fp8_block_cols}}};
  }
  return j.dump(2) + "\n";
}

}  // namespace lg::engine

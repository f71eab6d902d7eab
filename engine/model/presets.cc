#include "engine/model/presets.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/bfloat16.h"
#include "common/file_util.h"
#include "engine/model/dtype.h"
#include "engine/model/safetensors.h"

extern "C" {
extern const char lg_embedded_tokenizer_json[];
extern const char lg_embedded_tokenizer_json_end[];
extern const char lg_embedded_tokenizer_config_json[];
extern const char lg_embedded_tokenizer_config_json_end[];
extern const char lg_embedded_license[];
extern const char lg_embedded_license_end[];
}

namespace lg::engine {
namespace {

ModelConfig v3Base() {
  ModelConfig c;
  c.model_type = ModelType::kDeepseekV3;
  c.vocab_size = 129280;  // the DeepSeek-V3 tokenizer
  c.topk_method = TopkMethod::kNoauxTc;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.first_k_dense_replace = 1;
  c.moe_layer_freq = 1;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.yarn.enabled = true;
  c.yarn.factor = 40.0;
  c.yarn.original_max_position_embeddings = 4096;
  c.yarn.beta_fast = 32.0;
  c.yarn.beta_slow = 1.0;
  c.yarn.mscale = 1.0;
  c.yarn.mscale_all_dim = 1.0;
  c.max_position_embeddings = 163840;
  c.bos_token_id = 0;
  c.eos_token_ids = {1};
  return c;
}

// One tensor of the checkpoint and how to fill it.
struct Spec {
  enum Kind { kRandom, kOnes, kZeroF32 };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = kRandom;
};

std::vector<Spec> checkpointSpecs(const ModelConfig& c) {
  std::vector<Spec> s;
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, hidden}});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {hidden}, Spec::kOnes});
    s.push_back({p + "post_attention_layernorm.weight", {hidden}, Spec::kOnes});
    if (c.q_lora_rank > 0) {
      s.push_back({p + "self_attn.q_a_proj.weight", {c.q_lora_rank, hidden}});
      s.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, Spec::kOnes});
      s.push_back({p + "self_attn.q_b_proj.weight", {heads * c.qHeadDim(), c.q_lora_rank}});
    } else {
      s.push_back({p + "self_attn.q_proj.weight", {heads * c.qHeadDim(), hidden}});
    }
    s.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.latentDim(), hidden}});
    s.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, Spec::kOnes});
    s.push_back({p + "self_attn.kv_b_proj.weight", {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}});
    s.push_back({p + "self_attn.o_proj.weight", {hidden, heads * c.v_head_dim}});
    auto mlp = [&](const std::string& q, int64_t inter) {
      s.push_back({q + "gate_proj.weight", {inter, hidden}});
      s.push_back({q + "up_proj.weight", {inter, hidden}});
      s.push_back({q + "down_proj.weight", {hidden, inter}});
    };
    if (!c.isMoeLayer(i)) {
      mlp(p + "mlp.", c.intermediate_size);
      continue;
    }
    s.push_back({p + "mlp.gate.weight", {c.n_routed_experts, hidden}});
    if (c.topk_method == TopkMethod::kNoauxTc) {
      s.push_back({p + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}, Spec::kZeroF32});
    }
    for (int e = 0; e < c.n_routed_experts; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    if (c.n_shared_experts > 0) mlp(p + "mlp.shared_experts.", int64_t{c.n_shared_experts} * c.moe_intermediate_size);
  }
  s.push_back({"model.norm.weight", {hidden}, Spec::kOnes});
  s.push_back({"lm_head.weight", {c.vocab_size, hidden}});
  return s;
}

constexpr float kInitStd = 0.02f;  // transformers' initializer_range

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-a, a] with a = 0.02 * sqrt(3) (std 0.02), in chunks whose
// streams depend only on (seed, tensor, chunk): deterministic for any thread count.
void fillRandomBf16(std::span<uint8_t> out, uint64_t seed, uint64_t tensor) {
  constexpr size_t kChunk = 1 << 16;
  const size_t n = out.size() / 2;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  const float a = kInitStd * std::sqrt(3.0f);
  auto work = [&](size_t first, size_t step) {
    for (size_t ch = first; ch < chunks; ch += step) {
      uint64_t state = seed * 0x2545f4914f6cdd1dull ^ (tensor << 32) ^ ch;
      splitmix64(state);
      const size_t end = std::min(n, (ch + 1) * kChunk);
      for (size_t i = ch * kChunk; i < end; i += 2) {
        const uint64_t r = splitmix64(state);
        for (size_t j = 0; j < 2 && i + j < end; ++j) {
          const float u = static_cast<float>((r >> (32 * j)) & 0xffffffffu) * 0x1.0p-32f;  // [0, 1)
          const uint16_t b = floatToBf16((2.0f * u - 1.0f) * a);
          std::memcpy(out.data() + 2 * (i + j), &b, 2);
        }
      }
    }
  };
  const unsigned threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t, threads);
  work(0, threads);
  for (auto& t : pool) t.join();
}

// End tokens (CheckpointInitOptions::end_token_rate). A hidden state is
// roughly the current token's embedding plus what the layers add; giving the
// end tokens' embeddings a shared component along a direction v, and the EOS
// row of lm_head a large multiple of v, makes the EOS logit large exactly
// after an end token, and near zero otherwise.
// Tuned on the demo preset (16 short chats and 6 long ones, max_tokens 300):
// at rate 1/32, temperature 1: all 22 replies ended, median about 30 tokens;
// greedy: 20 of 22 ended (greedy random models fall into loops that may
// contain no end token). A gain of 1 to 2 ended few sampled replies, since
// the sampled EOS must beat the sum of 129k near-uniform probabilities.
constexpr float kEndComponent = 2.0f;  // |c v| over a random row's norm 0.02 sqrt(hidden)
constexpr float kEosGain = 8.0f;       // the EOS row is kEosGain * v

// v: a unit vector fixed by the seed.
std::vector<float> endDirection(const ModelConfig& config, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(config.hidden_size));
  uint64_t state = seed ^ 0x656e645f746f6bull;  // "end_tok"
  double norm = 0;
  for (float& x : v) {
    // Sum of four uniforms: near-Gaussian, so v is a uniformly random direction.
    double g = 0;
    for (int k = 0; k < 4; ++k) g += static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 - 0.5;
    x = static_cast<float>(g);
    norm += g * g;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(norm));
  return v;
}

// Ordinary tokens only: ids 0-2 are BOS, EOS and padding, and 128000 and
// above are the V3 tokenizer's special and placeholder tokens.
bool isEndToken(int64_t id, uint64_t seed, float rate) {
  if (id < 3 || id >= 128000) return false;
  uint64_t state = seed ^ static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull;
  return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 < rate;
}

void addToRow(uint8_t* row, const std::vector<float>& v, float scale) {
  for (size_t j = 0; j < v.size(); ++j) {
    uint16_t b;
    std::memcpy(&b, row + 2 * j, 2);
    b = floatToBf16(bf16ToFloat(b) + scale * v[j]);
    std::memcpy(row + 2 * j, &b, 2);
  }
}

void markEndTokens(std::span<uint8_t> embedding, const ModelConfig& config, uint64_t seed, float rate) {
  const std::vector<float> v = endDirection(config, seed);
  const size_t row_bytes = static_cast<size_t>(config.hidden_size) * 2;
  const float c = kEndComponent * kInitStd * std::sqrt(static_cast<float>(config.hidden_size));
  for (int64_t id = 0; id < config.vocab_size; ++id) {
    if (isEndToken(id, seed, rate)) addToRow(embedding.data() + static_cast<size_t>(id) * row_bytes, v, c);
  }
}

void setEosRows(std::span<uint8_t> lm_head, const ModelConfig& config, uint64_t seed) {
  const std::vector<float> v = endDirection(config, seed);
  const size_t row_bytes = static_cast<size_t>(config.hidden_size) * 2;
  for (int eos : config.eos_token_ids) {
    if (eos < 0 || eos >= config.vocab_size) continue;
    uint8_t* row = lm_head.data() + static_cast<size_t>(eos) * row_bytes;
    std::memset(row, 0, row_bytes);
    addToRow(row, v, kEosGain);
  }
}

}  // namespace

CheckpointInitOptions presetInitOptions(std::string_view name) {
  CheckpointInitOptions options;
  if (name == "demo") options.end_token_rate = 1.0f / 32;
  return options;
}

std::vector<std::string> presetNames() { return {"demo", "bench"}; }

Result<ModelConfig> presetConfig(std::string_view name) {
  ModelConfig c = v3Base();
  if (name == "demo") {
    c.hidden_size = 256;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.q_lora_rank = 192;
    c.kv_lora_rank = 128;
    c.qk_nope_head_dim = 64;
    c.qk_rope_head_dim = 32;
    c.v_head_dim = 64;
    c.intermediate_size = 1024;
    c.moe_intermediate_size = 256;
    c.n_routed_experts = 16;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 4;
    c.n_group = 4;
    c.topk_group = 2;
    return c;
  }
  if (name == "bench") {
    c.hidden_size = 2048;
    c.num_hidden_layers = 5;
    c.num_attention_heads = 16;
    c.q_lora_rank = 768;
    c.kv_lora_rank = 512;
    c.qk_nope_head_dim = 128;
    c.qk_rope_head_dim = 64;
    c.v_head_dim = 128;
    c.intermediate_size = 8192;
    c.moe_intermediate_size = 1024;
    c.n_routed_experts = 64;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 6;
    c.n_group = 8;
    c.topk_group = 4;
    return c;
  }
  std::string known;
  for (const auto& n : presetNames()) known += (known.empty() ? "" : ", ") + n;
  return invalidArgument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

std::string_view embeddedTokenizerJson() {
  return {lg_embedded_tokenizer_json, static_cast<size_t>(lg_embedded_tokenizer_json_end - lg_embedded_tokenizer_json)};
}

std::string_view embeddedTokenizerConfigJson() {
  return {lg_embedded_tokenizer_config_json,
          static_cast<size_t>(lg_embedded_tokenizer_config_json_end - lg_embedded_tokenizer_config_json)};
}

Status writeRandomCheckpoint(const ModelConfig& config, const std::string& dir, const CheckpointInitOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("cannot create '" + dir + "': " + ec.message());
  const std::vector<Spec> specs = checkpointSpecs(config);
  uint64_t total = 0;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += static_cast<uint64_t>(n) * (s.kind == Spec::kZeroF32 ? 4 : 2);
  }
  std::vector<TensorToWrite> tensors;
  uint64_t done = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    TensorToWrite t;
    t.name = s.name;
    t.shape = s.shape;
    t.dtype = s.kind == Spec::kZeroF32 ? DType::kF32 : DType::kBF16;
    const bool ends = options.end_token_rate > 0;
    const bool embedding = ends && s.name == "model.embed_tokens.weight";
    const bool lm_head = ends && s.name == "lm_head.weight";
    t.fill = [&options, &config, &done, total, kind = s.kind, index = i, embedding, lm_head](std::span<uint8_t> out) {
      if (kind == Spec::kRandom) {
        fillRandomBf16(out, options.seed, index);
        if (embedding) markEndTokens(out, config, options.seed, options.end_token_rate);
        if (lm_head) setEosRows(out, config, options.seed);
      } else if (kind == Spec::kOnes) {
        const uint16_t one = floatToBf16(1.0f);
        for (size_t j = 0; j + 1 < out.size(); j += 2) std::memcpy(out.data() + j, &one, 2);
      }  // kZeroF32: the buffer arrives zeroed
      done += out.size();
      if (options.progress) options.progress(done, total);
    };
    tensors.push_back(std::move(t));
  }
  LG_RETURN_IF_ERROR(writeFileAtomic(dir + "/config.json", modelConfigToJson(config)));
  LG_RETURN_IF_ERROR(writeFileAtomic(dir + "/tokenizer.json", embeddedTokenizerJson()));
  LG_RETURN_IF_ERROR(writeFileAtomic(dir + "/tokenizer_config.json", embeddedTokenizerConfigJson()));
  LG_RETURN_IF_ERROR(writeFileAtomic(
      dir + "/LICENSE-tokenizer",
      std::string_view(lg_embedded_license,
                       static_cast<size_t>(lg_embedded_license_end - lg_embedded_license))));
  return writeSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace lg::engine

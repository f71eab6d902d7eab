#include "engine/model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace lg::engine {

Result<std::map<std::string, std::string>> parseWeightMap(std::string_view text, const std::string& index_path) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return dataLoss(index_path + ": not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return dataLoss(index_path + ": missing object \"weight_map\"");
  std::map<std::string, std::string> weight_map;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) return dataLoss(index_path + ": weight_map['" + it.key() + "'] is not a string");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "..") {
      return dataLoss(index_path + ": weight_map['" + it.key() + "'] names an invalid file '" + file + "'");
    }
    weight_map[it.key()] = file;
  }
  return weight_map;
}

float WeightView::value(int64_t r, int64_t c) const {
  const uint8_t* p = at(r, c);
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16ToFloat(v);
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16ToFloat(v);
    }
    case DType::kF8E4M3:
      return fp8e4m3ToFloat(*p) * scaleAt(r, c);
    default:
      return 0.0f;
  }
}

class ModelLoader {
 public:
  ModelLoader(Model& model, const ModelLoadOptions& options) : m_(model), options_(options) {}

  Status run(const std::string& dir) {
    m_.dir_ = dir;
    // config.json through a map, so its bytes and its identity come from the
    // same open file (checkFilesUnchanged compares against that identity).
    LG_ASSIGN_OR_RETURN(MappedFile config_file, MappedFile::open(dir + "/config.json"));
    m_.config_text_ = std::string(config_file.view());
    m_.config_identity_ = config_file.identity();
    auto config = parseModelConfig(m_.config_text_);
    if (!config.isOk()) return config.status().withContext(dir);
    m_.config_ = std::move(config).value();
    LG_RETURN_IF_ERROR(openShards(dir));
    const ModelConfig& c = m_.config_;
    report("validating");
    LG_ASSIGN_OR_RETURN(m_.embed_, matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size));
    if (find("lm_head.weight") == nullptr && c.tie_word_embeddings) {
      m_.lm_head_ = m_.embed_;
    } else {
      LG_ASSIGN_OR_RETURN(m_.lm_head_, matrix("lm_head.weight", c.vocab_size, c.hidden_size));
    }
    LG_ASSIGN_OR_RETURN(m_.final_norm_, vector("model.norm.weight", c.hidden_size));
    m_.layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      LG_RETURN_IF_ERROR(loadLayer(i, m_.layers_[static_cast<size_t>(i)]));
      report("validating");
    }
    // Reading a checkpoint larger than half the RAM up front would only evict
    // its own first pages again; such models page in on demand instead.
    const uint64_t ram = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (options_.prefetch && m_.checkpoint_bytes_ <= ram / 2) prefetch();
    return Status::ok();
  }

 private:
  struct Located {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };

  Status openShards(const std::string& dir) {
    const std::string index_path = dir + "/model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    if (::access(index_path.c_str(), F_OK) == 0) {
      LG_ASSIGN_OR_RETURN(std::string text, readFile(index_path, 256u << 20));
      LG_ASSIGN_OR_RETURN(weight_map, parseWeightMap(text, index_path));
    } else {
      const std::string single = dir + "/model.safetensors";
      if (::access(single.c_str(), F_OK) != 0) {
        return notFound(dir + ": no model.safetensors or model.safetensors.index.json");
      }
      LG_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single, true, options_.prefetch));
      m_.shards_.push_back(std::move(f));
    }
    if (!weight_map.empty()) {
      std::map<std::string, size_t> shard_index;
      for (const auto& [name, file] : weight_map) {
        if (shard_index.count(file)) continue;
        LG_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(dir + "/" + file, true, options_.prefetch));
        shard_index[file] = m_.shards_.size();
        m_.shards_.push_back(std::move(f));
      }
      for (const auto& [name, file] : weight_map) {
        const SafetensorsFile& shard = m_.shards_[shard_index[file]];
        const TensorInfo* info = shard.find(name);
        if (info == nullptr) {
          return dataLoss("tensor '" + name + "' is listed in model.safetensors.index.json under '" + file +
                          "' but that file does not contain it");
        }
        located_[name] = {&shard, info};
      }
    } else {
      const SafetensorsFile& shard = m_.shards_[0];
      for (const auto& info : shard.tensors()) located_[info.name] = {&shard, &info};
    }
    for (const auto& s : m_.shards_) m_.checkpoint_bytes_ += s.fileSize();
    return Status::ok();
  }

  const Located* find(const std::string& name) const {
    auto it = located_.find(name);
    return it == located_.end() ? nullptr : &it->second;
  }

  static std::string shapeOf(std::initializer_list<int64_t> dims) {
    std::string s = "[";
    size_t i = 0;
    for (int64_t d : dims) s += (i++ ? ", " : "") + std::to_string(d);
    return s + "]";
  }

  Result<WeightView> matrix(const std::string& name, int64_t rows, int64_t cols) {
    const Located* loc = find(name);
    if (loc == nullptr) return notFound("missing tensor '" + name + "'");
    const TensorInfo& t = *loc->info;
    if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols) {
      return invalidArgument("tensor '" + name + "' has shape " + t.shapeString() + " but the config implies " +
                             shapeOf({rows, cols}));
    }
    WeightView v;
    v.dtype = t.dtype;
    v.data = loc->file->data(t);
    v.ld = cols;
    v.rows = rows;
    v.cols = cols;
    switch (t.dtype) {
      case DType::kF32:
      case DType::kF16:
      case DType::kBF16:
        break;
      case DType::kF8E4M3: {
        if (!m_.config_.fp8) {
          return invalidArgument("tensor '" + name + "' is F8_E4M3 but config.json has no fp8 quantization_config");
        }
        const int br = m_.config_.fp8_block_rows;
        const int bc = m_.config_.fp8_block_cols;
        const int64_t srows = (rows + br - 1) / br;
        const int64_t scols = (cols + bc - 1) / bc;
        LG_ASSIGN_OR_RETURN(std::vector<float> scales, floats(name + "_scale_inv", {srows, scols}));
        m_.scale_storage_.push_back(std::make_unique<std::vector<float>>(std::move(scales)));
        v.scales = m_.scale_storage_.back()->data();
        v.scale_ld = scols;
        v.block_rows = br;
        v.block_cols = bc;
        break;
      }
      default:
        return invalidArgument("tensor '" + name + "' has dtype " + std::string(dtypeName(t.dtype)) +
                               "; expected F32, F16, BF16 or F8_E4M3");
    }
    loaded_bytes_ += t.end - t.begin;
    return v;
  }

  // A small tensor copied to fp32 (norms, scales, router bias).
  Result<std::vector<float>> floats(const std::string& name, std::initializer_list<int64_t> dims) {
    const Located* loc = find(name);
    if (loc == nullptr) return notFound("missing tensor '" + name + "'");
    const TensorInfo& t = *loc->info;
    if (t.shape != std::vector<int64_t>(dims)) {
      return invalidArgument("tensor '" + name + "' has shape " + t.shapeString() + " but the config implies " +
                             shapeOf(dims));
    }
    std::vector<float> out(static_cast<size_t>(t.numel()));
    const uint8_t* p = loc->file->data(t);
    for (size_t i = 0; i < out.size(); ++i) {
      switch (t.dtype) {
        case DType::kF32:
          std::memcpy(&out[i], p + 4 * i, 4);
          break;
        case DType::kBF16: {
          uint16_t v;
          std::memcpy(&v, p + 2 * i, 2);
          out[i] = bf16ToFloat(v);
          break;
        }
        case DType::kF16: {
          uint16_t v;
          std::memcpy(&v, p + 2 * i, 2);
          out[i] = f16ToFloat(v);
          break;
        }
        default:
          return invalidArgument("tensor '" + name + "' has dtype " + std::string(dtypeName(t.dtype)) +
                                 "; expected F32, F16 or BF16");
      }
    }
    loaded_bytes_ += t.end - t.begin;
    return out;
  }

  Result<std::vector<float>> vector(const std::string& name, int64_t n) { return floats(name, {n}); }

  Result<MlpWeights> mlp(const std::string& prefix, int64_t inter) {
    const int64_t hidden = m_.config_.hidden_size;
    MlpWeights w;
    LG_ASSIGN_OR_RETURN(w.gate, matrix(prefix + "gate_proj.weight", inter, hidden));
    LG_ASSIGN_OR_RETURN(w.up, matrix(prefix + "up_proj.weight", inter, hidden));
    LG_ASSIGN_OR_RETURN(w.down, matrix(prefix + "down_proj.weight", hidden, inter));
    return w;
  }

  Status loadLayer(int i, LayerWeights& l) {
    const ModelConfig& c = m_.config_;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const int64_t hidden = c.hidden_size;
    const int64_t heads = c.num_attention_heads;
    LG_ASSIGN_OR_RETURN(l.input_norm, vector(p + "input_layernorm.weight", hidden));
    LG_ASSIGN_OR_RETURN(l.post_attention_norm, vector(p + "post_attention_layernorm.weight", hidden));
    const std::string a = p + "self_attn.";
    if (c.q_lora_rank > 0) {
      LG_ASSIGN_OR_RETURN(l.q_a_proj, matrix(a + "q_a_proj.weight", c.q_lora_rank, hidden));
      LG_ASSIGN_OR_RETURN(l.q_a_norm, vector(a + "q_a_layernorm.weight", c.q_lora_rank));
      LG_ASSIGN_OR_RETURN(l.q_b_proj, matrix(a + "q_b_proj.weight", heads * c.qHeadDim(), c.q_lora_rank));
    } else {
      LG_ASSIGN_OR_RETURN(l.q_proj, matrix(a + "q_proj.weight", heads * c.qHeadDim(), hidden));
    }
    LG_ASSIGN_OR_RETURN(l.kv_a_proj, matrix(a + "kv_a_proj_with_mqa.weight", c.latentDim(), hidden));
    LG_ASSIGN_OR_RETURN(l.kv_a_norm, vector(a + "kv_a_layernorm.weight", c.kv_lora_rank));
    LG_ASSIGN_OR_RETURN(l.kv_b_proj,
                        matrix(a + "kv_b_proj.weight", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank));
    LG_ASSIGN_OR_RETURN(l.o_proj, matrix(a + "o_proj.weight", hidden, heads * c.v_head_dim));
    l.moe = c.isMoeLayer(i);
    if (!l.moe) {
      LG_ASSIGN_OR_RETURN(l.mlp, mlp(p + "mlp.", c.intermediate_size));
      return Status::ok();
    }
    LG_ASSIGN_OR_RETURN(l.router, matrix(p + "mlp.gate.weight", c.n_routed_experts, hidden));
    if (c.topk_method == TopkMethod::kNoauxTc) {
      LG_ASSIGN_OR_RETURN(l.router_bias, vector(p + "mlp.gate.e_score_correction_bias", c.n_routed_experts));
    }
    l.experts.resize(static_cast<size_t>(c.n_routed_experts));
    for (int e = 0; e < c.n_routed_experts; ++e) {
      LG_ASSIGN_OR_RETURN(l.experts[static_cast<size_t>(e)],
                          mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size));
    }
    if (c.n_shared_experts > 0) {
      l.has_shared = true;
      LG_ASSIGN_OR_RETURN(l.shared,
                          mlp(p + "mlp.shared_experts.", int64_t{c.n_shared_experts} * c.moe_intermediate_size));
    }
    return Status::ok();
  }

  void report(const char* phase) {
    if (!options_.progress) return;
    LoadProgress p;
    p.done_bytes = loaded_bytes_;
    p.total_bytes = m_.checkpoint_bytes_;
    p.phase = phase;
    options_.progress(p);
  }

  // Touches one byte per page so the checkpoint is resident before serving.
  void prefetch() {
    const long page = ::sysconf(_SC_PAGESIZE);
    uint64_t done = 0;
    uint64_t next_report = 0;
    volatile uint8_t sink = 0;
    for (const auto& shard : m_.shards_) {
      const uint8_t* base = shard.map().data();
      const size_t size = shard.map().size();
      if (base == nullptr) continue;
      ::madvise(const_cast<uint8_t*>(base), size, MADV_WILLNEED);
      for (size_t off = 0; off < size; off += static_cast<size_t>(page)) {
        sink = sink + base[off];
        done += static_cast<uint64_t>(page);
        if (options_.progress && done >= next_report) {
          LoadProgress p{std::min(done, m_.checkpoint_bytes_), m_.checkpoint_bytes_, "prefetching"};
          options_.progress(p);
          next_report = done + (256ull << 20);
        }
      }
    }
    if (options_.progress) options_.progress({m_.checkpoint_bytes_, m_.checkpoint_bytes_, "prefetching"});
  }

  Model& m_;
  const ModelLoadOptions& options_;
  std::unordered_map<std::string, Located> located_;
  uint64_t loaded_bytes_ = 0;
};

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  ModelLoader loader(*model, options);
  Status s = loader.run(dir);
  if (!s.isOk()) return s.withContext("loading model from '" + dir + "'");
  return model;
}

uint64_t Model::activeWeightBytesPerToken() const {
  const ModelConfig& c = config_;
  auto b = [](const WeightView& w) { return static_cast<uint64_t>(w.empty() ? 0 : w.bytes()); };
  auto mlp = [&](const MlpWeights& m) { return b(m.gate) + b(m.up) + b(m.down); };
  uint64_t total = b(lm_head_) + static_cast<uint64_t>(c.hidden_size) * dtypeSize(embed_.dtype);
  for (const auto& l : layers_) {
    total += b(l.q_proj) + b(l.q_a_proj) + b(l.q_b_proj) + b(l.kv_a_proj) + b(l.kv_b_proj) + b(l.o_proj);
    if (!l.moe) {
      total += mlp(l.mlp);
      continue;
    }
    total += b(l.router);
    if (l.has_shared) total += mlp(l.shared);
    if (!l.experts.empty()) total += mlp(l.experts[0]) * static_cast<uint64_t>(c.num_experts_per_tok);
  }
  return total;
}

Status Model::checkFilesUnchanged() const {
  auto check = [](const std::string& path, const FileIdentity& loaded) -> Status {
    auto now = statIdentity(path);
    if (!now.isOk()) return dataLoss(path + " changed since the model was loaded: " + now.status().message());
    if (now->device != loaded.device || now->inode != loaded.inode) {
      return dataLoss(path + " was replaced since the model was loaded");
    }
    if (now->size != loaded.size || now->mtime_ns != loaded.mtime_ns) {
      return dataLoss(path + " was modified in place since the model was loaded");
    }
    return Status::ok();
  };
  LG_RETURN_IF_ERROR(check(dir_ + "/config.json", config_identity_));
  for (const SafetensorsFile& shard : shards_) LG_RETURN_IF_ERROR(check(shard.path(), shard.map().identity()));
  return Status::ok();
}

}  // namespace lg::engine

// Model: a loaded DeepSeek V2/V3 checkpoint. Weights stay in the memory-mapped
// safetensors files (one map per shard) and are exposed as WeightViews; only
// small vectors (norm weights, FP8 block scales, router bias) are converted to
// fp32 copies, which is well under 0.1% of the checkpoint.
//
// Loading validates every tensor the architecture needs: presence, dtype and
// exact shape, naming the tensor on error. Tensors the engine does not use (the
// V3 multi-token-prediction layer, rotary buffers) are ignored.
//
// Thread-safety: immutable after load; share it by const reference.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_view.h"

namespace lg::engine {

struct MlpWeights {
  WeightView gate;  // [inter, hidden]
  WeightView up;    // [inter, hidden]
  WeightView down;  // [hidden, inter]
};

struct LayerWeights {
  std::vector<float> input_norm;           // [hidden]
  std::vector<float> post_attention_norm;  // [hidden]
  // Attention. Either q_proj, or q_a_proj + q_a_norm + q_b_proj.
  WeightView q_proj;    // [heads * (nope + rope), hidden]
  WeightView q_a_proj;  // [q_lora, hidden]
  std::vector<float> q_a_norm;
  WeightView q_b_proj;           // [heads * (nope + rope), q_lora]
  WeightView kv_a_proj;          // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;  // [kv_lora]
  WeightView kv_b_proj;          // [heads * (nope + v), kv_lora]
  WeightView o_proj;             // [hidden, heads * v]
  // Feed-forward: a dense MLP, or a MoE.
  bool moe = false;
  MlpWeights mlp;
  WeightView router;               // [experts, hidden]
  std::vector<float> router_bias;  // [experts], noaux_tc only (e_score_correction_bias)
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;  // width n_shared_experts * moe_intermediate_size
};

struct LoadProgress {
  uint64_t done_bytes = 0;
  uint64_t total_bytes = 0;
  std::string phase;  // "validating", "prefetching"
};

struct ModelLoadOptions {
  // Read every weight page once after validation so the first request does not
  // page-fault the checkpoint in (pages stay file-backed: no anonymous copy).
  // Skipped for checkpoints larger than half the physical memory. The files'
  // unmapped cached pages are dropped first, so they come back as 2 MB folios
  // mapped with huge-page entries (weights are always mapped 2 MB aligned).
  bool prefetch = false;
  std::function<void(const LoadProgress&)> progress;  // called from the loading thread
};

// The tensor -> shard file map of a sharded checkpoint: `text` is its
// model.safetensors.index.json (`index_path` names it in errors). Every shard
// must be a plain file name inside the checkpoint directory. Model::load and
// the cache's model fingerprint (cache/model_fingerprint.cc) both read the
// weight files through this, so they always agree on which files they are.
Result<std::map<std::string, std::string>> parseWeightMap(std::string_view text, const std::string& index_path);

class Model {
 public:
  // Loads DIR/config.json and DIR/model.safetensors or the shards listed in
  // DIR/model.safetensors.index.json.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const ModelLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const LayerWeights& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  const WeightView& embedding() const { return embed_; }  // [vocab, hidden]
  const WeightView& lmHead() const { return lm_head_; }   // [vocab, hidden]
  const std::vector<float>& finalNorm() const { return final_norm_; }
  const std::string& dir() const { return dir_; }
  // The bytes of config.json the model was built from, and the weight files
  // as mapped (their maps and the identities of the files mapped).
  const std::string& configText() const { return config_text_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }

  // OK while config.json and every weight file are still the files loaded;
  // DataLoss naming the first one that was replaced (a new inode), modified
  // in place (size or mtime) or removed. Weights are private maps of the live
  // files: a file changed in place changes (or, truncated, faults) what the
  // engine reads, so callers that key data by the loaded weights (the prefix
  // cache) must stop trusting that identity once this fails.
  Status checkFilesUnchanged() const;

  // Sum of the safetensors files' sizes.
  uint64_t checkpointBytes() const { return checkpoint_bytes_; }
  // Bytes of weights one token reads in a decode step: attention, dense or
  // shared MLPs, top-k routed experts (average expert size), router, lm_head and
  // one embedding row. The denominator of the decode bandwidth bound.
  uint64_t activeWeightBytesPerToken() const;

 private:
  Model() = default;
  friend class ModelLoader;

  std::string dir_;
  std::string config_text_;
  FileIdentity config_identity_;
  ModelConfig config_;
  std::vector<SafetensorsFile> shards_;
  std::vector<std::unique_ptr<std::vector<float>>> scale_storage_;  // stable addresses
  std::vector<LayerWeights> layers_;
  WeightView embed_;
  WeightView lm_head_;
  std::vector<float> final_norm_;
  uint64_t checkpoint_bytes_ = 0;
};

}  // namespace lg::engine

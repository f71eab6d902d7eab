#include "cache/model_fingerprint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "engine/model/model.h"

namespace lg::cache {
namespace {

constexpr std::string_view kModelTag = "latentgate/model-fingerprint/v1";
constexpr std::string_view kIdentityTag = "latentgate/latent-identity/v1";
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the loader's limit too

void hashName(Sha256& h, std::string_view name) { h.updateU64(name.size()).update(name); }

// Feeds bytes [offset, offset + n) of a mapped file to `h`; only those pages
// are read.
void hashRange(Sha256& h, const MappedFile& f, uint64_t offset, uint64_t n, uint64_t& bytes_read) {
  h.update(f.view().substr(static_cast<size_t>(offset), static_cast<size_t>(n)));
  bytes_read += n;
}

// A whole small file (config, tokenizer, index): name, presence, size, bytes.
// Returns the mapping (empty when absent and not required) for callers that
// also parse it.
Result<MappedFile> hashWholeFile(Sha256& h, const std::string& dir, const std::string& name, bool required,
                                 ModelFingerprint& fp) {
  hashName(h, name);
  const std::string path = dir + "/" + name;
  auto f = MappedFile::open(path);
  if (!f.isOk()) {
    if (required || f.status().code() != StatusCode::kNotFound) return f.status();
    h.updateU64(0);  // absent
    return MappedFile();
  }
  h.updateU64(1).updateU64(f->size());
  hashRange(h, *f, 0, f->size(), fp.bytes_read);
  fp.files.push_back(name);
  return f;
}

// One weight file, as mapped: size, the safetensors header, the data section
// (whole, or a sample of it).
Status hashWeightFile(Sha256& h, const std::string& name, const MappedFile& f, const ModelFingerprintOptions& o,
                      ModelFingerprint& fp) {
  const std::string& path = f.path();
  hashName(h, name);
  h.updateU64(f.size());
  if (f.size() < 8) return dataLoss(path + ": too short for a safetensors header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.data()[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > f.size()) {
    return dataLoss(path + ": safetensors header length " + std::to_string(header_len) + " does not fit the file");
  }
  // The header: every tensor's name, dtype, shape and offsets, and the metadata.
  Sha256 header_hash;
  uint64_t ignored = 0;
  hashRange(header_hash, f, 0, 8 + header_len, ignored);
  const Digest header_digest = header_hash.finish();
  h.update(header_digest);
  fp.bytes_read += 8 + header_len;

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = f.size() - data_start;
  if (o.full || data_len <= o.whole_data_limit) {
    h.updateU64(0);  // mode: whole
    hashRange(h, f, data_start, data_len, fp.bytes_read);
  } else {
    h.updateU64(1);  // mode: sampled
    const uint64_t edge = std::min(o.edge_bytes, data_len / 2);
    hashRange(h, f, data_start, edge, fp.bytes_read);
    hashRange(h, f, f.size() - edge, edge, fp.bytes_read);
    const uint64_t window = std::min(o.window_bytes, data_len);
    const uint64_t span = data_len - window + 1;
    for (int i = 0; i < o.sample_windows; ++i) {
      // Offsets follow from the header, so the same file is always sampled at
      // the same places, and a different file at different ones.
      const Digest d = Sha256().update(header_digest).updateU64(static_cast<uint64_t>(i)).finish();
      uint64_t r = 0;
      std::memcpy(&r, d.bytes.data(), sizeof r);
      const uint64_t off = data_start + r % span;
      h.updateU64(off - data_start);
      hashRange(h, f, off, window, fp.bytes_read);
    }
  }
  fp.files.push_back(name);
  return Status::ok();
}


// The fingerprint of a checkpoint whose config.json bytes and weight maps the
// caller holds; the tokenizer files and the index are read from `dir`.
Result<ModelFingerprint> fingerprintParts(const std::string& dir, std::string_view config_text,
                                          std::vector<std::pair<std::string, const MappedFile*>> weights,
                                          const ModelFingerprintOptions& options) {
  ModelFingerprint fp;
  Sha256 h;
  h.update(kModelTag).updateU64(engine::kLatentFormatVersion);
  // config.json exactly as hashWholeFile hashes a file: name, presence, size, bytes.
  hashName(h, "config.json");
  h.updateU64(1).updateU64(config_text.size()).update(config_text);
  fp.bytes_read += config_text.size();
  fp.files.push_back("config.json");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"}) {
    LG_RETURN_IF_ERROR(hashWholeFile(h, dir, name, /*required=*/false, fp).status());
  }
  if (::access((dir + "/model.safetensors.index.json").c_str(), F_OK) == 0) {
    LG_RETURN_IF_ERROR(hashWholeFile(h, dir, "model.safetensors.index.json", true, fp).status());
  }
  std::sort(weights.begin(), weights.end());
  h.updateU64(weights.size());
  for (const auto& [name, map] : weights) LG_RETURN_IF_ERROR(hashWeightFile(h, name, *map, options, fp));
  fp.digest = h.finish();
  return fp;
}

}  // namespace

Result<ModelFingerprint> fingerprintModel(const std::string& dir, const ModelFingerprintOptions& options) {
  LG_ASSIGN_OR_RETURN(MappedFile config, MappedFile::open(dir + "/config.json"));
  // The weight files exactly as Model::load picks them.
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::set<std::string> shards;
  if (::access(index_path.c_str(), F_OK) == 0) {
    LG_ASSIGN_OR_RETURN(MappedFile index, MappedFile::open(index_path));
    LG_ASSIGN_OR_RETURN(auto weight_map, engine::parseWeightMap(index.view(), index_path));
    for (const auto& [tensor, file] : weight_map) shards.insert(file);
  } else {
    shards.insert("model.safetensors");
  }
  std::vector<MappedFile> maps;
  maps.reserve(shards.size());
  std::vector<std::pair<std::string, const MappedFile*>> weights;
  for (const std::string& shard : shards) {
    LG_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(dir + "/" + shard));
    maps.push_back(std::move(f));
    weights.emplace_back(shard, &maps.back());
  }
  return fingerprintParts(dir, config.view(), std::move(weights), options);
}

Result<ModelFingerprint> fingerprintModel(const engine::Model& model, const ModelFingerprintOptions& options) {
  std::vector<std::pair<std::string, const MappedFile*>> weights;
  for (const engine::SafetensorsFile& shard : model.shards()) {
    weights.emplace_back(std::filesystem::path(shard.path()).filename().string(), &shard.map());
  }
  return fingerprintParts(model.dir(), model.configText(), std::move(weights), options);
}

Digest latentIdentity(const Digest& model, const engine::LatentPool& pool, StoredDType stored) {
  const engine::LatentLayout& layout = pool.layout();
  return Sha256()
      .update(kIdentityTag)
      .update(model)
      .updateU64(engine::kLatentFormatVersion)
      .updateU64(pool.numerics().size())
      .update(pool.numerics())
      .updateU64(layout.dtype == engine::LatentDType::kF32 ? 32 : 16)
      .updateU64(static_cast<uint64_t>(stored))
      .updateU64(static_cast<uint64_t>(layout.layers))
      .updateU64(static_cast<uint64_t>(layout.latent_dim))
      .updateU64(static_cast<uint64_t>(layout.kv_lora_rank))
      .updateU64(static_cast<uint64_t>(layout.block_tokens))
      .finish();
}

}  // namespace lg::cache

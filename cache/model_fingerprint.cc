#include "cache/model_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace lg::cache {
namespace {

constexpr std::string_view kModelTag = "latentgate/model-fingerprint/v1";
constexpr std::string_view kIdentityTag = "latentgate/latent-identity/v1";
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the loader's limit too

// A file opened for pread; closes itself.
class File {
 public:
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return notFound("cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return unavailable("cannot stat " + path + ": " + std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
    return Status::ok();
  }
  uint64_t size() const { return size_; }
  Status readAt(uint64_t offset, uint8_t* out, size_t n) const {
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return dataLoss(path_ + ": short read at offset " + std::to_string(offset));
      out += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return Status::ok();
  }
  // Reads [offset, offset + n) and feeds it to `h` in 1 MiB pieces.
  Status hashRange(Sha256& h, uint64_t offset, uint64_t n, uint64_t& bytes_read) const {
    std::string buf(std::min<uint64_t>(n, uint64_t{1} << 20), '\0');
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      const ssize_t got = ::pread(fd_, buf.data(), want, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return dataLoss(path_ + ": short read at offset " + std::to_string(offset));
      h.update(std::string_view(buf.data(), static_cast<size_t>(got)));
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
      bytes_read += static_cast<uint64_t>(got);
    }
    return Status::ok();
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

void hashName(Sha256& h, std::string_view name) { h.updateU64(name.size()).update(name); }

// Whole small files (config, tokenizer, index): name, presence, size, bytes.
Status hashWholeFile(Sha256& h, const std::string& dir, const std::string& name, bool required, ModelFingerprint& fp) {
  hashName(h, name);
  const std::string path = dir + "/" + name;
  if (::access(path.c_str(), F_OK) != 0) {
    if (required) return notFound(path + ": not found");
    h.updateU64(0);  // absent
    return Status::ok();
  }
  File f;
  LG_RETURN_IF_ERROR(f.open(path));
  h.updateU64(1).updateU64(f.size());
  LG_RETURN_IF_ERROR(f.hashRange(h, 0, f.size(), fp.bytes_read));
  fp.files.push_back(name);
  return Status::ok();
}

// One weight file: size, the safetensors header, a sample of the data section.
Status hashWeightFile(Sha256& h, const std::string& dir, const std::string& name,
                      const ModelFingerprintOptions& o, ModelFingerprint& fp) {
  const std::string path = dir + "/" + name;
  File f;
  LG_RETURN_IF_ERROR(f.open(path));
  hashName(h, name);
  h.updateU64(f.size());
  if (f.size() < 8) return dataLoss(path + ": too short for a safetensors header");
  uint8_t le[8];
  LG_RETURN_IF_ERROR(f.readAt(0, le, 8));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | le[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > f.size()) {
    return dataLoss(path + ": safetensors header length " + std::to_string(header_len) + " does not fit the file");
  }
  // The header: every tensor's name, dtype, shape and offsets, and the metadata.
  Sha256 header_hash;
  uint64_t ignored = 0;
  LG_RETURN_IF_ERROR(f.hashRange(header_hash, 0, 8 + header_len, ignored));
  const Digest header_digest = header_hash.finish();
  h.update(header_digest);
  fp.bytes_read += 8 + header_len;

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = f.size() - data_start;
  if (data_len <= o.whole_data_limit) {
    h.updateU64(0);  // mode: whole
    LG_RETURN_IF_ERROR(f.hashRange(h, data_start, data_len, fp.bytes_read));
  } else {
    h.updateU64(1);  // mode: sampled
    const uint64_t edge = std::min(o.edge_bytes, data_len / 2);
    LG_RETURN_IF_ERROR(f.hashRange(h, data_start, edge, fp.bytes_read));
    LG_RETURN_IF_ERROR(f.hashRange(h, f.size() - edge, edge, fp.bytes_read));
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
      LG_RETURN_IF_ERROR(f.hashRange(h, off, window, fp.bytes_read));
    }
  }
  fp.files.push_back(name);
  return Status::ok();
}

}  // namespace

Result<ModelFingerprint> fingerprintModel(const std::string& dir, const ModelFingerprintOptions& options) {
  ModelFingerprint fp;
  Sha256 h;
  h.update(kModelTag).updateU64(kLatentFormatVersion);
  LG_RETURN_IF_ERROR(hashWholeFile(h, dir, "config.json", /*required=*/true, fp));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"}) {
    LG_RETURN_IF_ERROR(hashWholeFile(h, dir, name, /*required=*/false, fp));
  }
  // The weight files exactly as Model::load picks them.
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::set<std::string> shards;
  if (::access(index_path.c_str(), F_OK) == 0) {
    LG_RETURN_IF_ERROR(hashWholeFile(h, dir, "model.safetensors.index.json", true, fp));
    LG_ASSIGN_OR_RETURN(std::string text, readFile(index_path, size_t{256} << 20));
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return dataLoss(index_path + ": expected an object with \"weight_map\"");
    }
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) return dataLoss(index_path + ": weight_map['" + tensor + "'] is not a string");
      const std::string name = file.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "..") {
        return dataLoss(index_path + ": weight_map['" + tensor + "'] names an invalid file");
      }
      shards.insert(name);
    }
  } else {
    shards.insert("model.safetensors");
  }
  h.updateU64(shards.size());
  for (const std::string& shard : shards) LG_RETURN_IF_ERROR(hashWeightFile(h, dir, shard, options, fp));
  fp.digest = h.finish();
  return fp;
}

Digest latentIdentity(const Digest& model, const engine::LatentLayout& layout) {
  return Sha256()
      .update(kIdentityTag)
      .update(model)
      .updateU64(kLatentFormatVersion)
      .updateU64(layout.dtype == engine::LatentDType::kF32 ? 32 : 16)
      .updateU64(static_cast<uint64_t>(layout.layers))
      .updateU64(static_cast<uint64_t>(layout.latent_dim))
      .updateU64(static_cast<uint64_t>(layout.kv_lora_rank))
      .updateU64(static_cast<uint64_t>(layout.block_tokens))
      .finish();
}

}  // namespace lg::cache

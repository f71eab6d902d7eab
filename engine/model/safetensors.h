// Reading and writing the safetensors format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the tensor bytes. Files are memory-mapped; tensor data is never copied.
//
// Validation is strict because a checkpoint is untrusted input: the header must
// fit in the file, every tensor's byte range must lie inside the data section,
// match shape x dtype size exactly, and not overlap another tensor. Every error
// names the file and the tensor or field.
//
// Thread-safety: an opened SafetensorsFile is immutable; all methods are const
// and may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"
#include "engine/model/dtype.h"

namespace lg::engine {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;

  int64_t numel() const;
  std::string shapeString() const;  // "[2048, 192]"
};

// The parsed header of a safetensors file of `file_size` bytes.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Parses and validates the header of a whole file's bytes. `origin` names the
// file in error messages.
Result<SafetensorsHeader> parseSafetensorsHeader(std::string_view file_bytes, std::string_view origin);

class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  // Maps `path` read-only and validates its header. `for_streaming` maps it for
  // compute that streams the weights (2 MB aligned, huge-page advised; see
  // MappedFile::openForStreaming), optionally dropping its cached pages first.
  static Result<SafetensorsFile> open(const std::string& path, bool for_streaming = false, bool drop_cached = false);

  const TensorInfo* find(std::string_view name) const;
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // First byte of a tensor's data inside the map (valid while this object lives).
  const uint8_t* data(const TensorInfo& info) const { return map_.data() + header_.data_start + info.begin; }
  const std::string& path() const { return map_.path(); }
  size_t fileSize() const { return map_.size(); }
  const MappedFile& map() const { return map_; }

 private:
  MappedFile map_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

// One tensor to write. `fill` writes exactly numel x dtypeSize bytes into the
// span it is given; it is called once, in file order, so multi-GB checkpoints
// are produced without holding them in memory.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<void(std::span<uint8_t>)> fill;
};

// Writes a safetensors file atomically (temporary file, fsync, rename). The
// header is padded with spaces to a multiple of 8 bytes, as the reference
// writer does, so tensor data stays aligned.
Status writeSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace lg::engine

// Small file helpers shared by every module: whole-file reads, atomic writes and
// read-only memory maps (weights and tokenizer files are mapped, never copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg {

// Reads a whole file. Errors name the path and the OS reason.
Result<std::string> readFile(const std::string& path, size_t max_bytes = size_t{1} << 34);

// Writes `data` to `path` via a temporary file + fsync + rename, so readers see the
// old or the new content, never a torn file. `mode` applies to the new file.
Status writeFileAtomic(const std::string& path, std::string_view data, unsigned mode = 0644);

// What tells one version of a file from another without reading it: a file
// replaced by rename has a new inode, an in-place write a new mtime (and
// usually size). Taken from the descriptor a map was made from, so it names
// exactly the bytes mapped.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of the file at `path` now (following symlinks, as open does).
Result<FileIdentity> statIdentity(const std::string& path);

// A read-only, private memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);

  // For large read-mostly files streamed by compute (model weights): the map
  // starts on a 2 MB boundary and is advised MADV_HUGEPAGE, so the kernel can
  // map page-cache folios with 2 MB entries (fewer TLB misses, which are
  // expensive under virtualization). With `drop_cached`, clean cached pages of
  // the file that no process maps are dropped first, so they are read back as
  // large folios. Falls back to a plain map where unsupported.
  static Result<MappedFile> openForStreaming(const std::string& path, bool drop_cached);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }
  // The mapped file's identity when it was opened.
  const FileIdentity& identity() const { return identity_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  FileIdentity identity_;
};

}  // namespace lg

#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace lg::engine {
namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, which
// also bounds the JSON parser's memory on hostile files.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Status headerError(std::string_view origin, const std::string& what) {
  return dataLoss("safetensors '" + std::string(origin) + "': " + what);
}

Result<uint64_t> asIndex(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return invalidArgument("not a non-negative integer");
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<SafetensorsHeader> parseSafetensorsHeader(std::string_view bytes, std::string_view origin) {
  if (bytes.size() < 8) {
    return headerError(origin, "file is " + std::to_string(bytes.size()) + " bytes, too short for the header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (header_len > kMaxHeaderBytes) {
    return headerError(origin, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len > bytes.size() - 8) {
    return headerError(origin, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                                   std::to_string(bytes.size()) + " bytes)");
  }
  const std::string_view text = bytes.substr(8, header_len);
  json header = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return headerError(origin, "header is not valid JSON");
  if (!header.is_object()) return headerError(origin, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return headerError(origin, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) return headerError(origin, "__metadata__." + m.key() + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!entry.is_object()) return headerError(origin, where + "entry is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return headerError(origin, where + "missing string \"dtype\"");
    if (shape_it == entry.end() || !shape_it->is_array()) return headerError(origin, where + "missing array \"shape\"");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return headerError(origin, where + "\"data_offsets\" must be an array of two integers");
    }
    TensorInfo info;
    info.name = name;
    auto dtype = parseDType(dtype_it->get<std::string>());
    if (!dtype) return headerError(origin, where + "unknown dtype \"" + dtype_it->get<std::string>() + "\"");
    info.dtype = *dtype;
    uint64_t numel = 1;
    for (const json& d : *shape_it) {
      auto dim = asIndex(d);
      if (!dim.isOk() || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return headerError(origin, where + "shape entries must be non-negative integers");
      }
      if (__builtin_mul_overflow(numel, *dim, &numel)) return headerError(origin, where + "shape overflows");
      info.shape.push_back(static_cast<int64_t>(*dim));
    }
    auto begin = asIndex((*offsets_it)[0]);
    auto end = asIndex((*offsets_it)[1]);
    if (!begin.isOk() || !end.isOk()) return headerError(origin, where + "data_offsets must be non-negative integers");
    info.begin = *begin;
    info.end = *end;
    if (info.begin > info.end) return headerError(origin, where + "data_offsets begin > end");
    if (info.end > data_size) {
      return headerError(origin, where + "data_offsets [" + std::to_string(info.begin) + ", " +
                                     std::to_string(info.end) + ") run past the data section (" +
                                     std::to_string(data_size) + " bytes)");
    }
    uint64_t expected = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtypeSize(info.dtype)), &expected)) {
      return headerError(origin, where + "size overflows");
    }
    if (info.end - info.begin != expected) {
      return headerError(origin, where + "data_offsets span " + std::to_string(info.end - info.begin) +
                                     " bytes but shape " + info.shapeString() + " x " +
                                     std::string(dtypeName(info.dtype)) + " needs " + std::to_string(expected));
    }
    out.tensors.push_back(std::move(info));
  }
  // Overlap check: sort byte ranges; empty tensors occupy nothing.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : out.tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return headerError(origin, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                                     "' overlap in the data section");
    }
  }
  return out;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, bool for_streaming, bool drop_cached) {
  LG_ASSIGN_OR_RETURN(MappedFile map, for_streaming ? MappedFile::openForStreaming(path, drop_cached) : MappedFile::open(path));
  LG_ASSIGN_OR_RETURN(SafetensorsHeader header, parseSafetensorsHeader(map.view(), path));
  SafetensorsFile f;
  f.map_ = std::move(map);
  f.header_ = std::move(header);
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_.emplace(f.header_.tensors[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

namespace {

class FileWriter {
 public:
  explicit FileWriter(std::string path) : path_(std::move(path)) {}
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  Status open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return unavailable("cannot create '" + path_ + "': " + std::strerror(errno));
    return Status::ok();
  }
  Status write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return unavailable("cannot write '" + path_ + "': " + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::ok();
  }
  Status syncAndClose() {
    if (::fsync(fd_) != 0) return unavailable("cannot sync '" + path_ + "': " + std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    return Status::ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

Status writeSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return invalidArgument("tensor '" + t.name + "': negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = numel * dtypeSize(t.dtype);
    if (header.contains(t.name)) return invalidArgument("tensor '" + t.name + "' written twice");
    header[t.name] = {{"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  while (text.size() % 8 != 0) text.push_back(' ');
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Status status = [&]() -> Status {
    FileWriter out(tmp);
    LG_RETURN_IF_ERROR(out.open());
    LG_RETURN_IF_ERROR(out.write(len_bytes, 8));
    LG_RETURN_IF_ERROR(out.write(text.data(), text.size()));
    std::vector<uint8_t> buffer;
    for (size_t i = 0; i < tensors.size(); ++i) {
      buffer.assign(sizes[i], 0);
      if (tensors[i].fill) tensors[i].fill(std::span<uint8_t>(buffer));
      LG_RETURN_IF_ERROR(out.write(buffer.data(), buffer.size()));
    }
    return out.syncAndClose();
  }();
  if (!status.isOk()) {
    ::unlink(tmp.c_str());
    return status;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = unavailable("cannot rename onto '" + path + "': " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::ok();
}

}  // namespace lg::engine

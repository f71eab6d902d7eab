#include "common/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace lg {
namespace {

Status osError(std::string_view what, const std::string& path) {
  std::string m(what);
  m += " '" + path + "': " + std::strerror(errno);
  return errno == ENOENT ? notFound(std::move(m)) : unavailable(std::move(m));
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { if (fd_ >= 0) ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
 private:
  int fd_;
};

struct OpenedFile {
  int fd;
  size_t size;
  FileIdentity identity;
};

FileIdentity identityOf(const struct stat& st) {
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                      static_cast<uint64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// Opens `path` read-only and checks that it is a regular file. The caller owns
// the descriptor (wrap it in an FdCloser at once).
Result<OpenedFile> openRegular(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return osError("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = osError("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument("'" + path + "' is not a regular file");
  }
  return OpenedFile{fd, static_cast<size_t>(st.st_size), identityOf(st)};
}

}  // namespace

Result<FileIdentity> statIdentity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return osError("cannot stat", path);
  return identityOf(st);
}

Result<std::string> readFile(const std::string& path, size_t max_bytes) {
  LG_ASSIGN_OR_RETURN(OpenedFile file, openRegular(path));
  const int fd = file.fd;
  FdCloser closer(fd);
  if (file.size > max_bytes) {
    return invalidArgument("'" + path + "' is larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string out(file.size, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return osError("cannot read", path);
    if (n == 0) break;  // file shrank under us
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

Status writeFileAtomic(const std::string& path, std::string_view data, unsigned mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return osError("cannot create", tmp);
  {
    FdCloser closer(fd);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) { Status s = osError("cannot write", tmp); ::unlink(tmp.c_str()); return s; }
      done += static_cast<size_t>(n);
    }
    if (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0) {
      Status s = osError("cannot sync", tmp);
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = osError("cannot rename onto", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::ok();
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)), identity_(other.identity_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr && size_ > 0) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    identity_ = other.identity_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  LG_ASSIGN_OR_RETURN(OpenedFile file, openRegular(path));
  const int fd = file.fd;
  FdCloser closer(fd);
  MappedFile f;
  f.path_ = path;
  f.size_ = file.size;
  f.identity_ = file.identity;
  if (f.size_ == 0) return f;  // mmap of length 0 is invalid; an empty map is fine
  void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return osError("cannot map", path);
  f.data_ = static_cast<const uint8_t*>(p);
  return f;
}

Result<MappedFile> MappedFile::openForStreaming(const std::string& path, bool drop_cached) {
  LG_ASSIGN_OR_RETURN(OpenedFile file, openRegular(path));
  const int fd = file.fd;
  FdCloser closer(fd);
  MappedFile f;
  f.path_ = path;
  f.size_ = file.size;
  f.identity_ = file.identity;
  if (f.size_ == 0) return f;
  if (drop_cached) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // advisory; failure is harmless
  // Reserve size + 2 MB of address space, map the file at the first 2 MB
  // boundary inside it (file offset 0 must be huge-page aligned), give back the rest.
  constexpr size_t kHuge = size_t{2} << 20;
  void* reserve = ::mmap(nullptr, f.size_ + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return open(path);
  const uintptr_t start = reinterpret_cast<uintptr_t>(reserve);
  const uintptr_t aligned = (start + kHuge - 1) & ~(kHuge - 1);
  void* p = ::mmap(reinterpret_cast<void*>(aligned), f.size_, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    ::munmap(reserve, f.size_ + kHuge);
    return osError("cannot map", path);
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t map_end = (aligned + f.size_ + page - 1) & ~(page - 1);
  if (aligned > start) ::munmap(reserve, aligned - start);
  if (start + f.size_ + kHuge > map_end) ::munmap(reinterpret_cast<void*>(map_end), start + f.size_ + kHuge - map_end);
  ::madvise(p, f.size_, MADV_HUGEPAGE);
  f.data_ = static_cast<const uint8_t*>(p);
  return f;
}

}  // namespace lg

#include "cache/cache_secret.h"

#include <array>

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cache/cache_log.h"
#include "common/check.h"

namespace lg::cache {
namespace {

std::string errnoText() { return std::strerror(errno); }

}  // namespace

CacheSecret::CacheSecret() {
  hmac_ = std::shared_ptr<EVP_MAC>(EVP_MAC_fetch(nullptr, "HMAC", nullptr), EVP_MAC_free);
  LG_CHECK(hmac_ != nullptr, "OpenSSL has no HMAC");
}

Result<CacheSecret> CacheSecret::loadOrCreate(const std::string& path) {
  CacheSecret secret;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    // One byte more than the key, into a buffer that holds it, so that a
    // longer file is refused rather than truncated.
    std::array<uint8_t, kBytes + 1> buffer{};
    const ssize_t n = stat_ok ? ::read(fd, buffer.data(), buffer.size()) : -1;
    ::close(fd);
    if (!stat_ok || !S_ISREG(st.st_mode)) return invalidArgument("cache secret " + path + " is not a regular file");
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 0777));
      return permissionDenied("cache secret " + path + " may be read by group or others (mode " + mode +
                              "); make it 0600");
    }
    if (n != static_cast<ssize_t>(kBytes)) {
      return dataLoss("cache secret " + path + " is not " + std::to_string(kBytes) + " bytes long");
    }
    std::memcpy(secret.key_.data(), buffer.data(), kBytes);
    OPENSSL_cleanse(buffer.data(), buffer.size());
    return secret;
  }
  if (errno != ENOENT) return unavailable("cannot read cache secret " + path + ": " + errnoText());

  // First start: a fresh key, written to a private temporary file and linked
  // into place, so a crash never leaves a short key and a concurrent start
  // never sees one.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return unavailable("cannot create " + parent.string() + ": " + ec.message());
  }
  if (RAND_bytes(secret.key_.data(), static_cast<int>(kBytes)) != 1) {
    return unavailable("cache secret: the system has no randomness to offer");
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) return unavailable("cannot create cache secret " + tmp + ": " + errnoText());
  const bool written = ::write(out, secret.key_.data(), kBytes) == static_cast<ssize_t>(kBytes) && ::fsync(out) == 0;
  ::close(out);
  if (!written) {
    ::unlink(tmp.c_str());
    return unavailable("cannot write cache secret " + tmp + ": " + errnoText());
  }
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST) return loadOrCreate(path);  // another process made it first: use theirs
    return unavailable("cannot create cache secret " + path + ": " + std::strerror(err));
  }
  ::unlink(tmp.c_str());
  cacheLog()->info("created the cache secret {}", path);
  return secret;
}

CacheSecret CacheSecret::fromBytesForTest(std::string_view bytes) {
  CacheSecret secret;
  const Digest d = sha256(bytes);
  std::memcpy(secret.key_.data(), d.bytes.data(), kBytes);
  return secret;
}

Digest CacheSecret::mac(std::span<const std::string_view> parts) const {
  Digest out;
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(hmac_.get());
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest_name, 0), OSSL_PARAM_construct_end()};
  size_t len = 0;
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, key_.data(), key_.size(), params) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx, out.bytes.data(), &len, out.bytes.size()) == 1 && len == out.bytes.size();
  EVP_MAC_CTX_free(ctx);
  // A MAC that silently failed would authenticate nothing.
  LG_CHECK(ok, "HMAC-SHA-256 failed");
  return out;
}

Digest CacheSecret::keyedDigest(std::string_view domain, std::string_view data) const {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(static_cast<uint64_t>(domain.size()) >> (8 * i));
  const std::string_view parts[] = {std::string_view(reinterpret_cast<const char*>(le), 8), domain, data};
  return mac(parts);
}

}  // namespace lg::cache

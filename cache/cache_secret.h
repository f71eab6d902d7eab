// CacheSecret: the per-installation secret that authenticates what the cache
// writes to disk, and the keyed digests made with it.
//
// Stored blocks carry an HMAC-SHA-256 under this key (block_codec.h), so
// anyone who can write data/kv but cannot read the secret (a restored backup
// of the store alone, a shared volume) cannot plant latents for a team's
// prefix: block keys are computable from public inputs, the MAC is not.
// Namespace tags (which team a stored block belongs to, for purging) and
// system-prompt fingerprints (analytics) are keyed with it too, so whoever
// sees them cannot confirm a guessed team or prompt offline.
//
// The secret is 32 random bytes in a file of its own, created at first start
// with mode 0600 in a 0700 directory, outside the store (by default beside it:
// data/kv.key for data/kv; cache.secret_file moves it). An existing file that
// group or others may read is refused: a leaked key lets its reader forge.
//
// Thread-safety: immutable after construction; every method may be called
// from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "cache/fingerprint.h"
#include "common/status.h"

typedef struct evp_mac_st EVP_MAC;  // OpenSSL, kept out of this header

namespace lg::cache {

class CacheSecret {
 public:
  static constexpr size_t kBytes = 32;

  // Reads the secret at `path`, or creates it there if the file does not
  // exist. Errors: unreadable, wrong size, too open a mode, no randomness.
  static Result<CacheSecret> loadOrCreate(const std::string& path);
  // A fixed key, for tests and benchmarks.
  static CacheSecret fromBytesForTest(std::string_view bytes);

  // HMAC-SHA-256 of the concatenated parts.
  Digest mac(std::span<const std::string_view> parts) const;
  Digest mac(std::string_view data) const { return mac(std::span(&data, 1)); }
  // A domain-separated keyed digest of a name (a namespace key, a prompt).
  Digest keyedDigest(std::string_view domain, std::string_view data) const;

 private:
  CacheSecret();
  std::array<uint8_t, kBytes> key_{};
  std::shared_ptr<EVP_MAC> hmac_;  // the fetched algorithm, shared by copies
};

}  // namespace lg::cache

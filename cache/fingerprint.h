// Fingerprints: the identity of a cached latent block.
//
// Token ids are cut into blocks of `block_tokens`. Block i's key is
//   SHA-256(domain tag | namespace | model fingerprint | key of block i-1 | ids of block i)
// so a key names the whole prefix up to and including its block, within one
// namespace (a team, or a shared namespace an admin published to) and one model
// (architecture + weights + tokenizer). Two tenants never share keys, so one can
// neither hit nor time the other's cache; another model never reuses a block.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lg::cache {

struct Digest {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const Digest&) const = default;
  std::string hex() const;
  std::string_view view() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
};

struct DigestHash {
  size_t operator()(const Digest& d) const noexcept {
    size_t h;
    static_assert(sizeof h <= sizeof d.bytes);
    std::memcpy(&h, d.bytes.data(), sizeof h);  // already uniformly distributed
    return h;
  }
};

// SHA-256 of arbitrary bytes (OpenSSL; SHA-NI accelerated where available).
Digest sha256(std::string_view data);

// Incremental SHA-256 over several parts.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  // Starts over, reusing the context (cheaper than a new Sha256).
  Sha256& reset();
  Sha256& update(std::string_view data);
  Sha256& update(const Digest& d) { return update(d.view()); }
  Sha256& updateU64(uint64_t v);  // little-endian, so lengths can delimit fields
  Digest finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept out of this header
};

// Keys of the whole blocks of `ids` (a trailing partial block has no key).
std::vector<Digest> chainBlockKeys(std::string_view ns, const Digest& model, std::span<const int32_t> ids,
                                   int block_tokens);

// The key of one block given its predecessor's key (a zero Digest for block 0).
Digest blockKey(std::string_view ns, const Digest& model, const Digest& previous,
                std::span<const int32_t> block_ids);


}  // namespace lg::cache

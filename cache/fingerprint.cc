#include "cache/fingerprint.h"

#include <openssl/evp.h>

#include <cstring>

#include "common/check.h"
#include "common/hex.h"

namespace lg::cache {
namespace {

// Domain separation: a block key can never equal a system-prompt fingerprint or
// any other hash computed from the same bytes.
constexpr std::string_view kBlockTag = "latentgate/block/v1";

}  // namespace

std::string Digest::hex() const { return hexLower(bytes.data(), bytes.size()); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  LG_CHECK(ctx_ != nullptr, "EVP_MD_CTX_new failed");
  reset();
}

Sha256& Sha256::reset() {
  // A digest that silently failed to initialize would key every block alike.
  LG_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1, "SHA-256 init failed");
  return *this;
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Sha256& Sha256::update(std::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
  return *this;
}

Sha256& Sha256::updateU64(uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
  return update(std::string_view(reinterpret_cast<const char*>(le), 8));
}

Digest Sha256::finish() {
  Digest d;
  unsigned int len = 0;
  LG_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.bytes.data(), &len) == 1 && len == d.bytes.size(),
           "SHA-256 final failed");
  return d;
}

Digest sha256(std::string_view data) { return Sha256().update(data).finish(); }

namespace {

// One block's key on a digest context the caller reuses across a chain (a
// fresh EVP context per block cost more than hashing a 64-token block), with
// the ids hashed in one update from a little-endian buffer.
Digest blockKeyWith(Sha256& h, std::vector<uint8_t>& le, std::string_view ns, const Digest& model,
                    const Digest& previous, std::span<const int32_t> block_ids) {
  le.resize(block_ids.size() * 4);
  for (size_t i = 0; i < block_ids.size(); ++i) {
    const auto v = static_cast<uint32_t>(block_ids[i]);
    for (int b = 0; b < 4; ++b) le[4 * i + static_cast<size_t>(b)] = static_cast<uint8_t>(v >> (8 * b));
  }
  h.reset();
  h.update(kBlockTag).updateU64(ns.size()).update(ns).update(model).update(previous);
  h.updateU64(block_ids.size());
  h.update(std::string_view(reinterpret_cast<const char*>(le.data()), le.size()));
  return h.finish();
}

}  // namespace

Digest blockKey(std::string_view ns, const Digest& model, const Digest& previous,
                std::span<const int32_t> block_ids) {
  Sha256 h;
  std::vector<uint8_t> le;
  return blockKeyWith(h, le, ns, model, previous, block_ids);
}

std::vector<Digest> chainBlockKeys(std::string_view ns, const Digest& model, std::span<const int32_t> ids,
                                   int block_tokens) {
  LG_CHECK(block_tokens > 0, "chainBlockKeys: block_tokens ", block_tokens);
  std::vector<Digest> keys;
  const size_t n = ids.size() / static_cast<size_t>(block_tokens);
  keys.reserve(n);
  Sha256 h;
  std::vector<uint8_t> le;
  Digest previous;
  for (size_t b = 0; b < n; ++b) {
    previous = blockKeyWith(h, le, ns, model, previous, ids.subspan(b * block_tokens, block_tokens));
    keys.push_back(previous);
  }
  return keys;
}


}  // namespace lg::cache

// The stored form of one latent block in the disk tier.
//
// A stored block is self-describing, self-checking and authenticated:
//   header (fixed 128 bytes, little-endian) | token ids | payload | MAC (32)
// The header carries a magic, the format version, the stored dtype, the block
// geometry, the latent identity, the block's own chain key, a keyed tag of its
// namespace (so a team's blocks can be found and purged), the payload size and
// an XXH3-128 checksum over everything before the MAC. The MAC is HMAC-SHA-256
// under the installation secret (cache_secret.h) over the same bytes.
// decodeBlock() accepts a value only if every field equals what the caller
// expects (same identity, key, namespace, token ids, geometry, stored dtype),
// the checksum matches (a torn or rotted block) and the MAC matches (a block
// planted by someone who can write the store but not read the secret), so a
// corrupt, truncated, misfiled, stale or forged block is rejected (and
// recomputed), never served.
//
// Payload: the latent rows of all layers, [layers][block_tokens][kv_lora+rope],
// in the stored dtype. kInt8 adds one f32 scale per row (absmax/127) before the
// values, halving the size of BF16 at a small error (docs/cache.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cache/cache_secret.h"
#include "cache/fingerprint.h"
#include "common/status.h"

namespace lg::cache {

enum class StoredDType : uint8_t { kF32 = 1, kBF16 = 2, kInt8 = 3 };

std::string_view storedDTypeName(StoredDType dtype);

struct BlockGeometry {
  uint32_t layers = 0;
  uint32_t block_tokens = 0;
  uint32_t row_dim = 0;  // kv_lora_rank + qk_rope_head_dim (576 for real models)

  size_t values() const { return size_t{layers} * block_tokens * row_dim; }
  bool operator==(const BlockGeometry&) const = default;
};

// What a block must be to be served.
struct BlockIdentity {
  Digest key;
  Digest model;   // the latent identity (model_fingerprint.h latentIdentity)
  Digest ns_tag;  // the namespace's keyed tag; its first 16 bytes are stored
  std::span<const int32_t> ids;  // exactly block_tokens ids
};

// Why a stored value was rejected (labels of the rejected-blocks metric).
enum class RejectReason : uint8_t {
  kTruncated, kBadMagic, kVersion, kGeometry, kModel, kKey, kTokens, kChecksum, kDType, kNamespace, kForged
};
inline constexpr size_t kRejectReasonCount = 11;
std::string_view rejectReasonName(RejectReason reason);

// Bytes a stored block of this geometry takes.
size_t storedBlockBytes(const BlockGeometry& geometry, StoredDType dtype);

// latents: [layers][block_tokens][row_dim] f32 values.
std::string encodeBlock(const BlockGeometry& geometry, const BlockIdentity& identity,
                        std::span<const float> latents, StoredDType dtype, const CacheSecret& secret);

// Validates `value` against the expectation and writes its latents to `out`
// ([layers][block_tokens][row_dim]). On rejection returns DataLoss and sets
// *reason (if given); `out` may then hold garbage and must not be used.
Status decodeBlock(std::string_view value, const BlockGeometry& geometry, const BlockIdentity& expected,
                   StoredDType expected_dtype, const CacheSecret& secret, std::span<float> out,
                   RejectReason* reason = nullptr);

}  // namespace lg::cache

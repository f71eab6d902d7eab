// The stored form of one latent block in the disk tier.
//
// A stored block is self-describing and self-checking:
//   header (fixed 128 bytes, little-endian) | token ids | payload
// The header carries a magic, the format version, the stored dtype, the block
// geometry, the model fingerprint, the block's own chain key, the payload size
// and an XXH3-128 checksum over everything else. decodeBlock() accepts a value
// only if every field equals what the caller expects (same model, same key, same
// token ids, same geometry) and the checksum matches, so a corrupt, truncated,
// misfiled or stale block is rejected (and recomputed), never served.
//
// Payload: the latent rows of all layers, [layers][block_tokens][kv_lora+rope],
// in the stored dtype. kInt8 adds one f32 scale per row (absmax/127) before the
// values, halving the size of BF16 at a small error (docs/cache.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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
  Digest model;
  std::span<const int32_t> ids;  // exactly block_tokens ids
};

// Why a stored value was rejected (labels of the rejected-blocks metric).
enum class RejectReason : uint8_t { kTruncated, kBadMagic, kVersion, kGeometry, kModel, kKey, kTokens, kChecksum };
inline constexpr size_t kRejectReasonCount = 8;
std::string_view rejectReasonName(RejectReason reason);

// Bytes a stored block of this geometry takes.
size_t storedBlockBytes(const BlockGeometry& geometry, StoredDType dtype);

// latents: [layers][block_tokens][row_dim] f32 values.
std::string encodeBlock(const BlockGeometry& geometry, const BlockIdentity& identity,
                        std::span<const float> latents, StoredDType dtype);

// Validates `value` against the expectation and writes its latents to `out`
// ([layers][block_tokens][row_dim]). On rejection returns DataLoss and sets
// *reason (if given); `out` may then hold garbage and must not be used.
Status decodeBlock(std::string_view value, const BlockGeometry& geometry, const BlockIdentity& expected,
                   std::span<float> out, RejectReason* reason = nullptr);

}  // namespace lg::cache

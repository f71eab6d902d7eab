#include "cache/block_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // for a stack-allocated XXH3_state_t
#include <xxhash.h>

#include <openssl/crypto.h>

#include "common/bfloat16.h"

namespace lg::cache {
namespace {

constexpr char kMagic[4] = {'L', 'G', 'K', 'V'};
// Version 2 added the namespace tag and the MAC trailer.
constexpr uint16_t kFormatVersion = 2;
constexpr size_t kHeaderBytes = 128;
constexpr size_t kMacBytes = 32;  // HMAC-SHA-256 trailer

// Header layout (offsets in bytes). Everything is little-endian (x86/ARM hosts).
constexpr size_t kOffMagic = 0;        // 4
constexpr size_t kOffVersion = 4;      // u16
constexpr size_t kOffDType = 6;        // u8
constexpr size_t kOffLayers = 8;       // u32
constexpr size_t kOffTokens = 12;      // u32
constexpr size_t kOffRowDim = 16;      // u32
constexpr size_t kOffPayload = 24;     // u64 payload bytes
constexpr size_t kOffModel = 32;       // 32
constexpr size_t kOffKey = 64;         // 32
constexpr size_t kOffChecksum = 96;    // 16: XXH3-128 over the value before the MAC, this field zeroed
constexpr size_t kOffNamespace = 112;  // 16: the first bytes of the namespace's keyed tag
// Then the token ids, the payload, and the MAC: HMAC-SHA-256 under the
// installation secret over everything before it (checksum included).

template <typename T>
void put(std::string& s, size_t off, T v) { std::memcpy(s.data() + off, &v, sizeof v); }
template <typename T>
T get(std::string_view s, size_t off) { T v; std::memcpy(&v, s.data() + off, sizeof v); return v; }

size_t payloadBytes(const BlockGeometry& g, StoredDType dtype) {
  switch (dtype) {
    case StoredDType::kF32: return g.values() * 4;
    case StoredDType::kBF16: return g.values() * 2;
    case StoredDType::kInt8: return size_t{g.layers} * g.block_tokens * 4 + g.values();
  }
  return 0;
}

// `value` without its MAC trailer.
XXH128_hash_t checksum(std::string_view value) {
  // Hash the header with the checksum field zeroed, then the rest.
  char header[kHeaderBytes];
  std::memcpy(header, value.data(), kHeaderBytes);
  std::memset(header + kOffChecksum, 0, 16);
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, header, kHeaderBytes);
  XXH3_128bits_update(&state, value.data() + kHeaderBytes, value.size() - kHeaderBytes);
  return XXH3_128bits_digest(&state);
}

}  // namespace

std::string_view storedDTypeName(StoredDType dtype) {
  switch (dtype) {
    case StoredDType::kF32: return "f32";
    case StoredDType::kBF16: return "bf16";
    case StoredDType::kInt8: return "int8";
  }
  return "?";
}

std::string_view rejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kTruncated: return "truncated";
    case RejectReason::kBadMagic: return "bad_magic";
    case RejectReason::kVersion: return "version";
    case RejectReason::kGeometry: return "geometry";
    case RejectReason::kModel: return "model";
    case RejectReason::kKey: return "key";
    case RejectReason::kTokens: return "tokens";
    case RejectReason::kChecksum: return "checksum";
    case RejectReason::kDType: return "dtype";
    case RejectReason::kNamespace: return "namespace";
    case RejectReason::kForged: return "mac";
  }
  return "?";
}

size_t storedBlockBytes(const BlockGeometry& g, StoredDType dtype) {
  return kHeaderBytes + size_t{g.block_tokens} * 4 + payloadBytes(g, dtype) + kMacBytes;
}

std::string encodeBlock(const BlockGeometry& g, const BlockIdentity& identity, std::span<const float> latents,
                        StoredDType dtype, const CacheSecret& secret) {
  std::string value(storedBlockBytes(g, dtype), '\0');
  std::memcpy(value.data() + kOffMagic, kMagic, 4);
  put<uint16_t>(value, kOffVersion, kFormatVersion);
  put<uint8_t>(value, kOffDType, static_cast<uint8_t>(dtype));
  put<uint32_t>(value, kOffLayers, g.layers);
  put<uint32_t>(value, kOffTokens, g.block_tokens);
  put<uint32_t>(value, kOffRowDim, g.row_dim);
  put<uint64_t>(value, kOffPayload, payloadBytes(g, dtype));
  std::memcpy(value.data() + kOffModel, identity.model.bytes.data(), 32);
  std::memcpy(value.data() + kOffKey, identity.key.bytes.data(), 32);
  std::memcpy(value.data() + kOffNamespace, identity.ns_tag.bytes.data(), 16);
  std::memcpy(value.data() + kHeaderBytes, identity.ids.data(), identity.ids.size_bytes());

  char* payload = value.data() + kHeaderBytes + size_t{g.block_tokens} * 4;
  const size_t n = g.values();
  switch (dtype) {
    case StoredDType::kF32:
      std::memcpy(payload, latents.data(), n * 4);
      break;
    case StoredDType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = floatToBf16(latents[i]);
        std::memcpy(payload + 2 * i, &h, 2);
      }
      break;
    case StoredDType::kInt8: {
      const size_t rows = size_t{g.layers} * g.block_tokens;
      auto* scales = reinterpret_cast<char*>(payload);
      auto* q = reinterpret_cast<int8_t*>(payload + rows * 4);
      for (size_t r = 0; r < rows; ++r) {
        const float* row = latents.data() + r * g.row_dim;
        float absmax = 0.f;
        for (uint32_t i = 0; i < g.row_dim; ++i) absmax = std::max(absmax, std::fabs(row[i]));
        const float scale = absmax > 0.f ? absmax / 127.f : 1.f;
        std::memcpy(scales + 4 * r, &scale, 4);
        for (uint32_t i = 0; i < g.row_dim; ++i) {
          q[r * g.row_dim + i] = static_cast<int8_t>(std::lrintf(std::clamp(row[i] / scale, -127.f, 127.f)));
        }
      }
      break;
    }
  }
  const std::string_view body(value.data(), value.size() - kMacBytes);
  const XXH128_hash_t sum = checksum(body);
  put<uint64_t>(value, kOffChecksum, sum.low64);
  put<uint64_t>(value, kOffChecksum + 8, sum.high64);
  const Digest mac = secret.mac(body);
  std::memcpy(value.data() + body.size(), mac.bytes.data(), kMacBytes);
  return value;
}

Status decodeBlock(std::string_view value, const BlockGeometry& g, const BlockIdentity& expected,
                   StoredDType expected_dtype, const CacheSecret& secret, std::span<float> out, RejectReason* reason) {
  auto reject = [&](RejectReason r, std::string what) {
    if (reason != nullptr) *reason = r;
    return dataLoss("stored block " + expected.key.hex().substr(0, 16) + " rejected: " + what);
  };
  if (value.size() < kHeaderBytes) return reject(RejectReason::kTruncated, "shorter than its header");
  if (std::memcmp(value.data(), kMagic, 4) != 0) return reject(RejectReason::kBadMagic, "bad magic");
  if (get<uint16_t>(value, kOffVersion) != kFormatVersion) {
    return reject(RejectReason::kVersion, "format version " + std::to_string(get<uint16_t>(value, kOffVersion)));
  }
  const uint8_t raw_dtype = get<uint8_t>(value, kOffDType);
  if (raw_dtype < 1 || raw_dtype > 3) return reject(RejectReason::kVersion, "unknown dtype");
  const auto dtype = static_cast<StoredDType>(raw_dtype);
  // The identity covers the stored dtype, so this only trips on a block
  // misfiled under another identity; lossy blocks are never served as exact.
  if (dtype != expected_dtype) return reject(RejectReason::kDType, "stored as " + std::string(storedDTypeName(dtype)));
  const BlockGeometry stored{get<uint32_t>(value, kOffLayers), get<uint32_t>(value, kOffTokens),
                             get<uint32_t>(value, kOffRowDim)};
  if (!(stored == g)) return reject(RejectReason::kGeometry, "geometry differs from the model's");
  if (get<uint64_t>(value, kOffPayload) != payloadBytes(g, dtype) || value.size() != storedBlockBytes(g, dtype)) {
    return reject(RejectReason::kTruncated, "size does not match its header");
  }
  if (std::memcmp(value.data() + kOffModel, expected.model.bytes.data(), 32) != 0) {
    return reject(RejectReason::kModel, "model fingerprint differs");
  }
  if (std::memcmp(value.data() + kOffKey, expected.key.bytes.data(), 32) != 0) {
    return reject(RejectReason::kKey, "stored under another key");
  }
  if (expected.ids.size() != g.block_tokens ||
      std::memcmp(value.data() + kHeaderBytes, expected.ids.data(), expected.ids.size_bytes()) != 0) {
    return reject(RejectReason::kTokens, "token ids differ");
  }
  // The fast checksum first: a torn or bit-rotted block is told apart from a
  // forged one, and costs no MAC.
  const std::string_view body = value.substr(0, value.size() - kMacBytes);
  const XXH128_hash_t sum = checksum(body);
  if (get<uint64_t>(value, kOffChecksum) != sum.low64 || get<uint64_t>(value, kOffChecksum + 8) != sum.high64) {
    return reject(RejectReason::kChecksum, "checksum mismatch");
  }
  const Digest mac = secret.mac(body);
  if (CRYPTO_memcmp(mac.bytes.data(), value.data() + body.size(), kMacBytes) != 0) {
    return reject(RejectReason::kForged, "MAC mismatch (not written by this installation)");
  }
  // After the MAC: the tag is keyed with the same secret, so a block from
  // another installation is reported as forged, not misfiled.
  if (std::memcmp(value.data() + kOffNamespace, expected.ns_tag.bytes.data(), 16) != 0) {
    return reject(RejectReason::kNamespace, "stored for another namespace");
  }
  if (out.size() != g.values()) return internalError("decodeBlock: output span has the wrong size");

  const char* payload = value.data() + kHeaderBytes + size_t{g.block_tokens} * 4;
  const size_t n = g.values();
  switch (dtype) {
    case StoredDType::kF32:
      std::memcpy(out.data(), payload, n * 4);
      break;
    case StoredDType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, payload + 2 * i, 2);
        out[i] = bf16ToFloat(h);
      }
      break;
    case StoredDType::kInt8: {
      const size_t rows = size_t{g.layers} * g.block_tokens;
      const auto* q = reinterpret_cast<const int8_t*>(payload + rows * 4);
      for (size_t r = 0; r < rows; ++r) {
        float scale;
        std::memcpy(&scale, payload + 4 * r, 4);
        for (uint32_t i = 0; i < g.row_dim; ++i) out[r * g.row_dim + i] = scale * q[r * g.row_dim + i];
      }
      break;
    }
  }
  return Status::ok();
}

}  // namespace lg::cache

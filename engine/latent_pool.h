// LatentPool: the engine's paged store of MLA latents (tier 0 of the prefix
// cache), as everything outside the forward pass sees it. The prefix cache
// and SequenceBlocks see the engine only through this interface; a backend
// owns one pool (host memory for the CPU backend, device memory for CUDA).
//
// Layout. Block b holds, for every layer, the latents of block_tokens
// consecutive positions of one sequence: [layers][block_tokens][latent_dim]
// with latent_dim = kv_lora_rank + qk_rope_head_dim (normed c_kv, then the
// roped k_pe in interleaved pairs), in the pool's dtype. exportBlocks and
// importBlocks move exactly these bytes, so the cache can store and restore
// blocks without knowing where the pool's memory lives.
//
// Thread contract. Every method may be called from any thread, concurrently
// with each other and with the backend's forward pass, because each call
// touches only blocks its caller is entitled to:
//   - The caller holds a reference (BlockAllocator) to every block it names
//     for the whole call.
//   - exportBlocks reads blocks that nobody writes: full blocks, which are
//     read-only once filled (a forward pass writes only the positions after a
//     sequence's cached length, and never into a shared block).
//   - importBlocks and copyBlocks write only blocks the caller holds alone
//     (reference count 1) and has not handed to a forward pass yet: fresh
//     blocks a restore fills, or a sequence's private copy of a partial block.
//     Writing into a shared block is refused (InvalidArgument), in every build.
// The allocator is itself thread-safe (block_allocator.h). The layout and the
// format version never change after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"
#include "engine/block_allocator.h"

namespace lg::engine {

// Bump whenever the engine's latents change for the same checkpoint and
// tokens (kernels that round differently, a RoPE or norm fix, a new latent
// layout): every block computed by the old engine then misses in the prefix
// cache instead of being served (the cache keys blocks by it).
// 2: fresh prefill chunks attend in the standard form (attention_form.h),
// which rounds attention outputs differently, so the latents of layers >= 1
// differ from version 1's in the last bits.
inline constexpr uint32_t kLatentFormatVersion = 2;

enum class LatentDType { kF32, kBF16 };

struct LatentLayout {
  int32_t layers = 0;
  int32_t block_tokens = 0;
  int32_t kv_lora_rank = 0;
  int32_t latent_dim = 0;  // kv_lora_rank + qk_rope_head_dim
  LatentDType dtype = LatentDType::kBF16;

  size_t elementBytes() const { return dtype == LatentDType::kF32 ? 4 : 2; }
  // Element offset of (layer, slot) inside a block.
  size_t offset(int32_t layer, int32_t slot) const {
    return (static_cast<size_t>(layer) * block_tokens + slot) * static_cast<size_t>(latent_dim);
  }
  size_t blockValues() const { return static_cast<size_t>(layers) * block_tokens * static_cast<size_t>(latent_dim); }
  size_t blockBytes() const { return blockValues() * elementBytes(); }
  // Bytes one token occupies across all layers.
  size_t tokenBytes() const { return static_cast<size_t>(layers) * latent_dim * elementBytes(); }
};

struct BlockCopy {
  BlockId src = -1;
  BlockId dst = -1;
};

class LatentPool {
 public:
  virtual ~LatentPool() = default;

  virtual const LatentLayout& layout() const = 0;
  // The numerics class of the latents this pool holds: which backend and
  // kernels computed them ("cpu-fp32"). Backends whose arithmetic rounds
  // differently produce different latents for the same tokens; the prefix
  // cache keys blocks by this, so it never serves one backend's latents as
  // another's.
  virtual std::string_view numerics() const = 0;
  virtual BlockAllocator& allocator() = 0;
  virtual const BlockAllocator& allocator() const = 0;

  // Copies blocks ids[i] into bytes[i * blockBytes(), (i + 1) * blockBytes()).
  // `bytes` must be ids.size() * blockBytes() long. All or nothing.
  virtual Status exportBlocks(std::span<const BlockId> ids, std::span<uint8_t> bytes) const = 0;
  // The inverse: fills blocks ids[i] from bytes. Each block must be live and
  // held by the caller alone (reference count 1). All or nothing.
  virtual Status importBlocks(std::span<const BlockId> ids, std::span<const uint8_t> bytes) = 0;
  // Copies whole blocks inside the pool; each destination is held by the
  // caller alone. All or nothing.
  virtual Status copyBlocks(std::span<const BlockCopy> copies) = 0;
};

// The argument checks every pool implementation makes before a transfer, so
// that all of them refuse the same things with the same messages: every block
// live, `bytes` exactly ids.size() blocks long, and with `exclusive` (import,
// copy destinations) every block held by the caller alone.
Status checkBlockTransfer(const BlockAllocator& allocator, const LatentLayout& layout, std::string_view what,
                          std::span<const BlockId> ids, size_t bytes, bool exclusive);

}  // namespace lg::engine

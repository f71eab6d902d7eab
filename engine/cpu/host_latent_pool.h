// HostLatentPool: a LatentPool in host memory, the CPU backend's tier 0.
// Blocks live in one anonymous mapping committed lazily (pages are touched as
// blocks are first written), with transparent huge pages where the kernel
// offers them. Thread contract: latent_pool.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/latent_pool.h"

namespace lg::engine {

class HostLatentPool final : public LatentPool {
 public:
  // Maps num_blocks blocks of `layout`, for latents of the given numerics
  // class (latent_pool.h). ResourceExhausted if it cannot.
  static Result<std::unique_ptr<HostLatentPool>> create(const LatentLayout& layout, int32_t num_blocks,
                                                        std::string numerics);
  ~HostLatentPool() override;
  HostLatentPool(const HostLatentPool&) = delete;
  HostLatentPool& operator=(const HostLatentPool&) = delete;

  const LatentLayout& layout() const override { return layout_; }
  std::string_view numerics() const override { return numerics_; }
  BlockAllocator& allocator() override { return allocator_; }
  const BlockAllocator& allocator() const override { return allocator_; }
  Status exportBlocks(std::span<const BlockId> ids, std::span<uint8_t> bytes) const override;
  Status importBlocks(std::span<const BlockId> ids, std::span<const uint8_t> bytes) override;
  Status copyBlocks(std::span<const BlockCopy> copies) override;

  // The whole pool, for the backend's kernels (block b at b * blockBytes()).
  uint8_t* data() const { return data_; }
  uint8_t* blockData(BlockId id) const { return data_ + static_cast<size_t>(id) * layout_.blockBytes(); }

 private:
  HostLatentPool(const LatentLayout& layout, int32_t num_blocks, uint8_t* data, size_t size, std::string numerics);

  const LatentLayout layout_;
  const std::string numerics_;
  BlockAllocator allocator_;
  uint8_t* const data_;
  const size_t size_;
};

}  // namespace lg::engine

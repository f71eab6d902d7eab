// DeviceLatentPool: the latent block pool in device memory, the CUDA
// backend's tier 0 (engine/latent_pool.h has the layout and the thread
// contract). One cudaMalloc'd region, never managed memory: block b is at
// b * blockBytes().
//
// Transfers to and from the host (the prefix cache spilling blocks to the
// disk tier and restoring them) run on the pool's own copy stream through a
// pinned staging buffer, so they overlap with the forward passes on the
// compute stream; each call waits for its own copies only. Calls are
// serialized by a mutex (one staging buffer); the blocks they touch are the
// caller's by the pool's contract, so they never race with a forward pass.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/cuda/cuda_util.h"
#include "engine/latent_pool.h"

namespace lg::engine::cuda {

class DeviceLatentPool final : public LatentPool {
 public:
  static Result<std::unique_ptr<DeviceLatentPool>> create(const LatentLayout& layout, int32_t num_blocks,
                                                          std::string numerics);
  ~DeviceLatentPool() override = default;

  const LatentLayout& layout() const override { return layout_; }
  std::string_view numerics() const override { return numerics_; }
  BlockAllocator& allocator() override { return allocator_; }
  const BlockAllocator& allocator() const override { return allocator_; }
  Status exportBlocks(std::span<const BlockId> ids, std::span<uint8_t> bytes) const override;
  Status importBlocks(std::span<const BlockId> ids, std::span<const uint8_t> bytes) override;
  Status copyBlocks(std::span<const BlockCopy> copies) override;

  // The pool's device memory, for the kernels.
  void* data() const { return memory_.get(); }

 private:
  DeviceLatentPool(const LatentLayout& layout, int32_t num_blocks, std::string numerics)
      : layout_(layout), numerics_(std::move(numerics)), allocator_(num_blocks) {}

  const LatentLayout layout_;
  const std::string numerics_;
  BlockAllocator allocator_;
  DeviceBuffer memory_;
  mutable std::mutex mu_;
  mutable Stream copy_stream_;
  mutable PinnedBuffer staging_;  // guarded by mu_
};

}  // namespace lg::engine::cuda

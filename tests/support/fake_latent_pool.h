// FakeLatentPool: a LatentPool for cache tests that implements only the pool
// interface (no model, no forward pass) and keeps blocks in host memory.
// "Computing" a block writes a pattern derived from a content key, so a test
// can check that every block it is served holds exactly the latents of the
// tokens it claims to hold. Also compiled into the ThreadSanitizer test, so it
// uses nothing but the allocator, the shared transfer checks and memcpy.
#pragma once

#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cache/fingerprint.h"
#include "engine/latent_pool.h"

namespace lg::testing {

class FakeLatentPool final : public engine::LatentPool {
 public:
  FakeLatentPool(const engine::LatentLayout& layout, int32_t num_blocks, std::string numerics = "fake")
      : layout_(layout),
        numerics_(std::move(numerics)),
        allocator_(num_blocks),
        storage_(layout.blockBytes() * static_cast<size_t>(num_blocks)) {}

  const engine::LatentLayout& layout() const override { return layout_; }
  std::string_view numerics() const override { return numerics_; }
  engine::BlockAllocator& allocator() override { return allocator_; }
  const engine::BlockAllocator& allocator() const override { return allocator_; }

  Status exportBlocks(std::span<const engine::BlockId> ids, std::span<uint8_t> bytes) const override {
    LG_RETURN_IF_ERROR(engine::checkBlockTransfer(allocator_, layout_, "exportBlocks", ids, bytes.size(), false));
    if (failExport()) return internalError("injected export failure");
    for (size_t i = 0; i < ids.size(); ++i) std::memcpy(bytes.data() + i * bb(), data(ids[i]), bb());
    return Status::ok();
  }
  Status importBlocks(std::span<const engine::BlockId> ids, std::span<const uint8_t> bytes) override {
    LG_RETURN_IF_ERROR(engine::checkBlockTransfer(allocator_, layout_, "importBlocks", ids, bytes.size(), true));
    for (size_t i = 0; i < ids.size(); ++i) std::memcpy(data(ids[i]), bytes.data() + i * bb(), bb());
    return Status::ok();
  }
  Status copyBlocks(std::span<const engine::BlockCopy> copies) override {
    for (const engine::BlockCopy& c : copies) {
      LG_RETURN_IF_ERROR(engine::checkBlockTransfer(allocator_, layout_, "copyBlocks", std::span(&c.src, 1), bb(), false));
      LG_RETURN_IF_ERROR(engine::checkBlockTransfer(allocator_, layout_, "copyBlocks", std::span(&c.dst, 1), bb(), true));
    }
    for (const engine::BlockCopy& c : copies) std::memcpy(data(c.dst), data(c.src), bb());
    return Status::ok();
  }

  // Makes the next `n` exports fail (a device error, say).
  void failNextExportsForTest(int n) {
    std::lock_guard lock(mu_);
    fail_exports_ = n;
  }

  // The latents a block with content key `key` must hold (f32 pool only).
  std::vector<float> expected(const cache::Digest& key) const {
    std::vector<float> v(layout_.blockValues());
    uint32_t x = 0;
    std::memcpy(&x, key.bytes.data(), 4);
    for (size_t i = 0; i < v.size(); ++i) {
      x = x * 1664525u + 1013904223u;
      v[i] = static_cast<float>(x >> 8) / static_cast<float>(1 << 24) - 0.5f;
    }
    return v;
  }
  // "Computes" a block: writes expected(key) into it.
  void compute(engine::BlockId id, const cache::Digest& key) {
    const std::vector<float> v = expected(key);
    std::memcpy(data(id), v.data(), v.size() * 4);
  }
  bool holds(engine::BlockId id, const cache::Digest& key) const {
    const std::vector<float> v = expected(key);
    return std::memcmp(data(id), v.data(), v.size() * 4) == 0;
  }

 private:
  size_t bb() const { return layout_.blockBytes(); }
  uint8_t* data(engine::BlockId id) { return storage_.data() + static_cast<size_t>(id) * bb(); }
  const uint8_t* data(engine::BlockId id) const { return storage_.data() + static_cast<size_t>(id) * bb(); }
  bool failExport() const {
    std::lock_guard lock(mu_);
    if (fail_exports_ == 0) return false;
    --fail_exports_;
    return true;
  }

  engine::LatentLayout layout_;
  std::string numerics_;
  engine::BlockAllocator allocator_;
  std::vector<uint8_t> storage_;
  mutable std::mutex mu_;
  mutable int fail_exports_ = 0;  // guarded by mu_
};

inline engine::LatentLayout smallLayout(int block_tokens = 4) {
  engine::LatentLayout l;
  l.layers = 2;
  l.block_tokens = block_tokens;
  l.kv_lora_rank = 12;
  l.latent_dim = 16;
  l.dtype = engine::LatentDType::kF32;
  return l;
}

}  // namespace lg::testing

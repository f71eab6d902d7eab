// A Backend for cache tests that keeps blocks in host memory and computes
// nothing: "computing" a block writes a pattern derived from the block's chain
// key, so a test can check that every block it is served holds exactly the
// latents of the tokens it claims to hold. Also compiled into the
// ThreadSanitizer test, so it uses nothing but the allocator and memcpy.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cache/fingerprint.h"
#include "engine/backend.h"

namespace lg::cache::testing {

class MemoryBackend final : public engine::Backend {
 public:
  MemoryBackend(const engine::LatentLayout& layout, int32_t num_blocks)
      : layout_(layout), allocator_(num_blocks), storage_(layout.blockBytes() * static_cast<size_t>(num_blocks)) {}

  std::string_view name() const override { return "memory"; }
  const engine::Model& model() const override { std::abort(); }  // the cache never asks for it
  const engine::LatentLayout& latentLayout() const override { return layout_; }
  int maxContext() const override { return 1 << 20; }
  int64_t maxBatchTokens() const override { return 1 << 20; }
  engine::BlockAllocator& blocks() override { return allocator_; }
  const engine::BlockAllocator& blocks() const override { return allocator_; }
  Status run(const engine::ForwardPlan&, engine::ForwardOutput&) override { return unimplemented("memory backend"); }

  Status exportBlock(engine::BlockId id, std::span<uint8_t> bytes) const override {
    LG_RETURN_IF_ERROR(check(id, bytes.size()));
    std::memcpy(bytes.data(), data(id), bytes.size());
    return Status::ok();
  }
  Status importBlock(engine::BlockId id, std::span<const uint8_t> bytes) override {
    LG_RETURN_IF_ERROR(check(id, bytes.size()));
    std::memcpy(data(id), bytes.data(), bytes.size());
    return Status::ok();
  }
  Status copyBlock(engine::BlockId src, engine::BlockId dst) override {
    LG_RETURN_IF_ERROR(check(src, layout_.blockBytes()));
    LG_RETURN_IF_ERROR(check(dst, layout_.blockBytes()));
    std::memcpy(data(dst), data(src), layout_.blockBytes());
    return Status::ok();
  }

  // The latents a block with chain key `key` must hold (f32 pool only).
  std::vector<float> expected(const Digest& key) const {
    std::vector<float> v(layout_.blockBytes() / 4);
    uint32_t x = 0;
    std::memcpy(&x, key.bytes.data(), 4);
    for (size_t i = 0; i < v.size(); ++i) {
      x = x * 1664525u + 1013904223u;
      v[i] = static_cast<float>(x >> 8) / static_cast<float>(1 << 24) - 0.5f;
    }
    return v;
  }
  // "Computes" a block: writes expected(key) into it.
  void compute(engine::BlockId id, const Digest& key) {
    const std::vector<float> v = expected(key);
    std::memcpy(data(id), v.data(), v.size() * 4);
  }
  bool holds(engine::BlockId id, const Digest& key) const {
    const std::vector<float> v = expected(key);
    return std::memcmp(data(id), v.data(), v.size() * 4) == 0;
  }

 private:
  Status check(engine::BlockId id, size_t bytes) const {
    if (!allocator_.isLive(id)) return invalidArgument("block " + std::to_string(id) + " is not allocated");
    if (bytes != layout_.blockBytes()) return invalidArgument("wrong block size");
    return Status::ok();
  }
  uint8_t* data(engine::BlockId id) { return storage_.data() + static_cast<size_t>(id) * layout_.blockBytes(); }
  const uint8_t* data(engine::BlockId id) const {
    return storage_.data() + static_cast<size_t>(id) * layout_.blockBytes();
  }

  engine::LatentLayout layout_;
  engine::BlockAllocator allocator_;
  std::vector<uint8_t> storage_;
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

}  // namespace lg::cache::testing

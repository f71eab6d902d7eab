#include "engine/block_allocator.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace lg::engine {

BlockAllocator::BlockAllocator(int32_t num_blocks) : refs_(static_cast<size_t>(std::max(0, num_blocks)), 0) {
  free_.reserve(refs_.size());
  for (int32_t i = static_cast<int32_t>(refs_.size()) - 1; i >= 0; --i) free_.push_back(i);
}

Result<BlockId> BlockAllocator::allocate() {
  if (free_.empty()) {
    return resourceExhausted("latent block pool exhausted (" + std::to_string(capacity()) + " blocks in use)");
  }
  const BlockId id = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(id)] = 1;
  return id;
}

Status BlockAllocator::allocate(int32_t n, std::vector<BlockId>& out) {
  if (n > numFree()) {
    return resourceExhausted("latent block pool: " + std::to_string(n) + " blocks needed, " +
                             std::to_string(numFree()) + " free of " + std::to_string(capacity()));
  }
  for (int32_t i = 0; i < n; ++i) out.push_back(*allocate());
  return Status::ok();
}

void BlockAllocator::retain(BlockId id) {
  assert(isLive(id));
  ++refs_[static_cast<size_t>(id)];
}

void BlockAllocator::release(BlockId id) {
  assert(isLive(id));
  if (--refs_[static_cast<size_t>(id)] == 0) free_.push_back(id);
}

int32_t BlockAllocator::refCount(BlockId id) const {
  return id >= 0 && id < capacity() ? refs_[static_cast<size_t>(id)] : 0;
}

}  // namespace lg::engine

#include "engine/block_allocator.h"

#include <algorithm>
#include <string>

#include "common/check.h"

namespace lg::engine {

BlockAllocator::BlockAllocator(int32_t num_blocks)
    : capacity_(std::max(0, num_blocks)), refs_(std::make_unique<std::atomic<int32_t>[]>(static_cast<size_t>(capacity_))) {
  free_.reserve(static_cast<size_t>(capacity_));
  for (int32_t i = capacity_ - 1; i >= 0; --i) {
    refs_[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
    free_.push_back(i);
  }
}

int32_t BlockAllocator::numFree() const {
  std::lock_guard lock(mu_);
  return static_cast<int32_t>(free_.size());
}

bool BlockAllocator::tryPop(int32_t n, std::vector<BlockId>& out) {
  std::lock_guard lock(mu_);
  if (static_cast<size_t>(n) > free_.size()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(id)].store(1, std::memory_order_release);
    out.push_back(id);
  }
  return true;
}

int32_t BlockAllocator::reclaim(int32_t needed) {
  std::lock_guard lock(reclaim_mu_);
  return reclaimer_ ? reclaimer_(needed) : 0;
}

Result<BlockId> BlockAllocator::allocate() {
  std::vector<BlockId> one;
  LG_RETURN_IF_ERROR(allocate(1, one));
  return one[0];
}

Status BlockAllocator::allocate(int32_t n, std::vector<BlockId>& out) {
  if (n <= 0) return Status::ok();
  // Not enough free blocks: let the cache give back unpinned ones and retry
  // while it still finds some (other threads may take what it freed).
  for (int round = 0; round < 64; ++round) {
    if (tryPop(n, out)) return Status::ok();
    if (reclaim(std::max(1, n - numFree())) == 0) break;
  }
  if (tryPop(n, out)) return Status::ok();
  const int32_t free_now = numFree();
  return resourceExhausted("latent block pool: " + std::to_string(n) + " blocks needed, " + std::to_string(free_now) +
                           " free of " + std::to_string(capacity()));
}

// Reference-count mistakes are checked in every build: a count that rises
// from zero or goes below it means a block is on the free list while
// someone still reads it, or is handed out twice, and the pool would serve
// one sequence's latents to another.
void BlockAllocator::retain(BlockId id) {
  LG_CHECK(id >= 0 && id < capacity_, "retain of block ", id, " outside a pool of ", capacity_, " blocks");
  const int32_t before = refs_[static_cast<size_t>(id)].fetch_add(1, std::memory_order_acq_rel);
  LG_CHECK(before > 0, "retain of free block ", id, " (reference count was ", before, ")");
}

void BlockAllocator::release(BlockId id) {
  LG_CHECK(id >= 0 && id < capacity_, "release of block ", id, " outside a pool of ", capacity_, " blocks");
  const int32_t before = refs_[static_cast<size_t>(id)].fetch_sub(1, std::memory_order_acq_rel);
  LG_CHECK(before > 0, "release of free block ", id, " (reference count was ", before,
           "): a double release would put it on the free list twice");
  if (before == 1) {
    std::lock_guard lock(mu_);
    free_.push_back(id);
  }
}

int32_t BlockAllocator::refCount(BlockId id) const {
  return id >= 0 && id < capacity_ ? refs_[static_cast<size_t>(id)].load(std::memory_order_acquire) : 0;
}

void BlockAllocator::setReclaimer(Reclaimer reclaimer) {
  std::lock_guard lock(reclaim_mu_);
  reclaimer_ = std::move(reclaimer);
}

}  // namespace lg::engine

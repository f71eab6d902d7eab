// BlockAllocator: the bookkeeping half of the latent block pool (tier 0 of the
// prefix cache). A block holds the latents of block_tokens consecutive
// positions of one sequence for every layer; the backend owns the block
// storage, this class owns which blocks are free and who references them.
//
// Sharing rule ("only full blocks are shared"): a block with refCount() > 1 is
// read-only. Sequences share a prefix by retaining its full blocks; a partly
// filled tail block is copied into a fresh block rather than shared (see
// SequenceBlocks::forkPrefix), so no write ever lands in a shared block. The
// forward planner rejects a batch that would write into one.
//
// Thread-safety: not thread-safe; the engine thread owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace lg::engine {

using BlockId = int32_t;

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  int32_t capacity() const { return static_cast<int32_t>(refs_.size()); }
  int32_t numFree() const { return static_cast<int32_t>(free_.size()); }
  int32_t numUsed() const { return capacity() - numFree(); }

  // A fresh block with reference count 1; ResourceExhausted when none is free.
  Result<BlockId> allocate();
  // n fresh blocks, all or none.
  Status allocate(int32_t n, std::vector<BlockId>& out);
  // Adds a reference to a live block.
  void retain(BlockId id);
  // Drops a reference; the block returns to the free list at zero.
  void release(BlockId id);
  int32_t refCount(BlockId id) const;
  bool isLive(BlockId id) const { return id >= 0 && id < capacity() && refs_[static_cast<size_t>(id)] > 0; }

 private:
  std::vector<int32_t> refs_;
  std::vector<BlockId> free_;  // a stack: recently freed blocks are reused first (warm pages)
};

}  // namespace lg::engine

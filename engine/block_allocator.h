// BlockAllocator: the bookkeeping half of the latent block pool (tier 0 of the
// prefix cache). A block holds the latents of block_tokens consecutive
// positions of one sequence for every layer; the backend owns the block
// storage, this class owns which blocks are free and who references them.
//
// Sharing rule ("only full blocks are shared"): a block with refCount() > 1 is
// read-only. Sequences share a prefix by retaining its full blocks; a partly
// filled tail block is copied into a fresh block rather than shared (see
// SequenceBlocks::fork), so no write ever lands in a shared block. The forward
// planner rejects a batch that would write into one. The prefix cache holds
// one reference to every block it indexes, so a cached block that a request is
// using has refCount() >= 2 ("pinned"); one with refCount() == 1 is held by
// the cache alone and may be evicted.
//
// Reclaiming: when an allocation finds too few free blocks it calls the
// reclaimer (set by the prefix cache), which releases cached blocks nobody
// else uses, and tries again, as long as the reclaimer makes progress (other
// threads may take the blocks it frees). The reclaimer runs without the
// allocator's lock held, so it may call release(); it must not allocate.
//
// Thread-safety: every method may be called from any thread. Reference counts
// are atomics (retain and refCount take no lock); the free list is guarded by
// a mutex that is held only for a push or pop. A caller may retain() only a
// block it (or a structure it has locked) already holds a reference to, so a
// count never rises from zero behind the allocator's back.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace lg::engine {

using BlockId = int32_t;

class BlockAllocator {
 public:
  // Called with the number of blocks still missing; releases what it can and
  // returns how many blocks it released (0: nothing left to give).
  using Reclaimer = std::function<int32_t(int32_t needed)>;

  explicit BlockAllocator(int32_t num_blocks);

  int32_t capacity() const { return capacity_; }
  int32_t numFree() const;
  int32_t numUsed() const { return capacity() - numFree(); }

  // A fresh block with reference count 1; ResourceExhausted when none is free
  // (after asking the reclaimer).
  Result<BlockId> allocate();
  // n fresh blocks appended to `out`, all or none.
  Status allocate(int32_t n, std::vector<BlockId>& out);
  // Adds a reference to a live block. Retaining a free block or one outside
  // the pool stops the process (LG_CHECK, release builds too).
  void retain(BlockId id);
  // Drops a reference; the block returns to the free list at zero.
  // Releasing a free block (a double release) stops the process.
  void release(BlockId id);
  int32_t refCount(BlockId id) const;
  bool isLive(BlockId id) const { return refCount(id) > 0; }

  // Installs (or, with nullptr, removes) the reclaimer. Removing waits until a
  // reclaimer call in progress has returned, so its owner may then be destroyed.
  void setReclaimer(Reclaimer reclaimer);

 private:
  // Pops n blocks if that many are free; false otherwise. Takes mu_.
  bool tryPop(int32_t n, std::vector<BlockId>& out);
  int32_t reclaim(int32_t needed);

  const int32_t capacity_;
  std::unique_ptr<std::atomic<int32_t>[]> refs_;
  mutable std::mutex mu_;
  std::vector<BlockId> free_;  // guarded by mu_; a stack: recently freed blocks are reused first (warm pages)
  std::mutex reclaim_mu_;      // held while the reclaimer runs (serializes reclaims, guards reclaimer_)
  Reclaimer reclaimer_;        // guarded by reclaim_mu_
};

}  // namespace lg::engine

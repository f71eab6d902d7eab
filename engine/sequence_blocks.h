// SequenceBlocks: one sequence's block table. It owns one reference to each
// of its blocks and releases them when destroyed or reset, so a finished or
// failed request can never leak pool blocks.
//
// length() counts positions whose latents are in the blocks; a forward step
// for new tokens uses step(), then commit() once the step succeeded.
//
// fork(n) starts a new sequence that shares this one's first n positions:
// full blocks are shared by reference (the allocator's refcount), a partly
// filled last block is copied into a fresh block (copy on fork), so shared
// blocks are never written (see block_allocator.h).
//
// Thread-safety: one SequenceBlocks is used by one thread at a time. The
// allocator it points to is thread-safe, so sequences of different requests
// (and the prefix cache) may retain and release blocks from different threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"

namespace lg::engine {

class SequenceBlocks {
 public:
  // A sequence of at most max_context positions in `pool`.
  SequenceBlocks(LatentPool& pool, int32_t max_context) : pool_(&pool), max_context_(max_context) {}
  // A sequence in the backend's pool, bounded by its context.
  explicit SequenceBlocks(Backend& backend) : SequenceBlocks(backend.latentPool(), backend.maxContext()) {}
  ~SequenceBlocks() { reset(); }
  SequenceBlocks(SequenceBlocks&& other) noexcept;
  SequenceBlocks& operator=(SequenceBlocks&& other) noexcept;
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;

  int32_t length() const { return length_; }
  std::span<const BlockId> blocks() const { return blocks_; }

  // Ensures blocks cover positions [0, total). All or nothing.
  Status reserve(int32_t total);
  // A forward step for `tokens` at positions length() ..; reserves blocks first.
  Result<SequenceStep> step(std::span<const int32_t> tokens, LogitsWanted logits);
  // Marks n more positions as holding latents (after a successful forward).
  void commit(int32_t n) { length_ += n; }

  // A new sequence holding this one's first `prefix` positions (prefix <= length()).
  Result<SequenceBlocks> fork(int32_t prefix) const;

  // Takes over blocks whose references the caller already holds (a cache hit:
  // the prefix cache retains the blocks and hands them to a request, see
  // cache/prefix_cache.h PrefixLease::takeBlocks). `length` may end inside the
  // last block only if that block is not shared.
  void adopt(std::vector<BlockId> blocks, int32_t length);

  // Releases every block reference.
  void reset();

 private:
  LatentPool* pool_;
  int32_t max_context_;
  std::vector<BlockId> blocks_;
  int32_t length_ = 0;
};

}  // namespace lg::engine

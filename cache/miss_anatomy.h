// Why a lookup's blocks missed (docs/cache.md, "Why requests miss").
//
// A lookup hits the longest prefix of whole blocks it can; every full block
// after that, up to the last one a hit may cover, is computed again, and the
// cache can say why, block by block, from what it knows at the end of the
// lookup (PrefixCache::finishLookup):
//  - in flight: another request holds the block's claim (it is computing or
//    restoring it) and this one did not wait for it, or stopped waiting;
//  - recomputed: the block is on disk, but the cost model judged recomputing
//    it cheaper than restoring it;
//  - evicted: the block left the pool (and the disk tier, when there is one)
//    for room; EvictedBlocks remembers the most recent evictions, bounded;
//  - model changed: the block is on disk under an identity this cache had
//    before a restart (another checkpoint, another stored dtype): the disk
//    tier keeps up to kPriorIdentities of them (PrefixCache::create);
//  - new: none of these; never computed in the namespace, or forgotten.
// A block found ready after an earlier miss counts under the cause of the
// block before it: a prefix is reused whole or up to its first gap. The
// prompt's last block (partial, or holding the last token, which is always
// computed) is not a miss of the cache's and is not classified here.
//
// Thread-safety: LookupMisses is a plain value; EvictedBlocks is safe to
// call from any thread (one mutex, a leaf: it calls nothing while holding it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "cache/block_events.h"
#include "cache/fingerprint.h"

namespace lg::cache {

// Milliseconds on the steady clock: when EvictedBlocks records evictions.
int64_t steadyMillis();

enum class BlockMiss : uint8_t { kNew, kEvicted, kModelChanged, kInFlight, kRecomputed, kCount };
inline constexpr size_t kBlockMisses = static_cast<size_t>(BlockMiss::kCount);
std::string_view blockMissName(BlockMiss cause);  // "new", "evicted", "model_changed", "in_flight", "recomputed"
std::string_view blockTierName(BlockTier tier);   // "pool", "disk"

struct LookupMisses {
  int32_t first_block = -1;  // the first block that could have hit and did not; -1: none
  BlockMiss first_cause = BlockMiss::kNew;
  BlockTier evicted_tier = BlockTier::kPool;  // first_cause kEvicted: the tier it left last
  int64_t evicted_ago_ms = -1;                // ... how long before the lookup ended
  std::array<int32_t, kBlockMisses> blocks{};  // the missed blocks by cause
  std::array<int32_t, 2> evicted_from{};       // the evicted ones by the tier they left last (BlockTier)
  int32_t block_tokens = 0;                    // tokens per block
};

// The most recent evictions, by block key: which tier a block left last and
// when. Bounded: past `capacity` keys the oldest evictions are forgotten (a
// block evicted longer ago then reads as new).
//
// Recording runs for every block the pool evicts, under no lock of the
// cache's but its own, so it allocates nothing: an open-addressing table
// (linear probing, deletion by backward shift) of at least twice as many
// slots as keys, and a ring of the keys in the order they were recorded. The
// memory is taken at construction with calloc, so untouched pages cost
// nothing until evictions reach them.
class EvictedBlocks {
 public:
  explicit EvictedBlocks(size_t capacity);
  EvictedBlocks(const EvictedBlocks&) = delete;
  EvictedBlocks& operator=(const EvictedBlocks&) = delete;
  struct Eviction {
    BlockTier tier = BlockTier::kPool;
    int64_t at_ms = 0;  // steady clock, milliseconds
  };
  void record(const Digest& key, BlockTier tier, int64_t now_ms);
  std::optional<Eviction> find(const Digest& key) const;
  size_t size() const;
  size_t capacity() const { return capacity_; }
  // What one remembered eviction may cost: 2 to 4 table slots of 24 bytes
  // and its place in the ring (56 bytes at the default capacity; checked in
  // EvictedBlocksTest, tests/cache/prefix_cache_test.cc).
  static constexpr size_t kBytesPerKey = 104;

 private:
  struct Slot {
    uint64_t key = 0;     // 0: empty (a key of 0 is stored as 1)
    int64_t at_ms = 0;
    uint32_t place = 0;   // its latest record's place in the ring
    BlockTier tier = BlockTier::kPool;
  };
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  // 64 bits of a SHA-256 chain key, already uniform: two blocks share them
  // with probability ~n/2^64, and a clash only misnames a miss's cause.
  static uint64_t shortKey(const Digest& key) {
    const uint64_t k = DigestHash{}(key);
    return k == 0 ? 1 : k;
  }
  size_t slotOf(uint64_t key) const;  // its slot, or the empty one that ends its probe
  void eraseSlot(size_t at);          // backward shift: no tombstones

  const size_t capacity_;
  size_t mask_ = 0;  // table slots - 1
  mutable std::mutex mu_;
  std::unique_ptr<Slot[], Free> table_;    // guarded by mu_
  std::unique_ptr<uint64_t[], Free> ring_;  // guarded by mu_: keys in record order
  size_t next_ = 0;                         // guarded by mu_: the ring's next place (its oldest once full)
  size_t recorded_ = 0;                     // guarded by mu_: places used, up to capacity_
  size_t size_ = 0;                         // guarded by mu_: keys in the table
};

}  // namespace lg::cache

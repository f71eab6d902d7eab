// PrefixCache: the prefix index over the engine's block pool (tier 0) with the
// RocksDB disk tier behind it. docs/cache.md describes the design.
//
// A request calls acquire(namespace, ids) and gets a PrefixLease:
//   - the longest cached prefix in whole blocks, never the block holding the
//     last prompt token's position if that would leave nothing to compute
//     (hit tokens <= prompt_len - 1), found in tier 0 or restored from disk;
//   - references to those blocks, which the request adopts
//     (SequenceBlocks::adopt(lease.takeBlocks(), lease.cachedTokens()));
//   - claims on the prompt's remaining full blocks: another request that
//     needs them finds them "in flight" and waits (up to a timeout) until this
//     lease publishes them or is destroyed;
//   - what it did: hit blocks per tier, the restore-or-recompute decision.
// After the engine computed the rest, lease.publish(seq.blocks(), seq.length())
// registers the newly filled full blocks (it may be called after every
// prefill chunk; waiters wake as blocks appear).
//
// Tier 0. The index holds one allocator reference per indexed block; a block
// a request also holds (refCount above the index's own references) is pinned.
// Least recently used unpinned blocks are evicted when the indexed bytes
// exceed the budget, and when an allocation finds the pool empty (the
// allocator's reclaimer). A prefix's blocks are touched deepest first, so the
// first blocks of a prefix are the last to go.
//
// Disk tier. Evicted blocks not yet on disk are exported and queued to the
// write-back thread (dropped and counted when its queue is full; never
// blocking). A block reused write_through_hits times is written through, so a
// restart keeps hot prefixes. On a tier-0 miss the consecutive blocks present
// on disk are restored (RocksDB MultiGet in chunks, read, verified and
// imported by up to one worker per core) when the cost model says that
// beats recomputing them. A stored block whose header, tokens or checksum do
// not match is deleted, counted by reason and recomputed, never served.
//
// Namespaces. Keys are chained inside a namespace (the team by default), so
// tenants never share or time each other's blocks. publishToNamespace copies
// a cached prefix into another namespace on purpose (a shared namespace an
// admin publishes to); requests name the shared namespaces they may read in
// AcquireOptions and always publish into their own.
//
// Ownership and threads: the cache borrows the backend and the disk tier
// (both must outlive it) and registers itself as the allocator's reclaimer.
// Every method may be called from any thread. Leases must be destroyed
// before the cache. The cache calls Backend::exportBlock/importBlock from the
// calling threads, only on blocks no forward pass writes (full cached blocks,
// or fresh blocks it has not handed out yet).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_codec.h"
#include "cache/cache_stats.h"
#include "cache/cost_model.h"
#include "cache/disk_tier.h"
#include "cache/fingerprint.h"
#include "cache/write_back.h"
#include "common/status.h"
#include "engine/backend.h"

namespace lg::cache {

struct PrefixCacheOptions {
  uint64_t tier0_budget_bytes = 0;  // indexed bytes kept in the pool; 0: bounded by the pool only
  int write_through_hits = 2;       // write a block through after this many reuses; 0: when published; <0: never
  StoredDType stored_dtype = StoredDType::kF32;
  size_t write_back_queue_blocks = 64;
  size_t write_back_batch_blocks = 16;
  RestorePolicy restore_policy = RestorePolicy::kAuto;
  std::chrono::milliseconds in_flight_wait{60000};  // longest wait for another request's blocks
  CostModelOptions cost;
};

struct AcquireOptions {
  std::vector<std::string> shared_namespaces;  // also readable (published on purpose); the longest hit wins
  std::chrono::milliseconds in_flight_wait{-1};  // <0: the cache's default
  const RestorePolicy* restore_policy = nullptr;  // nullptr: the cache's default
};

class PrefixCache;

// One request's view of the cache. Move-only. The destructor releases block
// references not taken and abandons claims not published (waking waiters).
class PrefixLease {
 public:
  PrefixLease() = default;
  ~PrefixLease();
  PrefixLease(PrefixLease&& other) noexcept;
  PrefixLease& operator=(PrefixLease&& other) noexcept;
  PrefixLease(const PrefixLease&) = delete;
  PrefixLease& operator=(const PrefixLease&) = delete;

  int32_t cachedTokens() const { return hit_blocks_ * block_tokens_; }
  int32_t hitBlocks() const { return hit_blocks_; }
  int32_t tier0Blocks() const { return tier0_blocks_; }
  int32_t diskBlocks() const { return disk_blocks_; }  // restored from the disk tier
  int32_t claimedBlocks() const { return static_cast<int32_t>(claimed_.size()); }
  const Decision& decision() const { return decision_; }
  double restoreSeconds() const { return restore_seconds_; }
  uint64_t restoreBytes() const { return restore_bytes_; }
  bool waited() const { return waited_; }
  const std::string& hitNamespace() const { return hit_ns_; }

  // The hit blocks, with one reference each, now owned by the caller (for
  // SequenceBlocks::adopt). Only the first call returns them.
  std::vector<engine::BlockId> takeBlocks();

  // Registers the full blocks among blocks[0, filled_len / block_tokens)
  // that lie inside the prompt and are not indexed yet. `blocks` is the
  // request's block table; the index takes its own reference to each block
  // it registers. Publishing again with a longer filled_len adds the rest.
  Status publish(std::span<const engine::BlockId> blocks, int32_t filled_len);

 private:
  friend class PrefixCache;
  void reset();

  PrefixCache* cache_ = nullptr;
  uint64_t id_ = 0;
  std::string ns_;      // publishes go here
  std::string hit_ns_;  // where the hit blocks were found
  std::vector<int32_t> ids_;
  std::vector<Digest> keys_;  // ns_ chain keys of the prompt's full blocks
  std::vector<engine::BlockId> blocks_;  // references held for the caller
  bool taken_ = false;
  std::vector<int32_t> claimed_;  // block indices claimed in flight, not yet published
  int32_t published_upto_ = 0;
  int32_t block_tokens_ = 0;
  int32_t hit_blocks_ = 0;
  int32_t tier0_blocks_ = 0;
  int32_t disk_blocks_ = 0;
  Decision decision_;
  double restore_seconds_ = 0;
  uint64_t restore_bytes_ = 0;
  bool waited_ = false;
};

class PrefixCache final : public CacheMetricsSource {
 public:
  // `model` is the latent identity (latentIdentity() in model_fingerprint.h).
  // `disk` may be null (tier 0 only). Loads the cost model's last state from
  // the disk tier if it holds one.
  static Result<std::unique_ptr<PrefixCache>> create(engine::Backend& backend, DiskTier* disk, const Digest& model,
                                                     const PrefixCacheOptions& options);
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Never fails: whatever cannot be reused is computed by the caller.
  PrefixLease acquire(std::string_view ns, std::span<const int32_t> ids, const AcquireOptions& options = {});

  // Makes the cached blocks of ids' prefix in `from_ns` available under
  // `to_ns` too (same tier-0 blocks, no copy). Reports how many blocks
  // were published; NotFound if the first block is not in tier 0.
  Result<int32_t> publishToNamespace(std::string_view from_ns, std::string_view to_ns, std::span<const int32_t> ids);

  // A prefill of positions [begin, end) took `other_seconds` outside and
  // `attention_seconds` inside attention (feeds the cost model).
  void observePrefill(int64_t begin, int64_t end, double other_seconds, double attention_seconds);

  // Writes every indexed block that is not on disk yet, waits for the writer,
  // saves the cost model and, with flush_files, flushes RocksDB's memtables
  // into its files. For shutdown and `latentgate forward` (write-through at
  // exit). FailedPrecondition-like Unavailable when there is no disk tier.
  Status persistAll(bool flush_files = true);

  // Evicts up to max_blocks unpinned blocks (least recently used first),
  // writing them back; returns how many index entries were dropped.
  int32_t evictUnpinned(int32_t max_blocks);

  CacheStats snapshot() const override;
  const CostModel& costModel() const { return cost_; }
  WriteBack* writer() { return writer_.get(); }  // null without a disk tier
  int32_t blockTokens() const { return block_tokens_; }
  const Digest& model() const { return model_; }

 private:
  friend class PrefixLease;
  enum class State : uint8_t { kReady, kInFlight };
  struct Entry {
    State state = State::kReady;
    engine::BlockId block = -1;  // kReady
    uint64_t owner = 0;          // kInFlight: the claiming lease
    std::vector<int32_t> ids;    // the block's tokens (the stored header needs them)
    uint32_t hits = 0;
    bool on_disk = false;        // written or queued to the disk tier
    std::list<Digest>::iterator lru;
  };
  struct Victim {
    Digest key;
    std::vector<int32_t> ids;
    engine::BlockId block = -1;
    bool write_back = false;
  };
  // Buffers one restore worker reads and decodes into, reused by later
  // restores so that a restore allocates nothing (disk_tier.h, ReadBuffers).
  struct RestoreScratch {
    ReadBuffers reads;          // one MultiGet chunk
    std::vector<float> f32;     // one decoded block
    std::vector<uint8_t> pool;  // one block in the pool's dtype when that is not F32
  };

  PrefixCache(engine::Backend& backend, DiskTier* disk, const Digest& model, const PrefixCacheOptions& options);

  // All *Locked methods need mu_.
  void touchLocked(Entry& e, const Digest& key);
  void insertReadyLocked(const Digest& key, Entry& e, engine::BlockId block);
  void eraseLocked(std::unordered_map<Digest, Entry, DigestHash>::iterator it);
  bool pinnedLocked(engine::BlockId block) const;
  // Picks victims: entries until `blocks_to_free` blocks would be freed, or
  // until the indexed bytes fit the budget (blocks_to_free < 0).
  std::vector<Victim> evictLocked(int32_t blocks_to_free, int32_t max_entries);
  // Exports victims to the write-back queue, then drops the index's references.
  void finishEviction(std::vector<Victim>& victims);
  // Exports pinned blocks for write-through (the caller holds a reference).
  void writeThrough(const std::vector<Victim>& blocks);

  int32_t reclaim(int32_t needed);  // returns the blocks freed
  // Restores keys' blocks from the disk tier into fresh pool blocks; returns
  // the blocks of the longest verified prefix of `keys` (references owned by
  // the caller).
  std::vector<engine::BlockId> restore(std::span<const Digest> keys, std::span<const int32_t> ids, int32_t first_block,
                                       uint64_t* bytes_read);
  std::unique_ptr<RestoreScratch> takeScratch();
  void returnScratch(std::unique_ptr<RestoreScratch> scratch);
  void publish(PrefixLease& lease, std::span<const engine::BlockId> blocks, int32_t filled_len);
  void abandon(PrefixLease& lease);
  static void eraseClaim(PrefixLease& lease, int32_t block_index);
  void saveCostModel();

  engine::Backend& backend_;
  engine::BlockAllocator& allocator_;
  DiskTier* disk_;
  const Digest model_;
  const PrefixCacheOptions options_;
  const int32_t block_tokens_;
  const size_t block_bytes_;
  const BlockGeometry geometry_;
  CostModel cost_;
  std::unique_ptr<WriteBack> writer_;  // null without a disk tier

  mutable std::mutex mu_;
  std::condition_variable changed_cv_;  // a claim was published or abandoned
  std::unordered_map<Digest, Entry, DigestHash> index_;  // guarded by mu_
  std::list<Digest> lru_;                                // guarded by mu_: ready entries, most recent first
  std::vector<int32_t> index_refs_;                      // guarded by mu_: index references per block
  uint64_t indexed_blocks_ = 0;                          // guarded by mu_: blocks with index_refs_ > 0
  uint64_t in_flight_ = 0;                               // guarded by mu_
  uint64_t next_lease_ = 1;                              // guarded by mu_

  std::mutex scratch_mu_;
  std::vector<std::unique_ptr<RestoreScratch>> spare_scratch_;  // guarded by scratch_mu_

  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace lg::cache

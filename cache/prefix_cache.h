// PrefixCache: the prefix index over the engine's latent pool (tier 0) with
// the RocksDB disk tier behind it. docs/cache.md describes the design.
//
// A request calls lookup(namespace, ids) and gets a PrefixLease, which is
// either ready at once or pending; no call into the cache blocks its caller:
//   - ready at once when the hit comes from tier 0 alone: the longest cached
//     prefix in whole blocks (never the block holding the last prompt token's
//     position if that would leave nothing to compute: hit tokens <=
//     prompt_len - 1), pinned by references the request adopts
//     (SequenceBlocks::adopt(lease.takeBlocks(), lease.cachedTokens()));
//   - pending while blocks are restored from disk (on the cache's I/O pool,
//     io_pool.h) or while another request computes a block of the prefix
//     ("in flight"): rather than compute it twice, the lookup resumes when
//     that request publishes or abandons the block, or when its wait budget
//     runs out. The lease becomes ready on an I/O thread; the caller polls
//     ready() or is called back (LookupOptions::on_ready).
//   - A ready lease holds claims on the prompt's remaining full blocks, so
//     that concurrent requests for them wait for this one; and reports what
//     it did: hit blocks per tier, the restore-or-recompute decision.
// After the engine computed the rest, lease.publish(seq.blocks(), seq.length())
// registers the newly filled full blocks (it may be called after every
// prefill chunk; waiters resume as blocks appear). acquire() is lookup()
// followed by wait(), for callers that may block (the CLI, benchmarks).
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
// on disk are restored (RocksDB MultiGet in ~4 MB chunks, read, verified and
// imported by the I/O pool's threads) when the cost model says that beats
// recomputing them. A stored block whose header, tokens or checksum do not
// match is deleted, counted by reason and recomputed, never served.
//
// Namespaces (namespace.h). Keys are chained inside a namespace, so tenants
// never share, wait on or time each other's blocks. Every request reads and
// publishes its own TeamNamespace. publishToNamespace makes a team's cached
// prefix readable in a SharedNamespace on purpose (an admin action), and
// grantShared lets a team read a shared namespace: a request may name shared
// namespaces in LookupOptions, and those not granted to its team are ignored
// (and counted), never read. In-flight claims are made only in a request's
// own team namespace, so a wait can only ever be on one's own team's work or
// on a shared namespace one was granted.
//
// Ownership and threads: the cache borrows the latent pool and the disk tier
// (both must outlive it), owns its I/O pool and write-back thread, and
// registers itself as the allocator's reclaimer. Every method may be called
// from any thread. Leases must be destroyed before the cache (a pending one
// may be: its work finishes on the I/O pool, which the destructor drains).
// The cache exports and imports blocks under the pool's contract
// (latent_pool.h): it exports only full, indexed blocks it holds a reference
// to, and imports only into fresh blocks no request can see yet.
//
// Invariants checked in every build (LG_CHECK): an index reference is never
// dropped twice, and a claim is only ever turned into a block by its owner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_codec.h"
#include "cache/block_events.h"
#include "cache/cache_secret.h"
#include "cache/cache_stats.h"
#include "cache/cost_model.h"
#include "cache/disk_tier.h"
#include "cache/fingerprint.h"
#include "cache/io_pool.h"
#include "cache/miss_anatomy.h"
#include "cache/miss_ratio_curve.h"
#include "cache/namespace.h"
#include "cache/write_back.h"
#include "common/status.h"
#include "engine/latent_pool.h"

namespace lg::cache {

struct PrefixCacheOptions {
  uint64_t tier0_budget_bytes = 0;  // indexed bytes kept in the pool; 0: bounded by the pool only
  int write_through_hits = 2;       // write a block through after this many reuses; 0: when published; <0: never
  StoredDType stored_dtype = StoredDType::kF32;
  size_t write_back_queue_blocks = 64;
  size_t write_back_batch_blocks = 16;
  RestorePolicy restore_policy = RestorePolicy::kAuto;
  std::chrono::milliseconds in_flight_wait{60000};  // longest wait for another request's blocks
  int io_threads = 0;  // restore threads; 0: one per core, at most 4 (see prefix_cache.cc)
  CostModelOptions cost;
  // Authenticates stored blocks and keys namespace tags (cache_secret.h);
  // required with a disk tier.
  std::shared_ptr<const CacheSecret> secret;
  // Why the configured disk tier is missing (DiskTierOpen::error from
  // openDiskTierOrDegrade): snapshot() then reports DiskState::kDegraded.
  std::string disk_error;
  // Miss-ratio curves per tier (miss_ratio_curve.h): SHARDS over the block
  // accesses of lookups. sampling_rate 0: per tier, 1024 / the tier's size in
  // blocks (at most 1), so that half today's size holds 512 sampled keys.
  bool mrc_enabled = true;
  double mrc_sampling_rate = 0;
  size_t mrc_max_samples = 16384;  // per tier: the memory bound (<= 56 bytes a sample)
  // Why lookups miss (miss_anatomy.h): how many recent evictions are
  // remembered (about EvictedBlocks::kBytesPerKey each); 0: none, and every
  // evicted block reads as new.
  size_t evicted_blocks_tracked = size_t{1} << 18;
};

struct LookupOptions {
  std::vector<SharedNamespace> shared_namespaces;  // also read if granted to the team; the longest hit wins
  std::chrono::milliseconds in_flight_wait{-1};  // <0: the cache's default
  std::optional<RestorePolicy> restore_policy;   // empty: the cache's default
  // Called exactly once, when the lease becomes ready: inside lookup() when
  // nothing is pending, else on a cache I/O thread. Keep it short (post to
  // the scheduler's queue); it may call into the cache.
  std::function<void()> on_ready;
};

class PrefixCache;
struct LeaseState;  // prefix_cache_internal.h

// One request's view of the cache. Move-only. Destroying it releases the
// block references not taken and abandons claims not published (resuming
// waiters); destroying a pending lease cancels its lookup.
//
// Until ready(), only ready(), wait() and waitFor() may be called; the other
// accessors stop the process when called early (they would race with the
// I/O thread completing the lookup). An empty lease (default-constructed) is
// ready and holds nothing.
class PrefixLease {
 public:
  PrefixLease() = default;
  ~PrefixLease();
  PrefixLease(PrefixLease&& other) noexcept;
  PrefixLease& operator=(PrefixLease&& other) noexcept;
  PrefixLease(const PrefixLease&) = delete;
  PrefixLease& operator=(const PrefixLease&) = delete;

  bool ready() const;
  void wait() const;
  // False if the lease is still pending after `timeout`.
  bool waitFor(std::chrono::milliseconds timeout) const;

  int32_t cachedTokens() const;
  int32_t hitBlocks() const;
  int32_t tier0Blocks() const;
  int32_t diskBlocks() const;  // restored from the disk tier
  int32_t claimedBlocks() const;
  const Decision& decision() const;
  double restoreSeconds() const;
  uint64_t restoreBytes() const;
  bool waited() const;
  const std::string& hitNamespace() const;
  // Why the blocks after the hit were not hit (miss_anatomy.h).
  const LookupMisses& misses() const;

  // The hit blocks, with one reference each, now owned by the caller (for
  // SequenceBlocks::adopt). Only the first call returns them.
  std::vector<engine::BlockId> takeBlocks();

  // Registers the full blocks among blocks[0, filled_len / block_tokens)
  // that lie inside the prompt and are not indexed yet. `blocks` is the
  // request's block table; the index takes its own reference to each block
  // it registers. Publishing again with a longer filled_len adds the rest.
  // InvalidArgument on a pending or empty lease.
  Status publish(std::span<const engine::BlockId> blocks, int32_t filled_len);

  // Appends tokens the request generated to the ids the lease covers, so that
  // publish() also registers the blocks they fill: the next turn of a
  // conversation resends the reply and hits them. The generated blocks are
  // not claimed (no other request can be waiting for tokens not yet sampled).
  // InvalidArgument on a pending or empty lease.
  Status extend(std::span<const int32_t> generated);
  // Token ids the lease covers (the prompt, then what extend() appended).
  int32_t coveredTokens() const;

 private:
  friend class PrefixCache;
  PrefixLease(PrefixCache* cache, std::shared_ptr<LeaseState> state);
  const LeaseState& readyState() const;
  void reset();

  PrefixCache* cache_ = nullptr;
  std::shared_ptr<LeaseState> state_;  // shared with the I/O pool while pending
};

class PrefixCache final : public CacheMetricsSource {
 public:
  // `model` is the latent identity (latentIdentity() in model_fingerprint.h).
  // `disk` may be null (tier 0 only). Loads the cost model's last state from
  // the disk tier if it holds one.
  static Result<std::unique_ptr<PrefixCache>> create(engine::LatentPool& pool, DiskTier* disk, const Digest& model,
                                                     const PrefixCacheOptions& options);
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Never fails and never blocks: whatever cannot be reused is computed by
  // the caller. The lease may be pending (see the top of this file).
  PrefixLease lookup(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options = {});
  // lookup() and wait(): for callers that may block.
  PrefixLease acquire(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options = {});

  // An admin action: makes the cached blocks of ids' prefix in `from`
  // readable under `to` too (same tier-0 blocks, no copy). Reports how many
  // blocks were published; NotFound if the first block is not in tier 0.
  Result<int32_t> publishToNamespace(const TeamNamespace& from, const SharedNamespace& to,
                                     std::span<const int32_t> ids);
  // Calls `still_valid` now and then every `interval` on the I/O pool. Once it
  // fails (the model's files changed under the running process, say), the
  // cache stops serving under its identity for good: the error is logged
  // once, tier 0's index is dropped, lookups return no hits and claim
  // nothing, publishes and write-backs stop. Returns the first check's Status.
  Status guardIdentity(std::function<Status()> still_valid, std::chrono::milliseconds interval);
  bool stale() const { return stale_.load(std::memory_order_acquire); }
  // The disk tier's state (CacheStats::disk_state), without a snapshot's locks.
  DiskState diskState() const;

  // An admin action (a team deleted, a shared prompt withdrawn): removes every
  // block of the namespace from tier 0 and the disk tier at once, including
  // blocks still queued for writing. Blocks that requests hold stay theirs
  // until released (they are no longer indexed); blocks published after the
  // call are not purged (stop the team's requests first). Returns the blocks
  // removed per tier; Unavailable if the disk tier cannot be written (then
  // tier 0 is purged and the disk tier is not).
  struct PurgeCounts {
    uint64_t tier0 = 0;
    uint64_t disk = 0;
  };
  Result<PurgeCounts> purgeNamespace(const TeamNamespace& team);
  Result<PurgeCounts> purgeNamespace(const SharedNamespace& shared);

  // Admin actions: let `team` read `shared` (idempotent), or stop it.
  void grantShared(const SharedNamespace& shared, const TeamNamespace& team);
  void revokeShared(const SharedNamespace& shared, const TeamNamespace& team);

  // A prefill of positions [begin, end) took `other_seconds` outside and
  // `attention_seconds` inside attention (feeds the cost model).
  void observePrefill(int64_t begin, int64_t end, double other_seconds, double attention_seconds);

  // Writes every indexed block that is not on disk yet, waits for the writer,
  // saves the cost model and, with flush_files, flushes RocksDB's memtables
  // into its files. For shutdown and `latentgate forward` (write-through at
  // exit). Unavailable when there is no disk tier, or when blocks failed to
  // write while it ran (they stay marked as not on disk: a later call or
  // eviction writes them again).
  Status persistAll(bool flush_files = true);

  // Evicts up to max_blocks unpinned blocks (least recently used first),
  // writing them back; returns how many index entries were dropped.
  int32_t evictUnpinned(int32_t max_blocks);

  // Routers' view (block_events.h): from now on `sink` hears of every block
  // that becomes servable in tier 0 or on disk and of every one that stops
  // being so. Null: no one. Clear it before the sink is destroyed.
  void setBlockEvents(BlockEventSink* sink);
  // Tells the sink again of every block servable in tier 0, a prompt's first
  // blocks before the blocks after them, for subscribers that joined late.
  // Returns how many blocks it told of.
  size_t announceResident();

  CacheStats snapshot() const override;
  // Each tier's miss-ratio curve (tier 0, then the disk tier when there is
  // one); empty with mrc_enabled false. A short lock per tier.
  std::vector<MrcCurve> missRatioCurves() const override;
  const CostModel& costModel() const { return cost_; }
  WriteBack* writerForTest() { return writer_.get(); }  // null without a disk tier
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
    Digest ns_tag;               // its namespace's tag (stored with it; purge finds it by this)
    Digest parent;               // kReady: the block before it in its prompt, when has_parent
    bool has_parent = false;     // (what block events report, and re-announce chains by)
    uint32_t hits = 0;
    bool on_disk = false;        // written or queued to the disk tier
    std::list<Digest>::iterator lru;
  };
  using Index = std::unordered_map<Digest, Entry, DigestHash>;
  struct Victim {
    Digest key;
    Digest ns_tag;
    std::vector<int32_t> ids;
    engine::BlockId block = -1;
    bool write_back = false;
    Digest parent;
    bool has_parent = false;
    // What the writer stores (the latents still to be exported into it).
    WriteBackItem item(size_t block_bytes) && {
      return WriteBackItem{key, ns_tag, std::move(ids), std::vector<uint8_t>(block_bytes), parent, has_parent};
    }
  };
  // A victim of the ready entry `e` (its ids copied; `e` stays as it is).
  static Victim victimOf(const Digest& key, const Entry& e, bool write_back) {
    return Victim{key, e.ns_tag, e.ids, e.block, write_back, e.parent, e.has_parent};
  }
  // Buffers one restore task reads and decodes into, reused by later
  // restores so that a restore allocates nothing (disk_tier.h, ReadBuffers).
  struct RestoreScratch {
    ReadBuffers reads;          // one MultiGet chunk
    std::vector<float> f32;     // one decoded block
    std::vector<uint8_t> pool;  // one block in the pool's dtype when that is not F32
  };
  struct RestoreJob;
  using StatePtr = std::shared_ptr<LeaseState>;

  PrefixCache(engine::LatentPool& pool, DiskTier* disk, const Digest& model, const PrefixCacheOptions& options);

  // The private methods, grouped by the file that implements them (the
  // public ones are in the same files, by concern; docs/cache.md).

  // --- prefix_cache.cc: the index and eviction; every *Locked method needs mu_.
  void touchLocked(Entry& e, const Digest& key);
  // `parent`: the block before it in its prompt (null for a prompt's first).
  void insertReadyLocked(const Digest& key, Entry& e, engine::BlockId block, const Digest* parent);
  void eraseLocked(Index::iterator it);
  void dropIndexRefLocked(engine::BlockId block);
  bool pinnedLocked(engine::BlockId block) const;
  // Drops the ready entries `matches` selects from the index, without writing
  // them back; their index references go to `release`. Returns how many.
  uint64_t dropReadyLocked(const std::function<bool(const Entry&)>& matches, std::vector<engine::BlockId>& release);
  // Picks victims: entries until `blocks_to_free` blocks would be freed, or
  // until the indexed bytes fit the budget (blocks_to_free < 0).
  std::vector<Victim> evictLocked(int32_t blocks_to_free, int32_t max_entries);
  // Exports victims to the write-back queue, then drops the index's references.
  void finishEviction(std::vector<Victim>& victims);
  int32_t reclaim(int32_t needed);  // returns the blocks freed

  // --- prefix_cache_lease.cc: the end of a lease.
  // Cancels a lease (from its destructor): cleans up now, or lets the step
  // in progress do it.
  void releaseLease(const StatePtr& st);
  void cleanUp(LeaseState& st);
  void abandonClaimsLocked(LeaseState& st);

  // --- prefix_cache_lookup.cc: one lookup, as a sequence of steps that each
  // run without blocking.
  // Walks tier 0 from where the lookup stopped; registers a wait, starts a
  // restore or finishes.
  void advance(const StatePtr& st);
  void onWaitDeadline(const std::weak_ptr<LeaseState>& weak);
  // Counts, touches and evicts, then makes the lease ready (or cleans up a
  // cancelled one).
  void finishLookup(const StatePtr& st);
  // Resumes the lookups waiting for `key` (it was published or abandoned).
  void resumeWaitersLocked(const Digest& key);
  // Takes a parked lookup out of waiters_ (its deadline passed, or it was dropped).
  void unparkLocked(const StatePtr& st);

  // --- prefix_cache_restore.cc: the restore step of a lookup.
  void startRestore(const StatePtr& st, int32_t disk_end);
  void restoreChunk(const std::shared_ptr<RestoreJob>& job, size_t chunk);
  void finishRestore(const std::shared_ptr<RestoreJob>& job);
  std::unique_ptr<RestoreScratch> takeScratch();
  void returnScratch(std::unique_ptr<RestoreScratch> scratch);

  // --- prefix_cache_publish.cc
  void publish(LeaseState& st, std::span<const engine::BlockId> blocks, int32_t filled_len);
  // Exports pinned blocks for write-through (the caller holds a reference).
  void writeThrough(const std::vector<Victim>& blocks);

  // --- prefix_cache_namespaces.cc
  Digest namespaceTag(const std::string& ns_key) const;
  Result<PurgeCounts> purgeTag(const Digest& tag);

  // --- prefix_cache_identity.cc
  void checkIdentity();
  void markStale(const Status& why);

  // --- prefix_cache_anatomy.cc: why lookups miss (miss_anatomy.h).
  // The identities this cache's disk tier had before, newest first; records
  // this one's (nothing without a disk tier).
  void loadPriorIdentities();
  // Classifies the blocks [hit_blocks, max_hit) of a finished lookup; the
  // ones that read as new are checked against prior identities after the
  // lock (classifyAsOlderIdentity). Needs mu_.
  void classifyMissesLocked(LeaseState& st, std::vector<int32_t>& unexplained);
  void classifyAsOlderIdentity(LeaseState& st, const std::vector<int32_t>& unexplained);
  // What the disk tier reports passes through here: a removal is remembered
  // as an eviction, and every report goes on to the routers' sink (events_).
  struct DiskReports final : BlockEventSink {
    explicit DiskReports(PrefixCache& c) : cache(c) {}
    void blockStored(BlockTier tier, const Digest& key, const Digest* parent, std::span<const int32_t> ids) override;
    void blockRemoved(BlockTier tier, const Digest& key) override;
    PrefixCache& cache;
  };

  // --- prefix_cache_mrc.cc: the miss-ratio curves.
  void setUpCurves();
  // A completed lookup's block accesses, for each tier's curve.
  void recordAccesses(const LeaseState& st);
  MrcTierStats curveStats(const MissRatioCurve& curve, uint64_t today_blocks, uint64_t block_bytes,
                          std::span<const double> sizes, std::vector<double>* hit_ratio) const;

  // --- prefix_cache_persist.cc: the cost model's state in the disk tier
  // (nothing without one).
  void loadCostModel();
  void saveCostModel();

  engine::LatentPool& pool_;
  engine::BlockAllocator& allocator_;
  DiskTier* disk_;
  const Digest model_;
  const PrefixCacheOptions options_;
  const int32_t block_tokens_;
  const size_t block_bytes_;
  const BlockGeometry geometry_;
  CostModel cost_;
  std::unique_ptr<WriteBack> writer_;  // null without a disk tier
  // Miss-ratio curves (their own locks); null when off (disk: without a disk tier).
  std::unique_ptr<MissRatioCurve> mrc_tier0_;
  std::unique_ptr<MissRatioCurve> mrc_disk_;
  uint64_t mrc_tier0_blocks_ = 0;  // today's sizes, in blocks
  uint64_t mrc_disk_blocks_ = 0;
  int64_t mrc_started_ms_ = 0;     // steadyMillis() when the curves started counting
  EvictedBlocks evicted_;                 // its own lock
  std::vector<Digest> prior_identities_;  // fixed by create()
  DiskReports disk_reports_{*this};

  mutable std::mutex mu_;
  Index index_;                                   // guarded by mu_
  std::list<Digest> lru_;                         // guarded by mu_: ready entries, most recent first
  std::vector<int32_t> index_refs_;               // guarded by mu_: index references per block
  uint64_t indexed_blocks_ = 0;                   // guarded by mu_: blocks with index_refs_ > 0
  uint64_t in_flight_ = 0;                        // guarded by mu_
  uint64_t next_lease_ = 1;                       // guarded by mu_
  std::unordered_map<Digest, std::vector<StatePtr>, DigestHash> waiters_;  // guarded by mu_: by awaited key
  std::set<std::pair<std::string, std::string>> grants_;  // guarded by mu_: (shared key, team key)
  std::function<Status()> identity_check_;        // guarded by mu_
  std::chrono::milliseconds identity_interval_{0};  // guarded by mu_
  std::string stale_reason_;                      // guarded by mu_
  std::atomic<bool> stale_{false};                // set once, never cleared
  std::atomic<BlockEventSink*> events_{nullptr};

  std::mutex scratch_mu_;
  std::vector<std::unique_ptr<RestoreScratch>> spare_scratch_;  // guarded by scratch_mu_

  struct Counters;
  std::unique_ptr<Counters> counters_;
  // Last: destroyed (drained) first, while everything its tasks use exists.
  std::unique_ptr<IoPool> io_;
};

}  // namespace lg::cache

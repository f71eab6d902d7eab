// PrefixCache (prefix_cache.h) is implemented across cache/prefix_cache*.cc,
// one concern per file (docs/cache.md lists them; prefix_cache_internal.h
// holds what they share). This one: construction and destruction, the index
// over tier 0 with its reference counts and LRU list, and eviction (over
// budget, for the allocator's reclaimer, on request), whose victims are
// exported to the write-back queue before their last reference goes.
#include "cache/prefix_cache.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "cache/prefix_cache_internal.h"
#include "common/check.h"

namespace lg::cache {
namespace {

using engine::BlockId;

// I/O threads by default: one per core, at most this. More threads overlap
// more cold reads, but each needs its own buffers, which a fresh process
// must fault in first. Measured on 2 cores, 90 MB, the first restore in a
// new process (warm / cold page cache), with RocksDB's read checksums on:
// 1 worker 560 / 370 MB/s, 2: 790 / 580, 4: 520 / 480, 8: 330 / 310; with
// them off (the default): 1: 690 / 460, 2: 880 / 550, 4: 580 / 470, 8: 310 / 290.
constexpr int kMaxDefaultIoThreads = 4;

}  // namespace

PrefixCache::PrefixCache(engine::LatentPool& pool, DiskTier* disk, const Digest& model,
                         const PrefixCacheOptions& options)
    : pool_(pool),
      allocator_(pool.allocator()),
      disk_(disk),
      model_(model),
      options_(options),
      block_tokens_(pool.layout().block_tokens),
      block_bytes_(pool.layout().blockBytes()),
      geometry_{static_cast<uint32_t>(pool.layout().layers), static_cast<uint32_t>(pool.layout().block_tokens),
                static_cast<uint32_t>(pool.layout().latent_dim)},
      cost_(options.cost),
      evicted_(options.evicted_blocks_tracked),
      index_refs_(static_cast<size_t>(pool.allocator().capacity()), 0),
      counters_(std::make_unique<Counters>()) {
  if (disk_ != nullptr) {
    WriteBackOptions wo;
    wo.capacity_blocks = options.write_back_queue_blocks;
    wo.batch_blocks = options.write_back_batch_blocks;
    wo.stored_dtype = options.stored_dtype;
    wo.secret = options.secret;
    // Blocks the writer could not store (a full disk, say) are not on disk
    // after all: eviction or persistAll writes them again.
    auto on_failed = [this](std::span<const Digest> keys) {
      std::lock_guard lock(mu_);
      for (const Digest& key : keys) {
        auto it = index_.find(key);
        if (it != index_.end() && it->second.state == State::kReady) it->second.on_disk = false;
      }
    };
    writer_ = std::make_unique<WriteBack>(*disk_, pool.layout(), model, wo, std::move(on_failed));
    disk_->setBlockEvents(&disk_reports_);
  }
  setUpCurves();
}

Result<std::unique_ptr<PrefixCache>> PrefixCache::create(engine::LatentPool& pool, DiskTier* disk, const Digest& model,
                                                         const PrefixCacheOptions& options) {
  if (pool.layout().block_tokens < 1) return invalidArgument("prefix cache: block_tokens must be positive");
  if (options.write_back_queue_blocks < 1 || options.write_back_batch_blocks < 1) {
    return invalidArgument("prefix cache: write-back queue and batch sizes must be positive");
  }
  if (disk != nullptr && options.secret == nullptr) {
    return invalidArgument("prefix cache: a disk tier needs the cache secret (stored blocks are authenticated)");
  }
  if (options.io_threads < 0 || options.io_threads > 64) {
    return invalidArgument("prefix cache: io_threads must be in [0, 64], got " + std::to_string(options.io_threads));
  }
  auto cache = std::unique_ptr<PrefixCache>(new PrefixCache(pool, disk, model, options));
  // Without a disk tier the pool only resumes lookups that waited: one thread.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = options.io_threads > 0 ? options.io_threads
                      : disk == nullptr      ? 1
                                             : std::clamp(cores, 1, kMaxDefaultIoThreads);
  LG_ASSIGN_OR_RETURN(cache->io_, IoPool::create(threads));
  cache->loadCostModel();
  cache->loadPriorIdentities();
  PrefixCache* raw = cache.get();
  pool.allocator().setReclaimer([raw](int32_t needed) { return raw->reclaim(needed); });
  return cache;
}

PrefixCache::~PrefixCache() {
  // Restores and resumed lookups of leases already released finish first.
  if (io_ != nullptr) io_->shutdown();
  allocator_.setReclaimer(nullptr);  // waits for a reclaim in progress
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    LG_CHECK(in_flight_ == 0 && waiters_.empty(), "prefix cache destroyed with ", in_flight_, " claimed blocks and ",
             waiters_.size(), " awaited keys: leases must be destroyed before the cache");
    for (auto& [key, e] : index_) release.push_back(e.block);
    index_.clear();
    lru_.clear();
  }
  for (BlockId b : release) allocator_.release(b);
  if (writer_ != nullptr) saveCostModel();
  writer_.reset();  // writes what is queued
  if (disk_ != nullptr) disk_->setBlockEvents(nullptr);  // the disk tier outlives the cache
}

void PrefixCache::touchLocked(Entry& e, const Digest& key) {
  if (e.state != State::kReady) return;
  lru_.erase(e.lru);
  lru_.push_front(key);
  e.lru = lru_.begin();
}

void PrefixCache::insertReadyLocked(const Digest& key, Entry& e, BlockId block, const Digest* parent) {
  const bool was_claim = e.state == State::kInFlight;
  if (was_claim) --in_flight_;
  e.state = State::kReady;
  e.block = block;
  e.owner = 0;
  e.has_parent = parent != nullptr;
  e.parent = parent != nullptr ? *parent : Digest{};
  if (BlockEventSink* events = events_.load(std::memory_order_acquire)) events->blockStored(BlockTier::kPool, key, parent, e.ids);
  allocator_.retain(block);
  if (index_refs_[static_cast<size_t>(block)]++ == 0) ++indexed_blocks_;
  lru_.push_front(key);
  e.lru = lru_.begin();
  if (was_claim) resumeWaitersLocked(key);
}

void PrefixCache::dropIndexRefLocked(BlockId block) {
  int32_t& refs = index_refs_[static_cast<size_t>(block)];
  // An index reference dropped twice would release a block someone else holds.
  LG_CHECK(refs > 0, "index reference of block ", block, " dropped twice");
  if (--refs == 0) --indexed_blocks_;
}

void PrefixCache::eraseLocked(Index::iterator it) {
  Entry& e = it->second;
  const Digest key = it->first;
  const bool was_claim = e.state == State::kInFlight;
  if (was_claim) {
    --in_flight_;
  } else {
    lru_.erase(e.lru);
    dropIndexRefLocked(e.block);
    if (BlockEventSink* events = events_.load(std::memory_order_acquire)) events->blockRemoved(BlockTier::kPool, key);
  }
  index_.erase(it);
  if (was_claim) resumeWaitersLocked(key);
}

bool PrefixCache::pinnedLocked(BlockId block) const {
  return allocator_.refCount(block) > index_refs_[static_cast<size_t>(block)];
}

std::vector<PrefixCache::Victim> PrefixCache::evictLocked(int32_t blocks_to_free, int32_t max_entries) {
  std::vector<Victim> victims;
  const bool budget_mode = blocks_to_free < 0;
  if (budget_mode && options_.tier0_budget_bytes == 0) return victims;
  const uint64_t budget_blocks = budget_mode ? options_.tier0_budget_bytes / block_bytes_ : 0;
  int32_t freed = 0;
  auto it = lru_.end();
  while (it != lru_.begin() && static_cast<int32_t>(victims.size()) < max_entries) {
    if (budget_mode ? indexed_blocks_ <= budget_blocks : freed >= blocks_to_free) break;
    auto cur = std::prev(it);
    auto eit = index_.find(*cur);
    LG_CHECK(eit != index_.end() && eit->second.state == State::kReady, "LRU list names a key that is not a ready entry");
    Entry& e = eit->second;
    if (pinnedLocked(e.block)) {
      it = cur;  // skip: a request is using it
      continue;
    }
    if (index_refs_[static_cast<size_t>(e.block)] == 1) ++freed;
    victims.push_back(Victim{eit->first, e.ns_tag, std::move(e.ids), e.block, writer_ != nullptr && !e.on_disk,
                             e.parent, e.has_parent});
    eraseLocked(eit);  // erases *cur; `it` stays valid
  }
  return victims;
}

void PrefixCache::finishEviction(std::vector<Victim>& victims) {
  if (victims.empty()) return;
  // The victims left the index under mu_ while only the index referenced
  // them, so nobody else can reach them: export and release without the lock.
  // A stale cache writes nothing: blocks computed after the weights changed
  // would be stored under the old identity.
  const bool write = !stale();
  const int64_t now_ms = steadyMillis();
  for (Victim& v : victims) {
    // Remembered even when written back: a block on disk is found there
    // first, and once the disk tier drops it too, that is the eviction read.
    evicted_.record(v.key, BlockTier::kPool, now_ms);
    if (v.write_back && write) {
      WriteBackItem item = std::move(v).item(block_bytes_);
      if (pool_.exportBlocks(std::span(&v.block, 1), item.latents).isOk()) {
        (void)writer_->tryPush(std::move(item));
      } else {
        counters_->export_errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    allocator_.release(v.block);
  }
  counters_->tier0_evicted.fetch_add(victims.size(), std::memory_order_relaxed);
}

int32_t PrefixCache::reclaim(int32_t needed) {
  std::vector<Victim> victims;
  int32_t freed = 0;
  {
    std::lock_guard lock(mu_);
    victims = evictLocked(needed, std::numeric_limits<int32_t>::max());
    // A victim frees its block unless another index entry (an alias in a
    // shared namespace) still holds it.
    for (const Victim& v : victims) freed += index_refs_[static_cast<size_t>(v.block)] == 0 ? 1 : 0;
  }
  counters_->reclaimed.fetch_add(victims.size(), std::memory_order_relaxed);
  finishEviction(victims);
  return freed;
}

int32_t PrefixCache::evictUnpinned(int32_t max_blocks) {
  std::vector<Victim> victims;
  {
    std::lock_guard lock(mu_);
    victims = evictLocked(std::numeric_limits<int32_t>::max(), max_blocks);
  }
  finishEviction(victims);
  return static_cast<int32_t>(victims.size());
}

uint64_t PrefixCache::dropReadyLocked(const std::function<bool(const Entry&)>& matches,
                                      std::vector<BlockId>& release) {
  uint64_t dropped = 0;
  for (auto it = index_.begin(); it != index_.end();) {
    auto next = std::next(it);
    if (it->second.state == State::kReady && matches(it->second)) {
      release.push_back(it->second.block);
      eraseLocked(it);
      ++dropped;
    }
    it = next;
  }
  return dropped;
}

}  // namespace lg::cache

#include "cache/prefix_cache.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <limits>
#include <system_error>
#include <thread>

#include "cache/pool_latents.h"
#include "cache/cache_log.h"

namespace lg::cache {
namespace {

using engine::BlockId;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kCostModelKey = "cost_model/v1";
// Restores read this many stored bytes per MultiGet: the unit a restore
// worker reads, verifies and imports (and the size of its read buffers).
constexpr uint64_t kRestoreChunkBytes = uint64_t{4} << 20;
// Threads one restore reads and verifies with: one per core, at most this.
// More threads overlap more cold reads, but each needs its own buffers, which
// a fresh process must fault in first. Measured on 2 cores, 90 MB, the first
// restore in a new process (warm / cold page cache), with RocksDB's read
// checksums on: 1 worker 560 / 370 MB/s, 2: 790 / 580, 4: 520 / 480, 8: 330 /
// 310; with them off (the default): 1: 690 / 460, 2: 880 / 550, 4: 580 /
// 470, 8: 310 / 290.
constexpr size_t kMaxRestoreWorkers = 4;
// Restore scratch buffers kept for reuse (one per restore worker).
constexpr size_t kSpareScratch = 8;


double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

struct PrefixCache::Counters {
  std::atomic<uint64_t> lookups{0}, prompt_tokens{0};
  std::atomic<uint64_t> tier0_hit{0}, tier0_miss{0}, disk_hit{0}, disk_miss{0};
  std::atomic<uint64_t> tier0_evicted{0}, reclaimed{0}, waits{0}, wait_timeouts{0}, published{0};
  std::atomic<uint64_t> write_through{0};
  std::atomic<uint64_t> restored{0}, restore_bytes{0}, restore_nanos{0};
  std::array<std::atomic<uint64_t>, kRejectReasonCount> rejected{};
  std::atomic<uint64_t> decisions_restore{0}, decisions_recompute{0};
};

// ---------------------------------------------------------------- PrefixLease

PrefixLease::~PrefixLease() { reset(); }

PrefixLease::PrefixLease(PrefixLease&& other) noexcept { *this = std::move(other); }

PrefixLease& PrefixLease::operator=(PrefixLease&& other) noexcept {
  if (this == &other) return *this;
  reset();
  cache_ = std::exchange(other.cache_, nullptr);
  id_ = other.id_;
  ns_ = std::move(other.ns_);
  hit_ns_ = std::move(other.hit_ns_);
  ids_ = std::move(other.ids_);
  keys_ = std::move(other.keys_);
  blocks_ = std::move(other.blocks_);
  other.blocks_.clear();
  taken_ = other.taken_;
  claimed_ = std::move(other.claimed_);
  other.claimed_.clear();
  published_upto_ = other.published_upto_;
  block_tokens_ = other.block_tokens_;
  hit_blocks_ = other.hit_blocks_;
  tier0_blocks_ = other.tier0_blocks_;
  disk_blocks_ = other.disk_blocks_;
  decision_ = other.decision_;
  restore_seconds_ = other.restore_seconds_;
  restore_bytes_ = other.restore_bytes_;
  waited_ = other.waited_;
  return *this;
}

void PrefixLease::reset() {
  if (cache_ == nullptr) return;
  cache_->abandon(*this);
  if (!taken_) {
    for (BlockId b : blocks_) cache_->allocator_.release(b);
  }
  blocks_.clear();
  cache_ = nullptr;
}

std::vector<BlockId> PrefixLease::takeBlocks() {
  if (taken_) return {};
  taken_ = true;
  return blocks_;
}

Status PrefixLease::publish(std::span<const BlockId> blocks, int32_t filled_len) {
  if (cache_ == nullptr) return invalidArgument("publish: the lease is empty");
  if (filled_len < 0) return invalidArgument("publish: negative filled length " + std::to_string(filled_len));
  const int64_t full = std::min<int64_t>(filled_len, static_cast<int64_t>(ids_.size())) / block_tokens_;
  if (static_cast<int64_t>(blocks.size()) < full) {
    return invalidArgument("publish: " + std::to_string(blocks.size()) + " blocks cannot hold " +
                           std::to_string(filled_len) + " positions");
  }
  for (int64_t j = published_upto_; j < full; ++j) {
    if (!cache_->allocator_.isLive(blocks[static_cast<size_t>(j)])) {
      return invalidArgument("publish: block " + std::to_string(blocks[static_cast<size_t>(j)]) + " is not allocated");
    }
  }
  cache_->publish(*this, blocks, static_cast<int32_t>(full) * block_tokens_);
  return Status::ok();
}

// ---------------------------------------------------------------- PrefixCache

void PrefixCache::eraseClaim(PrefixLease& lease, int32_t j) {
  auto it = std::find(lease.claimed_.begin(), lease.claimed_.end(), j);
  if (it != lease.claimed_.end()) lease.claimed_.erase(it);
}

PrefixCache::PrefixCache(engine::Backend& backend, DiskTier* disk, const Digest& model,
                         const PrefixCacheOptions& options)
    : backend_(backend),
      allocator_(backend.blocks()),
      disk_(disk),
      model_(model),
      options_(options),
      block_tokens_(backend.latentLayout().block_tokens),
      block_bytes_(backend.latentLayout().blockBytes()),
      geometry_{static_cast<uint32_t>(backend.latentLayout().layers),
                static_cast<uint32_t>(backend.latentLayout().block_tokens),
                static_cast<uint32_t>(backend.latentLayout().latent_dim)},
      cost_(options.cost),
      index_refs_(static_cast<size_t>(backend.blocks().capacity()), 0),
      counters_(std::make_unique<Counters>()) {
  if (disk_ != nullptr) {
    WriteBackOptions wo;
    wo.capacity_blocks = options.write_back_queue_blocks;
    wo.batch_blocks = options.write_back_batch_blocks;
    wo.stored_dtype = options.stored_dtype;
    writer_ = std::make_unique<WriteBack>(*disk_, backend.latentLayout(), model, wo);
  }
}

Result<std::unique_ptr<PrefixCache>> PrefixCache::create(engine::Backend& backend, DiskTier* disk, const Digest& model,
                                                         const PrefixCacheOptions& options) {
  if (backend.latentLayout().block_tokens < 1) return invalidArgument("prefix cache: block_tokens must be positive");
  if (options.write_back_queue_blocks < 1 || options.write_back_batch_blocks < 1) {
    return invalidArgument("prefix cache: write-back queue and batch sizes must be positive");
  }
  auto cache = std::unique_ptr<PrefixCache>(new PrefixCache(backend, disk, model, options));
  if (disk != nullptr) {
    auto saved = disk->getMeta(kCostModelKey);
    if (saved.isOk() && saved->has_value()) {
      if (Status s = cache->cost_.deserialize(**saved); !s.isOk()) cacheLog()->warn("ignoring saved cost model: {}", s.message());
    }
  }
  PrefixCache* raw = cache.get();
  backend.blocks().setReclaimer([raw](int32_t needed) { return raw->reclaim(needed); });
  return cache;
}

PrefixCache::~PrefixCache() {
  allocator_.setReclaimer(nullptr);  // waits for a reclaim in progress
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    assert(in_flight_ == 0 && "leases must be destroyed before the cache");
    for (auto& [key, e] : index_) {
      if (e.state == State::kReady) release.push_back(e.block);
    }
    index_.clear();
    lru_.clear();
  }
  for (BlockId b : release) allocator_.release(b);
  if (writer_ != nullptr) saveCostModel();
  writer_.reset();  // writes what is queued
}

void PrefixCache::touchLocked(Entry& e, const Digest& key) {
  if (e.state != State::kReady) return;
  lru_.erase(e.lru);
  lru_.push_front(key);
  e.lru = lru_.begin();
}

void PrefixCache::insertReadyLocked(const Digest& key, Entry& e, BlockId block) {
  if (e.state == State::kInFlight) --in_flight_;
  e.state = State::kReady;
  e.block = block;
  e.owner = 0;
  allocator_.retain(block);
  if (index_refs_[static_cast<size_t>(block)]++ == 0) ++indexed_blocks_;
  lru_.push_front(key);
  e.lru = lru_.begin();
}

void PrefixCache::eraseLocked(std::unordered_map<Digest, Entry, DigestHash>::iterator it) {
  Entry& e = it->second;
  if (e.state == State::kReady) {
    lru_.erase(e.lru);
    if (--index_refs_[static_cast<size_t>(e.block)] == 0) --indexed_blocks_;
  } else {
    --in_flight_;
  }
  index_.erase(it);
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
    assert(eit != index_.end());
    Entry& e = eit->second;
    if (pinnedLocked(e.block)) {
      it = cur;  // skip: a request is using it
      continue;
    }
    if (index_refs_[static_cast<size_t>(e.block)] == 1) ++freed;
    victims.push_back(Victim{eit->first, std::move(e.ids), e.block, writer_ != nullptr && !e.on_disk});
    eraseLocked(eit);  // erases *cur; `it` stays valid
  }
  return victims;
}

void PrefixCache::finishEviction(std::vector<Victim>& victims) {
  if (victims.empty()) return;
  // The victims left the index under mu_ while only the index referenced
  // them, so nobody else can reach them: export and release without the lock.
  for (Victim& v : victims) {
    if (v.write_back) {
      WriteBackItem item{v.key, std::move(v.ids), std::vector<uint8_t>(block_bytes_)};
      if (backend_.exportBlock(v.block, item.latents).isOk()) (void)writer_->tryPush(std::move(item));
    }
    allocator_.release(v.block);
  }
  counters_->tier0_evicted.fetch_add(victims.size(), std::memory_order_relaxed);
}

void PrefixCache::writeThrough(const std::vector<Victim>& blocks) {
  for (const Victim& v : blocks) {
    WriteBackItem item{v.key, v.ids, std::vector<uint8_t>(block_bytes_)};
    bool queued = backend_.exportBlock(v.block, item.latents).isOk() && writer_->tryPush(std::move(item));
    if (queued) {
      counters_->write_through.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    std::lock_guard lock(mu_);  // not written after all: let eviction write it back
    auto it = index_.find(v.key);
    if (it != index_.end() && it->second.state == State::kReady && it->second.block == v.block) {
      it->second.on_disk = false;
    }
  }
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

PrefixLease PrefixCache::acquire(std::string_view ns, std::span<const int32_t> ids, const AcquireOptions& options) {
  PrefixLease lease;
  lease.cache_ = this;
  lease.ns_ = std::string(ns);
  lease.hit_ns_ = lease.ns_;
  lease.ids_.assign(ids.begin(), ids.end());
  lease.block_tokens_ = block_tokens_;
  const int32_t bt = block_tokens_;
  const int32_t n = static_cast<int32_t>(ids.size());
  const int32_t n_full = n / bt;
  const int32_t max_hit = n > 0 ? (n - 1) / bt : 0;  // the last prompt token is always computed
  // SHA-256 chains outside the lock.
  lease.keys_ = chainBlockKeys(ns, model_, ids, bt);
  std::vector<std::vector<Digest>> shared_keys;
  for (const std::string& s : options.shared_namespaces) {
    shared_keys.push_back(chainBlockKeys(s, model_, ids.first(static_cast<size_t>(max_hit) * bt), bt));
  }
  const auto wait = options.in_flight_wait.count() < 0 ? options_.in_flight_wait : options.in_flight_wait;
  const RestorePolicy policy = options.restore_policy ? *options.restore_policy : options_.restore_policy;
  const bool through_on_hit = writer_ != nullptr && options_.write_through_hits > 0;
  counters_->lookups.fetch_add(1, std::memory_order_relaxed);
  counters_->prompt_tokens.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);

  const std::vector<Digest>* hit_keys = &lease.keys_;
  std::vector<Victim> write_through;
  int32_t i = 0, disk_end = 0;
  {
    std::unique_lock lock(mu_);
    lease.id_ = next_lease_++;
    if (!shared_keys.empty()) {
      // The chain (own or shared namespace) with the longest available prefix.
      auto available = [&](const std::vector<Digest>& keys) {
        int32_t k = 0;
        while (k < max_hit) {
          auto it = index_.find(keys[static_cast<size_t>(k)]);
          const bool ready = it != index_.end() && it->second.state == State::kReady;
          if (!ready && !(it == index_.end() && disk_ != nullptr && disk_->contains(keys[static_cast<size_t>(k)]))) break;
          ++k;
        }
        return k;
      };
      int32_t best = available(lease.keys_);
      for (size_t s = 0; s < shared_keys.size(); ++s) {
        if (const int32_t a = available(shared_keys[s]); a > best) {
          best = a;
          hit_keys = &shared_keys[s];
          lease.hit_ns_ = options.shared_namespaces[s];
        }
      }
    }
    const auto deadline = Clock::now() + wait;
    while (i < max_hit) {
      const Digest& key = (*hit_keys)[static_cast<size_t>(i)];
      auto it = index_.find(key);
      if (it == index_.end()) break;
      Entry& e = it->second;
      if (e.state == State::kInFlight) {
        // Another request is computing or restoring this block: wait for it
        // to be published or abandoned rather than compute it twice.
        if (wait.count() <= 0) break;
        if (Clock::now() >= deadline) {
          counters_->wait_timeouts.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        if (!lease.waited_) counters_->waits.fetch_add(1, std::memory_order_relaxed);
        lease.waited_ = true;
        changed_cv_.wait_until(lock, deadline);
        continue;  // look at block i again
      }
      allocator_.retain(e.block);
      lease.blocks_.push_back(e.block);
      ++e.hits;
      if (through_on_hit && !e.on_disk && e.hits >= static_cast<uint32_t>(options_.write_through_hits)) {
        e.on_disk = true;
        write_through.push_back(Victim{key, e.ids, e.block, true});
      }
      ++i;
    }
    lease.tier0_blocks_ = i;
    disk_end = i;
    if (disk_ != nullptr) {
      while (disk_end < max_hit && index_.count((*hit_keys)[static_cast<size_t>(disk_end)]) == 0 &&
             disk_->contains((*hit_keys)[static_cast<size_t>(disk_end)])) {
        ++disk_end;
      }
    }
    // Claim the prompt's remaining full blocks that nobody holds, so that
    // concurrent requests wait for this one instead of computing them too.
    for (int32_t j = i; j < n_full; ++j) {
      const Digest& key = lease.keys_[static_cast<size_t>(j)];
      if (index_.count(key) != 0) continue;
      Entry e;
      e.state = State::kInFlight;
      e.owner = lease.id_;
      e.ids.assign(ids.begin() + static_cast<ptrdiff_t>(j) * bt, ids.begin() + static_cast<ptrdiff_t>(j + 1) * bt);
      index_.emplace(key, std::move(e));
      lease.claimed_.push_back(j);
      ++in_flight_;
    }
  }
  writeThrough(write_through);

  if (disk_end > i) {
    const uint64_t bytes = static_cast<uint64_t>(disk_end - i) * storedBlockBytes(geometry_, options_.stored_dtype);
    lease.decision_ = cost_.decide(policy, bytes, int64_t{i} * bt, int64_t{disk_end} * bt);
    if (lease.decision_.choice == RestoreChoice::kRestore) {
      counters_->decisions_restore.fetch_add(1, std::memory_order_relaxed);
      const auto t0 = Clock::now();
      uint64_t bytes_read = 0;
      std::vector<BlockId> restored =
          restore(std::span(*hit_keys).subspan(static_cast<size_t>(i), static_cast<size_t>(disk_end - i)), ids, i,
                  &bytes_read);
      lease.restore_seconds_ = secondsSince(t0);
      lease.restore_bytes_ = bytes_read;
      if (bytes_read > 0) cost_.observeRestore(bytes_read, lease.restore_seconds_);
      counters_->restored.fetch_add(restored.size(), std::memory_order_relaxed);
      counters_->restore_bytes.fetch_add(bytes_read, std::memory_order_relaxed);
      counters_->restore_nanos.fetch_add(static_cast<uint64_t>(lease.restore_seconds_ * 1e9), std::memory_order_relaxed);
      std::vector<BlockId> duplicates;
      {
        std::lock_guard lock(mu_);
        for (size_t k = 0; k < restored.size(); ++k) {
          const int32_t j = i + static_cast<int32_t>(k);
          const Digest& key = (*hit_keys)[static_cast<size_t>(j)];
          BlockId block = restored[k];
          auto it = index_.find(key);
          if (it == index_.end()) {
            Entry e;
            e.ids.assign(ids.begin() + static_cast<ptrdiff_t>(j) * bt, ids.begin() + static_cast<ptrdiff_t>(j + 1) * bt);
            it = index_.emplace(key, std::move(e)).first;
            insertReadyLocked(key, it->second, block);
          } else if (it->second.state == State::kInFlight && it->second.owner == lease.id_) {
            insertReadyLocked(key, it->second, block);
            eraseClaim(lease, j);
          } else if (it->second.state == State::kReady) {
            // Restored concurrently through a shared namespace: keep one copy.
            duplicates.push_back(block);
            block = it->second.block;
            allocator_.retain(block);
          }
          it->second.on_disk = true;
          lease.blocks_.push_back(block);
        }
        changed_cv_.notify_all();
      }
      for (BlockId b : duplicates) allocator_.release(b);
      lease.disk_blocks_ = static_cast<int32_t>(restored.size());
    } else {
      counters_->decisions_recompute.fetch_add(1, std::memory_order_relaxed);
    }
  }
  lease.hit_blocks_ = static_cast<int32_t>(lease.blocks_.size());

  const uint64_t tier0_tokens = static_cast<uint64_t>(lease.tier0_blocks_) * bt;
  const uint64_t hit_tokens = static_cast<uint64_t>(lease.hit_blocks_) * bt;
  counters_->tier0_hit.fetch_add(tier0_tokens, std::memory_order_relaxed);
  counters_->tier0_miss.fetch_add(static_cast<uint64_t>(n) - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_hit.fetch_add(hit_tokens - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_miss.fetch_add(static_cast<uint64_t>(n) - hit_tokens, std::memory_order_relaxed);

  std::vector<Victim> victims;
  {
    std::lock_guard lock(mu_);
    // Deepest first, so a prefix's first blocks are the most recently used.
    for (int32_t k = lease.hit_blocks_ - 1; k >= 0; --k) {
      auto it = index_.find((*hit_keys)[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
  }
  finishEviction(victims);
  return lease;
}

void PrefixCache::publish(PrefixLease& lease, std::span<const BlockId> blocks, int32_t filled_len) {
  const int32_t bt = block_tokens_;
  const int32_t n = std::min(filled_len / bt, static_cast<int32_t>(lease.keys_.size()));
  if (n <= lease.published_upto_) return;
  const bool through_now = writer_ != nullptr && options_.write_through_hits == 0;
  std::vector<Victim> write_through;
  std::vector<Victim> victims;
  {
    std::lock_guard lock(mu_);
    for (int32_t j = lease.published_upto_; j < n; ++j) {
      const Digest& key = lease.keys_[static_cast<size_t>(j)];
      const BlockId block = blocks[static_cast<size_t>(j)];
      auto it = index_.find(key);
      if (it == index_.end()) {
        Entry e;
        e.ids.assign(lease.ids_.begin() + static_cast<ptrdiff_t>(j) * bt,
                     lease.ids_.begin() + static_cast<ptrdiff_t>(j + 1) * bt);
        it = index_.emplace(key, std::move(e)).first;
        insertReadyLocked(key, it->second, block);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else if (it->second.state == State::kInFlight && it->second.owner == lease.id_) {
        insertReadyLocked(key, it->second, block);
        eraseClaim(lease, j);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else {
        continue;  // already indexed, or claimed by another request that will publish it
      }
      if (through_now) {
        it->second.on_disk = true;
        write_through.push_back(Victim{key, it->second.ids, block, true});
      }
    }
    for (int32_t k = n - 1; k >= 0; --k) {
      auto it = index_.find(lease.keys_[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    lease.published_upto_ = n;
    changed_cv_.notify_all();
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
  }
  writeThrough(write_through);  // the request still holds these blocks
  finishEviction(victims);
}

void PrefixCache::abandon(PrefixLease& lease) {
  if (lease.claimed_.empty()) return;
  std::lock_guard lock(mu_);
  for (int32_t j : lease.claimed_) {
    auto it = index_.find(lease.keys_[static_cast<size_t>(j)]);
    if (it != index_.end() && it->second.state == State::kInFlight && it->second.owner == lease.id_) eraseLocked(it);
  }
  lease.claimed_.clear();
  changed_cv_.notify_all();
}

std::unique_ptr<PrefixCache::RestoreScratch> PrefixCache::takeScratch() {
  {
    std::lock_guard lock(scratch_mu_);
    if (!spare_scratch_.empty()) {
      auto s = std::move(spare_scratch_.back());
      spare_scratch_.pop_back();
      return s;
    }
  }
  auto s = std::make_unique<RestoreScratch>();
  s->f32.resize(geometry_.values());
  if (backend_.latentLayout().dtype != engine::LatentDType::kF32) s->pool.resize(block_bytes_);
  return s;
}

void PrefixCache::returnScratch(std::unique_ptr<RestoreScratch> scratch) {
  std::lock_guard lock(scratch_mu_);
  if (spare_scratch_.size() < kSpareScratch) spare_scratch_.push_back(std::move(scratch));
}

std::vector<BlockId> PrefixCache::restore(std::span<const Digest> keys, std::span<const int32_t> ids,
                                          int32_t first_block, uint64_t* bytes_read) {
  std::vector<BlockId> blocks;
  int32_t want = static_cast<int32_t>(keys.size());
  // All or nothing per attempt; a full pool restores a shorter prefix.
  while (want > 0 && !allocator_.allocate(want, blocks).isOk()) want /= 2;
  if (want == 0) return blocks;
  keys = keys.first(static_cast<size_t>(want));

  // Chunks of ~4 MB, read and checked by one worker per core: RocksDB
  // verifies each blob's CRC32c on the reading thread, CPU work that scales
  // with cores, and cold reads overlap.
  // Worker r takes chunks r, r + W, ...
  const engine::LatentLayout& layout = backend_.latentLayout();
  const size_t stored = storedBlockBytes(geometry_, options_.stored_dtype);
  const size_t chunk = std::clamp<size_t>(kRestoreChunkBytes / std::max<size_t>(stored, 1), 1, 64);
  const size_t chunks = (keys.size() + chunk - 1) / chunk;
  const size_t workers =
      std::min(chunks, std::clamp<size_t>(std::thread::hardware_concurrency(), 1, kMaxRestoreWorkers));
  std::vector<uint8_t> imported(keys.size(), 0);
  std::atomic<size_t> first_failure{keys.size()};  // chunks past it are not read
  auto work = [&](size_t r) {
    std::unique_ptr<RestoreScratch> scratch = takeScratch();
    for (size_t c = r; c < chunks && c * chunk < first_failure.load(std::memory_order_relaxed); c += workers) {
      const size_t begin = c * chunk;
      const size_t n = std::min(chunk, keys.size() - begin);
      ReadBuffers& read = scratch->reads;
      disk_->multiGet(keys.subspan(begin, n), read);
      for (size_t k = 0; k < n; ++k) {
        const size_t idx = begin + k;
        auto fail = [&] {
          size_t seen = first_failure.load(std::memory_order_relaxed);
          while (idx < seen && !first_failure.compare_exchange_weak(seen, idx, std::memory_order_relaxed)) {
          }
        };
        if (!read.found[k]) {  // evicted or unreadable since the lookup
          fail();
          break;
        }
        const std::string& value = read.values[k];
        const size_t block_index = static_cast<size_t>(first_block) + idx;
        BlockIdentity identity{keys[idx], model_, ids.subspan(block_index * block_tokens_, block_tokens_)};
        RejectReason reason{};
        if (Status s = decodeBlock(value, geometry_, identity, scratch->f32, &reason); !s.isOk()) {
          counters_->rejected[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
          cacheLog()->warn("{}; recomputing", s.message());
          disk_->remove(keys[idx]);
          fail();
          break;
        }
        std::span<const uint8_t> pool_bytes;
        if (layout.dtype == engine::LatentDType::kF32) {
          pool_bytes = std::span(reinterpret_cast<const uint8_t*>(scratch->f32.data()), scratch->f32.size() * 4);
        } else {
          f32ToPool(layout, scratch->f32, scratch->pool);
          pool_bytes = scratch->pool;
        }
        // Each worker imports into its own blocks, which no request can see yet.
        if (!backend_.importBlock(blocks[idx], pool_bytes).isOk()) {
          fail();
          break;
        }
        imported[idx] = 1;
      }
    }
    returnScratch(std::move(scratch));
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < workers; ++r) {
    try {
      threads.emplace_back(work, r);
    } catch (const std::system_error&) {
      work(r);  // no thread available: do its share here
    }
  }
  work(0);
  for (std::thread& t : threads) t.join();
  // The restored prefix ends at the first block that was not imported.
  size_t ok = 0;
  while (ok < keys.size() && imported[ok]) ++ok;
  *bytes_read += static_cast<uint64_t>(ok) * stored;
  for (size_t k = ok; k < blocks.size(); ++k) allocator_.release(blocks[k]);
  blocks.resize(ok);
  return blocks;
}

Result<int32_t> PrefixCache::publishToNamespace(std::string_view from_ns, std::string_view to_ns,
                                                std::span<const int32_t> ids) {
  const std::vector<Digest> from = chainBlockKeys(from_ns, model_, ids, block_tokens_);
  const std::vector<Digest> to = chainBlockKeys(to_ns, model_, ids, block_tokens_);
  std::lock_guard lock(mu_);
  int32_t published = 0;
  for (size_t j = 0; j < from.size(); ++j) {
    auto src = index_.find(from[j]);
    if (src == index_.end() || src->second.state != State::kReady) break;
    auto dst = index_.find(to[j]);
    if (dst == index_.end()) {
      Entry e;
      e.ids = src->second.ids;
      dst = index_.emplace(to[j], std::move(e)).first;
      insertReadyLocked(to[j], dst->second, src->second.block);
    }
    ++published;
  }
  if (published == 0) return notFound("publishToNamespace: the prefix is not cached in namespace " + std::string(from_ns));
  changed_cv_.notify_all();
  return published;
}

void PrefixCache::observePrefill(int64_t begin, int64_t end, double other_seconds, double attention_seconds) {
  cost_.observePrefill(end - begin, CostModel::pairs(begin, end), other_seconds, attention_seconds);
}

void PrefixCache::saveCostModel() {
  if (disk_ == nullptr) return;
  if (Status s = disk_->putMeta(kCostModelKey, cost_.serialize()); !s.isOk()) {
    cacheLog()->warn("cannot save the cost model: {}", s.message());
  }
}

Status PrefixCache::persistAll(bool flush_files) {
  if (disk_ == nullptr || writer_ == nullptr) return unavailable("persistAll: the cache has no disk tier");
  std::vector<Victim> pending;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, e] : index_) {
      if (e.state != State::kReady || e.on_disk) continue;
      e.on_disk = true;
      allocator_.retain(e.block);  // keeps it alive and unevictable while exported
      pending.push_back(Victim{key, e.ids, e.block, true});
    }
  }
  for (Victim& v : pending) {
    WriteBackItem item{v.key, std::move(v.ids), std::vector<uint8_t>(block_bytes_)};
    Status s = backend_.exportBlock(v.block, item.latents);
    allocator_.release(v.block);
    if (!s.isOk()) return s;
    writer_->push(std::move(item));
  }
  counters_->write_through.fetch_add(pending.size(), std::memory_order_relaxed);
  writer_->drain();
  saveCostModel();
  const WriteBackStats ws = writer_->stats();
  if (ws.write_errors > 0) return unavailable("persistAll: " + std::to_string(ws.write_errors) + " blocks failed to write");
  return flush_files ? disk_->flush() : Status::ok();
}

CacheStats PrefixCache::snapshot() const {
  CacheStats s;
  {
    std::lock_guard lock(mu_);
    s.tier0.blocks = indexed_blocks_;
    s.tier0.bytes = indexed_blocks_ * block_bytes_;
    s.in_flight_blocks = in_flight_;
    for (const auto& [key, e] : index_) {
      if (e.state == State::kReady && pinnedLocked(e.block)) ++s.tier0_pinned_blocks;
    }
  }
  const Counters& c = *counters_;
  s.lookups = c.lookups.load();
  s.prompt_tokens = c.prompt_tokens.load();
  s.tier0.hit_tokens = c.tier0_hit.load();
  s.tier0.miss_tokens = c.tier0_miss.load();
  s.tier0.evicted_blocks = c.tier0_evicted.load();
  s.disk.hit_tokens = c.disk_hit.load();
  s.disk.miss_tokens = c.disk_miss.load();
  s.tier0_budget_bytes = options_.tier0_budget_bytes;
  s.reclaimed_blocks = c.reclaimed.load();
  s.in_flight_waits = c.waits.load();
  s.in_flight_wait_timeouts = c.wait_timeouts.load();
  s.published_blocks = c.published.load();
  s.write_through_blocks = c.write_through.load();
  s.restored_blocks = c.restored.load();
  s.restore_bytes = c.restore_bytes.load();
  s.restore_seconds = static_cast<double>(c.restore_nanos.load()) * 1e-9;
  for (size_t r = 0; r < kRejectReasonCount; ++r) s.rejected_blocks[r] = c.rejected[r].load();
  s.decisions_restore = c.decisions_restore.load();
  s.decisions_recompute = c.decisions_recompute.load();
  s.costs = cost_.estimates();
  if (writer_ != nullptr) {
    const WriteBackStats w = writer_->stats();
    s.write_back_queue_depth = w.queue_depth;
    s.write_back_queued_blocks = w.queued_blocks;
    s.write_back_written_blocks = w.written_blocks;
    s.write_back_written_bytes = w.written_bytes;
    s.write_back_dropped_blocks = w.dropped_blocks;
    s.write_back_errors = w.write_errors;
  }
  if (disk_ != nullptr) {
    const DiskTierStats d = disk_->stats();
    s.disk.blocks = d.blocks;
    s.disk.bytes = d.bytes;
    s.disk.evicted_blocks = d.evicted_blocks;
    s.disk_read_errors = d.read_errors;
    s.disk_recovered_from_corruption = d.recovered_from_corruption;
  }
  return s;
}

}  // namespace lg::cache

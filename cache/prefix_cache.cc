#include "cache/prefix_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <thread>

#include "cache/cache_log.h"
#include "cache/pool_latents.h"
#include "common/check.h"

namespace lg::cache {
namespace {

using engine::BlockId;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kCostModelKey = "cost_model/v1";
// Restores read this many stored bytes per MultiGet: the unit a restore
// task reads, verifies and imports (and the size of its read buffers).
constexpr uint64_t kRestoreChunkBytes = uint64_t{4} << 20;
// I/O threads by default: one per core, at most this. More threads overlap
// more cold reads, but each needs its own buffers, which a fresh process
// must fault in first. Measured on 2 cores, 90 MB, the first restore in a
// new process (warm / cold page cache), with RocksDB's read checksums on:
// 1 worker 560 / 370 MB/s, 2: 790 / 580, 4: 520 / 480, 8: 330 / 310; with
// them off (the default): 1: 690 / 460, 2: 880 / 550, 4: 580 / 470, 8: 310 / 290.
constexpr int kMaxDefaultIoThreads = 4;
// Restore scratch buffers kept for reuse (one per I/O thread).
constexpr size_t kSpareScratch = 8;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// Where one lookup stands. kRunning: a step (advance, a restore) is working
// on it, in lookup() or on an I/O thread; kWaiting: parked in waiters_ until
// the awaited block is published or abandoned, or the wait budget ends;
// kReady: the lease owns it; kDone: released and cleaned up.
enum class LeasePhase : uint8_t { kRunning, kWaiting, kReady, kDone };

struct LeaseState {
  // Fixed by lookup().
  uint64_t id = 0;
  std::string ns;                                // the team namespace's key: publishes go here
  std::vector<int32_t> ids;
  std::vector<Digest> keys;                      // ns chain keys of the prompt's full blocks
  std::vector<std::vector<Digest>> shared_keys;  // per readable shared namespace, up to max_hit
  const std::vector<Digest>* hit_keys = nullptr;  // `keys` or one of `shared_keys`
  std::string hit_ns;                            // where the hit blocks are found
  Digest ns_tag;                                 // namespaceTag(ns)
  Digest hit_ns_tag;                             // namespaceTag(hit_ns)
  int32_t block_tokens = 0;
  int32_t max_hit = 0;  // blocks a hit may cover: the last prompt token is always computed
  int32_t n_full = 0;   // the prompt's full blocks
  std::chrono::milliseconds wait{0};
  Clock::time_point deadline;
  RestorePolicy policy = RestorePolicy::kAuto;
  std::function<void()> on_ready;

  // Guarded by the cache's mu_.
  LeasePhase phase = LeasePhase::kRunning;
  bool cancelled = false;  // released while kRunning: the running step cleans up
  Digest awaited;          // kWaiting: the in-flight key
  bool deadline_timer = false;

  // Written by the one step that runs at a time; read by the lease once ready.
  int32_t next = 0;  // tier-0 walk position (block index)
  std::vector<BlockId> blocks;  // references held for the caller
  bool taken = false;
  std::vector<int32_t> claimed;  // block indices claimed in flight, not yet published (mu_ once ready)
  int32_t published_upto = 0;
  int32_t hit_blocks = 0;
  int32_t tier0_blocks = 0;
  int32_t disk_blocks = 0;
  Decision decision;
  double restore_seconds = 0;
  uint64_t restore_bytes = 0;
  bool waited = false;

  // The token ids of the prompt's block j.
  std::vector<int32_t> blockIds(int32_t j) const {
    return {ids.begin() + static_cast<ptrdiff_t>(j) * block_tokens, ids.begin() + static_cast<ptrdiff_t>(j + 1) * block_tokens};
  }

  std::atomic<bool> ready{false};
  mutable std::mutex ready_mu;
  mutable std::condition_variable ready_cv;
};

// One restore of consecutive blocks from the disk tier, split into chunks
// that the I/O pool's threads read, verify and import in parallel; the last
// chunk to finish completes the lookup.
struct PrefixCache::RestoreJob {
  std::shared_ptr<LeaseState> st;
  std::span<const Digest> keys;  // the blocks to restore, from st->hit_keys
  int32_t first_block = 0;       // block index of keys[0] in the prompt
  std::vector<BlockId> blocks;   // fresh pool blocks, one per key
  std::vector<uint8_t> imported;
  size_t chunk = 1;
  size_t chunks = 0;
  size_t stored_bytes = 0;  // one stored block
  std::atomic<size_t> first_failure{0};  // chunks past it are not read
  std::atomic<size_t> remaining{0};
  Clock::time_point t0;
};

struct PrefixCache::Counters {
  std::atomic<uint64_t> lookups{0}, prompt_tokens{0}, cancelled{0}, denied_shared_reads{0};
  std::atomic<uint64_t> tier0_hit{0}, tier0_miss{0}, disk_hit{0}, disk_miss{0};
  std::atomic<uint64_t> tier0_evicted{0}, reclaimed{0}, waits{0}, wait_timeouts{0}, published{0};
  std::atomic<uint64_t> write_through{0}, export_errors{0};
  std::atomic<uint64_t> restored{0}, restore_bytes{0}, restore_nanos{0};
  std::array<std::atomic<uint64_t>, kRejectReasonCount> rejected{};
  std::atomic<uint64_t> decisions_restore{0}, decisions_recompute{0};
};

// ---------------------------------------------------------------- PrefixLease

PrefixLease::PrefixLease(PrefixCache* cache, std::shared_ptr<LeaseState> state)
    : cache_(cache), state_(std::move(state)) {}

PrefixLease::~PrefixLease() { reset(); }

PrefixLease::PrefixLease(PrefixLease&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)), state_(std::move(other.state_)) {}

PrefixLease& PrefixLease::operator=(PrefixLease&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}

void PrefixLease::reset() {
  if (cache_ != nullptr && state_ != nullptr) cache_->releaseLease(state_);
  state_.reset();
  cache_ = nullptr;
}

bool PrefixLease::ready() const { return state_ == nullptr || state_->ready.load(std::memory_order_acquire); }

void PrefixLease::wait() const {
  if (state_ == nullptr) return;
  std::unique_lock lock(state_->ready_mu);
  state_->ready_cv.wait(lock, [&] { return state_->ready.load(std::memory_order_acquire); });
}

bool PrefixLease::waitFor(std::chrono::milliseconds timeout) const {
  if (state_ == nullptr) return true;
  std::unique_lock lock(state_->ready_mu);
  return state_->ready_cv.wait_for(lock, timeout, [&] { return state_->ready.load(std::memory_order_acquire); });
}

const LeaseState& PrefixLease::readyState() const {
  static const LeaseState kEmpty;
  if (state_ == nullptr) return kEmpty;
  // Reading a pending lease would race with the I/O thread completing it.
  LG_CHECK(state_->ready.load(std::memory_order_acquire), "prefix lease ", state_->id, " read while still pending");
  return *state_;
}

int32_t PrefixLease::cachedTokens() const { return readyState().hit_blocks * readyState().block_tokens; }
int32_t PrefixLease::hitBlocks() const { return readyState().hit_blocks; }
int32_t PrefixLease::tier0Blocks() const { return readyState().tier0_blocks; }
int32_t PrefixLease::diskBlocks() const { return readyState().disk_blocks; }
const Decision& PrefixLease::decision() const { return readyState().decision; }
double PrefixLease::restoreSeconds() const { return readyState().restore_seconds; }
uint64_t PrefixLease::restoreBytes() const { return readyState().restore_bytes; }
bool PrefixLease::waited() const { return readyState().waited; }
const std::string& PrefixLease::hitNamespace() const { return readyState().hit_ns; }

int32_t PrefixLease::claimedBlocks() const {
  const LeaseState& s = readyState();
  if (cache_ == nullptr) return 0;
  std::lock_guard lock(cache_->mu_);  // publish() shrinks the claims
  return static_cast<int32_t>(s.claimed.size());
}

std::vector<BlockId> PrefixLease::takeBlocks() {
  if (state_ == nullptr) return {};
  readyState();  // checks readiness
  if (state_->taken) return {};
  state_->taken = true;
  return state_->blocks;
}

Status PrefixLease::publish(std::span<const BlockId> blocks, int32_t filled_len) {
  if (cache_ == nullptr || state_ == nullptr) return invalidArgument("publish: the lease is empty");
  if (!ready()) return invalidArgument("publish: the lease is still pending");
  LeaseState& s = *state_;
  if (filled_len < 0) return invalidArgument("publish: negative filled length " + std::to_string(filled_len));
  const int64_t full = std::min<int64_t>(filled_len, static_cast<int64_t>(s.ids.size())) / s.block_tokens;
  if (static_cast<int64_t>(blocks.size()) < full) {
    return invalidArgument("publish: " + std::to_string(blocks.size()) + " blocks cannot hold " +
                           std::to_string(filled_len) + " positions");
  }
  for (int64_t j = s.published_upto; j < full; ++j) {
    if (!cache_->allocator_.isLive(blocks[static_cast<size_t>(j)])) {
      return invalidArgument("publish: block " + std::to_string(blocks[static_cast<size_t>(j)]) + " is not allocated");
    }
  }
  cache_->publish(s, blocks, static_cast<int32_t>(full) * s.block_tokens);
  return Status::ok();
}

Status PrefixLease::extend(std::span<const int32_t> generated) {
  if (cache_ == nullptr || state_ == nullptr) return invalidArgument("extend: the lease is empty");
  if (!ready()) return invalidArgument("extend: the lease is still pending");
  LeaseState& s = *state_;
  s.ids.insert(s.ids.end(), generated.begin(), generated.end());
  // Chain the keys of the blocks that are now full (the same keys a later
  // lookup of these ids computes with chainBlockKeys).
  const size_t full = s.ids.size() / static_cast<size_t>(s.block_tokens);
  while (s.keys.size() < full) {
    const size_t j = s.keys.size();
    const Digest previous = j == 0 ? Digest{} : s.keys.back();
    s.keys.push_back(blockKey(s.ns, cache_->model_, previous,
                              std::span<const int32_t>(s.ids).subspan(j * s.block_tokens, s.block_tokens)));
  }
  return Status::ok();
}

int32_t PrefixLease::coveredTokens() const { return static_cast<int32_t>(readyState().ids.size()); }

// ---------------------------------------------------------------- PrefixCache

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
  }
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
  if (disk != nullptr) {
    auto saved = disk->getMeta(kCostModelKey);
    if (saved.isOk() && saved->has_value()) {
      if (Status s = cache->cost_.deserialize(**saved); !s.isOk()) cacheLog()->warn("ignoring saved cost model: {}", s.message());
    }
  }
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
}

void PrefixCache::touchLocked(Entry& e, const Digest& key) {
  if (e.state != State::kReady) return;
  lru_.erase(e.lru);
  lru_.push_front(key);
  e.lru = lru_.begin();
}

void PrefixCache::insertReadyLocked(const Digest& key, Entry& e, BlockId block) {
  const bool was_claim = e.state == State::kInFlight;
  if (was_claim) --in_flight_;
  e.state = State::kReady;
  e.block = block;
  e.owner = 0;
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
  }
  index_.erase(it);
  if (was_claim) resumeWaitersLocked(key);
}

void PrefixCache::resumeWaitersLocked(const Digest& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  for (StatePtr& w : it->second) {
    w->phase = LeasePhase::kRunning;
    io_->post([this, w] { advance(w); });
  }
  waiters_.erase(it);
}

void PrefixCache::unparkLocked(const StatePtr& st) {
  auto it = waiters_.find(st->awaited);
  if (it == waiters_.end()) return;
  std::erase(it->second, st);
  if (it->second.empty()) waiters_.erase(it);
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
    victims.push_back(Victim{eit->first, e.ns_tag, std::move(e.ids), e.block, writer_ != nullptr && !e.on_disk});
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
  for (Victim& v : victims) {
    if (v.write_back && write) {
      WriteBackItem item{v.key, v.ns_tag, std::move(v.ids), std::vector<uint8_t>(block_bytes_)};
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

void PrefixCache::writeThrough(const std::vector<Victim>& blocks) {
  if (stale()) return;
  for (const Victim& v : blocks) {
    WriteBackItem item{v.key, v.ns_tag, v.ids, std::vector<uint8_t>(block_bytes_)};
    const bool exported = pool_.exportBlocks(std::span(&v.block, 1), item.latents).isOk();
    if (!exported) counters_->export_errors.fetch_add(1, std::memory_order_relaxed);
    if (exported && writer_->tryPush(std::move(item))) {
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

// ---------------------------------------------------------------- one lookup

PrefixLease PrefixCache::lookup(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options) {
  auto st = std::make_shared<LeaseState>();
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const int32_t n = static_cast<int32_t>(ids.size());
  s.ns = team.key();
  s.hit_ns = s.ns;
  s.ns_tag = namespaceTag(s.ns);
  s.hit_ns_tag = s.ns_tag;
  s.ids.assign(ids.begin(), ids.end());
  s.block_tokens = bt;
  s.n_full = n / bt;
  s.max_hit = n > 0 ? (n - 1) / bt : 0;
  // Only the shared namespaces granted to this team are read at all: one not
  // granted is neither looked up nor waited on, so it cannot leak even timing.
  std::vector<const SharedNamespace*> readable;
  {
    std::lock_guard lock(mu_);
    for (const SharedNamespace& shared : options.shared_namespaces) {
      if (grants_.count({shared.key(), team.key()}) != 0) {
        readable.push_back(&shared);
      } else {
        counters_->denied_shared_reads.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  // SHA-256 chains outside the lock.
  s.keys = chainBlockKeys(s.ns, model_, ids, bt);
  for (const SharedNamespace* shared : readable) {
    s.shared_keys.push_back(chainBlockKeys(shared->key(), model_, ids.first(static_cast<size_t>(s.max_hit) * bt), bt));
  }
  s.wait = options.in_flight_wait.count() < 0 ? options_.in_flight_wait : options.in_flight_wait;
  s.deadline = Clock::now() + s.wait;
  s.policy = options.restore_policy.value_or(options_.restore_policy);
  s.on_ready = std::move(options.on_ready);
  s.hit_keys = &s.keys;
  if (stale()) {
    // Nothing under this identity is trusted any more: no hits, no claims.
    s.max_hit = 0;
    s.n_full = 0;
    s.shared_keys.clear();
  }
  {
    std::lock_guard lock(mu_);
    s.id = next_lease_++;
    if (!s.shared_keys.empty()) {
      // The chain (own or shared namespace) with the longest available prefix.
      auto available = [&](const std::vector<Digest>& keys) {
        int32_t k = 0;
        while (k < s.max_hit) {
          const Digest& key = keys[static_cast<size_t>(k)];
          auto it = index_.find(key);
          const bool ready = it != index_.end() && it->second.state == State::kReady;
          if (!ready && !(it == index_.end() && disk_ != nullptr && disk_->contains(key))) break;
          ++k;
        }
        return k;
      };
      int32_t best = available(s.keys);
      for (size_t i = 0; i < s.shared_keys.size(); ++i) {
        if (const int32_t a = available(s.shared_keys[i]); a > best) {
          best = a;
          s.hit_keys = &s.shared_keys[i];
          s.hit_ns = readable[i]->key();
          s.hit_ns_tag = namespaceTag(s.hit_ns);
        }
      }
    }
  }
  PrefixLease lease(this, st);
  advance(st);
  return lease;
}

PrefixLease PrefixCache::acquire(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options) {
  PrefixLease lease = lookup(team, ids, std::move(options));
  lease.wait();
  return lease;
}

void PrefixCache::advance(const StatePtr& st) {
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const bool through_on_hit = writer_ != nullptr && options_.write_through_hits > 0;
  std::vector<Victim> write_through;
  int32_t disk_end = 0;
  {
    std::unique_lock lock(mu_);
    if (s.cancelled) {
      s.phase = LeasePhase::kDone;
      lock.unlock();
      counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
      cleanUp(s);
      return;
    }
    while (s.next < s.max_hit) {
      const Digest& key = (*s.hit_keys)[static_cast<size_t>(s.next)];
      auto it = index_.find(key);
      if (it == index_.end()) break;
      Entry& e = it->second;
      if (e.state == State::kInFlight) {
        // Another request is computing or restoring this block: rather than
        // compute it twice, park until it is published or abandoned (or the
        // wait budget ends); the I/O pool resumes the walk here.
        if (s.wait.count() <= 0) break;
        if (Clock::now() >= s.deadline) {
          counters_->wait_timeouts.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        if (!s.waited) counters_->waits.fetch_add(1, std::memory_order_relaxed);
        s.waited = true;
        s.phase = LeasePhase::kWaiting;
        s.awaited = key;
        waiters_[key].push_back(st);
        if (!s.deadline_timer) {
          s.deadline_timer = true;
          io_->postAt(s.deadline, [this, weak = std::weak_ptr<LeaseState>(st)] { onWaitDeadline(weak); });
        }
        lock.unlock();
        writeThrough(write_through);
        return;
      }
      allocator_.retain(e.block);
      s.blocks.push_back(e.block);
      ++e.hits;
      if (through_on_hit && !e.on_disk && e.hits >= static_cast<uint32_t>(options_.write_through_hits)) {
        e.on_disk = true;
        write_through.push_back(Victim{key, e.ns_tag, e.ids, e.block, true});
      }
      ++s.next;
    }
    s.tier0_blocks = s.next;
    disk_end = s.next;
    if (disk_ != nullptr) {
      while (disk_end < s.max_hit && index_.count((*s.hit_keys)[static_cast<size_t>(disk_end)]) == 0 &&
             disk_->contains((*s.hit_keys)[static_cast<size_t>(disk_end)])) {
        ++disk_end;
      }
    }
    // Claim the prompt's remaining full blocks that nobody holds, so that
    // concurrent requests wait for this one instead of computing them too.
    for (int32_t j = s.next; j < s.n_full; ++j) {
      const Digest& key = s.keys[static_cast<size_t>(j)];
      if (index_.count(key) != 0) continue;
      Entry e;
      e.state = State::kInFlight;
      e.owner = s.id;
      e.ns_tag = s.ns_tag;
      e.ids = s.blockIds(j);
      index_.emplace(key, std::move(e));
      s.claimed.push_back(j);
      ++in_flight_;
    }
  }
  writeThrough(write_through);

  if (disk_end > s.next) {
    const uint64_t bytes = static_cast<uint64_t>(disk_end - s.next) * storedBlockBytes(geometry_, options_.stored_dtype);
    s.decision = cost_.decide(s.policy, bytes, int64_t{s.next} * bt, int64_t{disk_end} * bt);
    if (s.decision.choice == RestoreChoice::kRestore) {
      counters_->decisions_restore.fetch_add(1, std::memory_order_relaxed);
      startRestore(st, disk_end);
      return;
    }
    counters_->decisions_recompute.fetch_add(1, std::memory_order_relaxed);
  }
  finishLookup(st);
}

void PrefixCache::onWaitDeadline(const std::weak_ptr<LeaseState>& weak) {
  StatePtr st = weak.lock();
  if (st == nullptr) return;
  {
    std::lock_guard lock(mu_);
    if (st->phase != LeasePhase::kWaiting) return;  // resumed already; the walk checks the deadline itself
    unparkLocked(st);
    st->phase = LeasePhase::kRunning;
  }
  advance(st);  // finds the block still in flight, past the deadline: stops there
}

void PrefixCache::startRestore(const StatePtr& st, int32_t disk_end) {
  auto job = std::make_shared<RestoreJob>();
  job->st = st;
  job->t0 = Clock::now();
  job->first_block = st->next;
  int32_t want = disk_end - st->next;
  // All or nothing per attempt; a full pool restores a shorter prefix.
  while (want > 0 && !allocator_.allocate(want, job->blocks).isOk()) want /= 2;
  job->keys = std::span(*st->hit_keys).subspan(static_cast<size_t>(st->next), static_cast<size_t>(want));
  job->imported.assign(job->keys.size(), 0);
  job->stored_bytes = storedBlockBytes(geometry_, options_.stored_dtype);
  // Chunks of ~4 MB: RocksDB reads (and, when enabled, checks) each blob on
  // the reading thread, and the codec verifies every block, CPU work that
  // scales with the pool's threads; cold reads overlap.
  job->chunk = std::clamp<size_t>(kRestoreChunkBytes / std::max<size_t>(job->stored_bytes, 1), 1, 64);
  job->chunks = (job->keys.size() + job->chunk - 1) / job->chunk;
  job->first_failure.store(job->keys.size(), std::memory_order_relaxed);
  if (job->chunks == 0) {
    finishRestore(job);
    return;
  }
  job->remaining.store(job->chunks, std::memory_order_relaxed);
  for (size_t c = 0; c < job->chunks; ++c) io_->post([this, job, c] { restoreChunk(job, c); });
}

void PrefixCache::restoreChunk(const std::shared_ptr<RestoreJob>& job, size_t c) {
  RestoreJob& j = *job;
  const size_t begin = c * j.chunk;
  if (begin < j.first_failure.load(std::memory_order_relaxed)) {
    std::unique_ptr<RestoreScratch> scratch = takeScratch();
    const engine::LatentLayout& layout = pool_.layout();
    const size_t n = std::min(j.chunk, j.keys.size() - begin);
    ReadBuffers& read = scratch->reads;
    disk_->multiGet(j.keys.subspan(begin, n), read);
    const std::span<const int32_t> ids = j.st->ids;
    for (size_t k = 0; k < n; ++k) {
      const size_t idx = begin + k;
      auto fail = [&] {
        size_t seen = j.first_failure.load(std::memory_order_relaxed);
        while (idx < seen && !j.first_failure.compare_exchange_weak(seen, idx, std::memory_order_relaxed)) {
        }
      };
      if (!read.found[k]) {  // evicted or unreadable since the lookup
        fail();
        break;
      }
      const size_t block_index = static_cast<size_t>(j.first_block) + idx;
      BlockIdentity identity{j.keys[idx], model_, j.st->hit_ns_tag, ids.subspan(block_index * block_tokens_, block_tokens_)};
      RejectReason reason{};
      if (Status s = decodeBlock(read.values[k], geometry_, identity, options_.stored_dtype, *options_.secret, scratch->f32,
                                 &reason);
          !s.isOk()) {
        counters_->rejected[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
        cacheLog()->warn("{}; recomputing", s.message());
        disk_->remove(j.keys[idx]);
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
      // Fresh blocks held by this job alone, which no request can see yet.
      if (!pool_.importBlocks(std::span(&j.blocks[idx], 1), pool_bytes).isOk()) {
        fail();
        break;
      }
      j.imported[idx] = 1;
    }
    returnScratch(std::move(scratch));
  }
  if (j.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) finishRestore(job);
}

void PrefixCache::finishRestore(const std::shared_ptr<RestoreJob>& job) {
  RestoreJob& j = *job;
  LeaseState& s = *j.st;
  // The restored prefix ends at the first block that was not imported.
  size_t ok = 0;
  while (ok < j.keys.size() && j.imported[ok]) ++ok;
  for (size_t k = ok; k < j.blocks.size(); ++k) allocator_.release(j.blocks[k]);
  j.blocks.resize(ok);
  s.restore_seconds = secondsSince(j.t0);
  s.restore_bytes = static_cast<uint64_t>(ok) * j.stored_bytes;
  if (s.restore_bytes > 0) cost_.observeRestore(s.restore_bytes, s.restore_seconds);
  counters_->restored.fetch_add(ok, std::memory_order_relaxed);
  counters_->restore_bytes.fetch_add(s.restore_bytes, std::memory_order_relaxed);
  counters_->restore_nanos.fetch_add(static_cast<uint64_t>(s.restore_seconds * 1e9), std::memory_order_relaxed);
  std::vector<BlockId> duplicates;
  {
    std::lock_guard lock(mu_);
    for (size_t k = 0; k < ok; ++k) {
      const int32_t b = j.first_block + static_cast<int32_t>(k);
      const Digest& key = (*s.hit_keys)[static_cast<size_t>(b)];
      BlockId block = j.blocks[k];
      auto it = index_.find(key);
      if (it == index_.end()) {
        Entry e;
        e.ids = s.blockIds(b);
        e.ns_tag = s.hit_ns_tag;
        it = index_.emplace(key, std::move(e)).first;
        insertReadyLocked(key, it->second, block);
      } else if (it->second.state == State::kInFlight && it->second.owner == s.id) {
        insertReadyLocked(key, it->second, block);
        std::erase(s.claimed, b);
      } else if (it->second.state == State::kReady) {
        // Restored concurrently (through a shared namespace): keep one copy.
        duplicates.push_back(block);
        block = it->second.block;
        allocator_.retain(block);
      }
      // Otherwise another request claimed the key meanwhile and will index
      // its own copy; this lease is served from the block it restored.
      it->second.on_disk = true;
      s.blocks.push_back(block);
    }
  }
  for (BlockId b : duplicates) allocator_.release(b);
  s.disk_blocks = static_cast<int32_t>(ok);
  finishLookup(j.st);
}

void PrefixCache::finishLookup(const StatePtr& st) {
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const int32_t n = static_cast<int32_t>(s.ids.size());
  s.hit_blocks = static_cast<int32_t>(s.blocks.size());
  std::vector<Victim> victims;
  bool cancelled = false;
  {
    std::lock_guard lock(mu_);
    // Deepest first, so a prefix's first blocks are the most recently used.
    for (int32_t k = s.hit_blocks - 1; k >= 0; --k) {
      auto it = index_.find((*s.hit_keys)[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
    cancelled = s.cancelled;
    s.phase = cancelled ? LeasePhase::kDone : LeasePhase::kReady;
  }
  finishEviction(victims);
  if (cancelled) {
    counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
    cleanUp(s);
    return;
  }
  // Counted when a lookup completes, so that a snapshot's token counts add
  // up: prompt = tier-0 hits + disk hits + computed.
  const uint64_t tier0_tokens = static_cast<uint64_t>(s.tier0_blocks) * bt;
  const uint64_t hit_tokens = static_cast<uint64_t>(s.hit_blocks) * bt;
  counters_->lookups.fetch_add(1, std::memory_order_relaxed);
  counters_->prompt_tokens.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  counters_->tier0_hit.fetch_add(tier0_tokens, std::memory_order_relaxed);
  counters_->tier0_miss.fetch_add(static_cast<uint64_t>(n) - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_hit.fetch_add(hit_tokens - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_miss.fetch_add(static_cast<uint64_t>(n) - hit_tokens, std::memory_order_relaxed);
  {
    std::lock_guard lock(s.ready_mu);
    s.ready.store(true, std::memory_order_release);
  }
  s.ready_cv.notify_all();
  if (s.on_ready) s.on_ready();
}

void PrefixCache::releaseLease(const StatePtr& st) {
  LeaseState& s = *st;
  bool clean_now = false;
  {
    std::lock_guard lock(mu_);
    switch (s.phase) {
      case LeasePhase::kReady:
        clean_now = true;
        break;
      case LeasePhase::kWaiting:
        unparkLocked(st);
        counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
        clean_now = true;
        break;
      case LeasePhase::kRunning:
        s.cancelled = true;  // the step in progress cleans up when it ends
        break;
      case LeasePhase::kDone:
        break;
    }
    if (clean_now) s.phase = LeasePhase::kDone;
  }
  if (clean_now) cleanUp(s);
}

void PrefixCache::cleanUp(LeaseState& s) {
  {
    std::lock_guard lock(mu_);
    abandonClaimsLocked(s);
  }
  if (!s.taken) {
    for (BlockId b : s.blocks) allocator_.release(b);
  }
  s.blocks.clear();
}

void PrefixCache::abandonClaimsLocked(LeaseState& s) {
  for (int32_t j : s.claimed) {
    auto it = index_.find(s.keys[static_cast<size_t>(j)]);
    if (it != index_.end() && it->second.state == State::kInFlight && it->second.owner == s.id) eraseLocked(it);
  }
  s.claimed.clear();
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
  if (pool_.layout().dtype != engine::LatentDType::kF32) s->pool.resize(block_bytes_);
  return s;
}

void PrefixCache::returnScratch(std::unique_ptr<RestoreScratch> scratch) {
  std::lock_guard lock(scratch_mu_);
  if (spare_scratch_.size() < kSpareScratch) spare_scratch_.push_back(std::move(scratch));
}

void PrefixCache::publish(LeaseState& s, std::span<const BlockId> blocks, int32_t filled_len) {
  const int32_t bt = block_tokens_;
  const int32_t n = std::min(filled_len / bt, static_cast<int32_t>(s.keys.size()));
  if (n <= s.published_upto || stale()) return;
  const bool through_now = writer_ != nullptr && options_.write_through_hits == 0;
  std::vector<Victim> write_through;
  std::vector<Victim> victims;
  {
    std::lock_guard lock(mu_);
    for (int32_t j = s.published_upto; j < n; ++j) {
      const Digest& key = s.keys[static_cast<size_t>(j)];
      const BlockId block = blocks[static_cast<size_t>(j)];
      auto it = index_.find(key);
      if (it == index_.end()) {
        Entry e;
        e.ids = s.blockIds(j);
        e.ns_tag = s.ns_tag;
        it = index_.emplace(key, std::move(e)).first;
        insertReadyLocked(key, it->second, block);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else if (it->second.state == State::kInFlight && it->second.owner == s.id) {
        insertReadyLocked(key, it->second, block);
        std::erase(s.claimed, j);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else {
        continue;  // already indexed, or claimed by another request that will publish it
      }
      if (through_now) {
        it->second.on_disk = true;
        write_through.push_back(Victim{key, it->second.ns_tag, it->second.ids, block, true});
      }
    }
    for (int32_t k = n - 1; k >= 0; --k) {
      auto it = index_.find(s.keys[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    s.published_upto = n;
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
  }
  writeThrough(write_through);  // the request still holds these blocks
  finishEviction(victims);
}

Result<int32_t> PrefixCache::publishToNamespace(const TeamNamespace& from_ns, const SharedNamespace& to_ns,
                                                std::span<const int32_t> ids) {
  const std::vector<Digest> from = chainBlockKeys(from_ns.key(), model_, ids, block_tokens_);
  const std::vector<Digest> to = chainBlockKeys(to_ns.key(), model_, ids, block_tokens_);
  const Digest to_tag = namespaceTag(to_ns.key());
  std::lock_guard lock(mu_);
  int32_t published = 0;
  for (size_t j = 0; j < from.size(); ++j) {
    auto src = index_.find(from[j]);
    if (src == index_.end() || src->second.state != State::kReady) break;
    auto dst = index_.find(to[j]);
    if (dst == index_.end()) {
      Entry e;
      e.ids = src->second.ids;
      e.ns_tag = to_tag;
      dst = index_.emplace(to[j], std::move(e)).first;
      insertReadyLocked(to[j], dst->second, src->second.block);
    }
    ++published;
  }
  if (published == 0) return notFound("publishToNamespace: the prefix is not cached in namespace " + from_ns.key());
  return published;
}

Status PrefixCache::guardIdentity(std::function<Status()> still_valid, std::chrono::milliseconds interval) {
  {
    std::lock_guard lock(mu_);
    identity_check_ = std::move(still_valid);
    identity_interval_ = std::max(interval, std::chrono::milliseconds(1));
  }
  checkIdentity();
  std::lock_guard lock(mu_);
  return stale() ? dataLoss(stale_reason_) : Status::ok();
}

void PrefixCache::checkIdentity() {
  std::function<Status()> check;
  std::chrono::milliseconds interval;
  {
    std::lock_guard lock(mu_);
    check = identity_check_;
    interval = identity_interval_;
  }
  if (stale() || !check) return;
  if (Status s = check(); !s.isOk()) {
    markStale(s);
    return;
  }
  io_->postAt(Clock::now() + interval, [this] { checkIdentity(); });
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

void PrefixCache::markStale(const Status& why) {
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    if (stale_.exchange(true, std::memory_order_acq_rel)) return;
    stale_reason_ = why.message();
    // Drop every ready entry (the index's references); blocks requests hold
    // stay theirs. Claims stay until their leases end: publishing is off.
    dropReadyLocked([](const Entry&) { return true; }, release);
  }
  for (BlockId b : release) allocator_.release(b);
  cacheLog()->error("prefix cache stopped: the latent identity no longer holds ({}); no cached block is served "
                    "until restart",
                    why.message());
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeNamespace(const TeamNamespace& team) {
  return purgeTag(namespaceTag(team.key()));
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeNamespace(const SharedNamespace& shared) {
  return purgeTag(namespaceTag(shared.key()));
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeTag(const Digest& tag) {
  PurgeCounts counts;
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    // No write-back: the point is to forget them.
    counts.tier0 = dropReadyLocked([&tag](const Entry& e) { return e.ns_tag == tag; }, release);
  }
  for (BlockId b : release) allocator_.release(b);
  if (disk_ != nullptr) {
    // Blocks of the namespace already queued for writing land first, then go.
    if (writer_ != nullptr) writer_->drain();
    LG_ASSIGN_OR_RETURN(counts.disk, disk_->purge(tag));
  }
  cacheLog()->info("purged a namespace: {} blocks from tier 0, {} from disk", counts.tier0, counts.disk);
  return counts;
}

void PrefixCache::grantShared(const SharedNamespace& shared, const TeamNamespace& team) {
  std::lock_guard lock(mu_);
  grants_.emplace(shared.key(), team.key());
}

void PrefixCache::revokeShared(const SharedNamespace& shared, const TeamNamespace& team) {
  std::lock_guard lock(mu_);
  grants_.erase({shared.key(), team.key()});
}

void PrefixCache::observePrefill(int64_t begin, int64_t end, double other_seconds, double attention_seconds) {
  cost_.observePrefill(end - begin, CostModel::pairs(begin, end), other_seconds, attention_seconds);
}

Digest PrefixCache::namespaceTag(const std::string& ns_key) const {
  // Keyed, so a stored block's tag does not tell a reader of the store which
  // team it belongs to; without a disk tier nothing is stored, and a plain
  // digest serves to find a namespace's blocks in tier 0.
  if (options_.secret != nullptr) return options_.secret->keyedDigest("latentgate/namespace/v1", ns_key);
  return Sha256().update("latentgate/namespace/v1").update(ns_key).finish();
}

void PrefixCache::saveCostModel() {
  if (disk_ == nullptr) return;
  if (Status s = disk_->putMeta(kCostModelKey, cost_.serialize()); !s.isOk()) {
    cacheLog()->warn("cannot save the cost model: {}", s.message());
  }
}

Status PrefixCache::persistAll(bool flush_files) {
  if (disk_ == nullptr || writer_ == nullptr) return unavailable("persistAll: the cache has no disk tier");
  if (stale()) {
    std::lock_guard lock(mu_);
    return dataLoss("persistAll: the cache stopped: " + stale_reason_);
  }
  // Failures of this call only: an old failure must not fail every later one.
  const uint64_t errors_before = writer_->stats().write_errors;
  std::vector<Victim> pending;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, e] : index_) {
      if (e.state != State::kReady || e.on_disk) continue;
      e.on_disk = true;
      allocator_.retain(e.block);  // keeps it alive and unevictable while exported
      pending.push_back(Victim{key, e.ns_tag, e.ids, e.block, true});
    }
  }
  // Every block is exported, even after a failure, so that each reference
  // taken above is released; a block that could not be exported is marked
  // as not on disk again (eviction retries it) and reported.
  Status first_error;
  size_t queued = 0;
  for (Victim& v : pending) {
    WriteBackItem item{v.key, v.ns_tag, std::move(v.ids), std::vector<uint8_t>(block_bytes_)};
    Status s = pool_.exportBlocks(std::span(&v.block, 1), item.latents);
    allocator_.release(v.block);
    if (!s.isOk()) {
      counters_->export_errors.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(mu_);
      if (auto it = index_.find(v.key); it != index_.end() && it->second.state == State::kReady) it->second.on_disk = false;
      if (first_error.isOk()) first_error = s;
      continue;
    }
    writer_->push(std::move(item));
    ++queued;
  }
  counters_->write_through.fetch_add(queued, std::memory_order_relaxed);
  writer_->drain();
  saveCostModel();
  // Counted while this call ran (a concurrent eviction's write-back failing
  // meanwhile counts too); those blocks are marked as not on disk again.
  const uint64_t failed = writer_->stats().write_errors - errors_before;
  if (!first_error.isOk()) return first_error.withContext("persistAll: exporting a block");
  if (failed > 0) {
    std::string why;
    if (const DiskTierStats d = disk_->stats(); !d.writable) why = ": " + d.write_error;
    return unavailable("persistAll: " + std::to_string(failed) + " blocks failed to write" + why);
  }
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
  s.cancelled_lookups = c.cancelled.load();
  s.identity_stale = stale();
  if (s.identity_stale) {
    std::lock_guard lock(mu_);
    s.identity_error = stale_reason_;
  }
  s.denied_shared_reads = c.denied_shared_reads.load();
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
  s.export_errors = c.export_errors.load();
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
    s.disk_state = d.writable ? DiskState::kOk : DiskState::kUnwritable;
    s.disk_error = d.write_error;
    s.disk_occupied_bytes = d.occupied_bytes;
    s.disk_write_failures = d.write_failures;
    s.disk_refused_writes = d.refused_writes;
    s.disk_unwritable_episodes = d.unwritable_episodes;
    s.disk_write_recoveries = d.write_recoveries;
  } else if (!options_.disk_error.empty()) {
    s.disk_state = DiskState::kDegraded;
    s.disk_error = options_.disk_error;
  }
  return s;
}

}  // namespace lg::cache

// Part of PrefixCache (prefix_cache.h): restoring a prefix's blocks from the
// disk tier (MultiGet in ~4 MB chunks that the I/O pool's threads read,
// verify and import in parallel, into reused scratch buffers), and the
// prefill timings that feed the cost model deciding restore or recompute.
#include "cache/prefix_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "cache/cache_log.h"
#include "cache/pool_latents.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

using engine::BlockId;
using Clock = std::chrono::steady_clock;

// Restores read this many stored bytes per MultiGet: the unit a restore
// task reads, verifies and imports (and the size of its read buffers).
constexpr uint64_t kRestoreChunkBytes = uint64_t{4} << 20;
// Restore scratch buffers kept for reuse (one per I/O thread).
constexpr size_t kSpareScratch = 8;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

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
      const Digest* parent = b == 0 ? nullptr : &(*s.hit_keys)[static_cast<size_t>(b - 1)];
      BlockId block = j.blocks[k];
      auto it = index_.find(key);
      if (it == index_.end()) {
        Entry e;
        e.ids = s.blockIds(b);
        e.ns_tag = s.hit_ns_tag;
        it = index_.emplace(key, std::move(e)).first;
        insertReadyLocked(key, it->second, block, parent);
      } else if (it->second.state == State::kInFlight && it->second.owner == s.id) {
        insertReadyLocked(key, it->second, block, parent);
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

void PrefixCache::observePrefill(int64_t begin, int64_t end, double other_seconds, double attention_seconds) {
  cost_.observePrefill(end - begin, CostModel::pairs(begin, end), other_seconds, attention_seconds);
}

}  // namespace lg::cache

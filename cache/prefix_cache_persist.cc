// Part of PrefixCache (prefix_cache.h): what the disk tier keeps across
// restarts besides evicted blocks. persistAll (every indexed block not on
// disk yet, for shutdown and write-through at exit) and the cost model's
// saved state.
#include "cache/prefix_cache.h"

#include "cache/cache_log.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

constexpr std::string_view kCostModelKey = "cost_model/v1";

}  // namespace

void PrefixCache::loadCostModel() {
  if (disk_ == nullptr) return;
  auto saved = disk_->getMeta(kCostModelKey);
  if (saved.isOk() && saved->has_value()) {
    if (Status s = cost_.deserialize(**saved); !s.isOk()) cacheLog()->warn("ignoring saved cost model: {}", s.message());
  }
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
      pending.push_back(victimOf(key, e, true));
    }
  }
  // Every block is exported, even after a failure, so that each reference
  // taken above is released; a block that could not be exported is marked
  // as not on disk again (eviction retries it) and reported.
  Status first_error;
  size_t queued = 0;
  for (Victim& v : pending) {
    WriteBackItem item = std::move(v).item(block_bytes_);
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

}  // namespace lg::cache

// Part of PrefixCache (prefix_cache.h): snapshot(), the counters and gauges
// /metrics reads (cache_stats.h), gathered from the index, the counters, the
// write-back queue and the disk tier.
#include "cache/prefix_cache.h"

#include "cache/prefix_cache_internal.h"

namespace lg::cache {

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
  if (mrc_tier0_ != nullptr) s.mrc_tier0 = curveStats(*mrc_tier0_, mrc_tier0_blocks_, block_bytes_, {}, nullptr);
  if (mrc_disk_ != nullptr) {
    s.mrc_disk = curveStats(*mrc_disk_, mrc_disk_blocks_, storedBlockBytes(geometry_, options_.stored_dtype), {}, nullptr);
  }
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

DiskState PrefixCache::diskState() const {
  if (disk_ != nullptr) return disk_->writable() ? DiskState::kOk : DiskState::kUnwritable;
  return options_.disk_error.empty() ? DiskState::kNone : DiskState::kDegraded;
}

}  // namespace lg::cache

#include "cache/cache_metrics.h"

#include <string>
#include <utility>
#include <vector>

namespace lg::cache {

using metrics::ExpositionWriter;
using metrics::MetricType;

void collectCacheStats(ExpositionWriter& w, const CacheStats& s) {
  w.counter("latentgate_cache_lookups_total", "Completed prefix cache lookups.", s.lookups);
  w.counter("latentgate_cache_cancelled_lookups_total", "Lookups dropped while pending.", s.cancelled_lookups);
  w.counter("latentgate_cache_prompt_tokens_total", "Prompt tokens of completed lookups.", s.prompt_tokens);
  if (w.family("latentgate_cache_hit_tokens_total", "Prompt tokens served, by tier.", MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.hit_tokens);
    w.sample({{"tier", "disk"}}, s.disk.hit_tokens);
  }
  if (w.family("latentgate_cache_miss_tokens_total",
               "Prompt tokens not found, by tier (tier0: not in the latent pool; disk: not restored either, so "
               "computed).",
               MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.miss_tokens);
    w.sample({{"tier", "disk"}}, s.disk.miss_tokens);
  }
  if (w.family("latentgate_cache_blocks", "Blocks held, by tier.", MetricType::kGauge)) {
    w.sample({{"tier", "tier0"}}, s.tier0.blocks);
    w.sample({{"tier", "disk"}}, s.disk.blocks);
  }
  if (w.family("latentgate_cache_bytes", "Bytes of blocks held, by tier (disk: as stored).", MetricType::kGauge)) {
    w.sample({{"tier", "tier0"}}, s.tier0.bytes);
    w.sample({{"tier", "disk"}}, s.disk.bytes);
  }
  if (w.family("latentgate_cache_evicted_blocks_total",
               "Blocks evicted, by tier (tier0: byte budget or reclaimed for allocation; disk: cap or expiry).",
               MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.evicted_blocks);
    w.sample({{"tier", "disk"}}, s.disk.evicted_blocks);
  }
  w.counter("latentgate_cache_reclaimed_blocks_total",
            "Tier-0 blocks evicted because an allocation found the latent pool full.", s.reclaimed_blocks);
  w.gauge("latentgate_cache_pinned_blocks", "Tier-0 blocks a request also holds now.", s.tier0_pinned_blocks);
  w.gauge("latentgate_cache_tier0_budget_bytes", "Byte budget of tier 0 (0: bounded by the latent pool only).",
          s.tier0_budget_bytes);
  w.gauge("latentgate_cache_in_flight_blocks", "Blocks claimed by a request that is computing them.",
          s.in_flight_blocks);
  w.counter("latentgate_cache_in_flight_waits_total", "Lookups that waited for another request's blocks.",
            s.in_flight_waits);
  w.counter("latentgate_cache_in_flight_wait_timeouts_total", "In-flight waits that timed out.",
            s.in_flight_wait_timeouts);
  w.counter("latentgate_cache_published_blocks_total", "Blocks published into the cache.", s.published_blocks);
  w.counter("latentgate_cache_denied_shared_reads_total",
            "Shared namespaces a lookup named without its team being granted them.", s.denied_shared_reads);
  w.gauge("latentgate_cache_write_back_queue_blocks", "Blocks waiting in the write-back queue.",
          s.write_back_queue_depth);
  if (w.family("latentgate_cache_write_back_blocks_total",
               "Write-back to the disk tier, by outcome (dropped: the queue was full).", MetricType::kCounter)) {
    w.sample({{"outcome", "queued"}}, s.write_back_queued_blocks);
    w.sample({{"outcome", "written"}}, s.write_back_written_blocks);
    w.sample({{"outcome", "dropped"}}, s.write_back_dropped_blocks);
    w.sample({{"outcome", "error"}}, s.write_back_errors);
  }
  w.counter("latentgate_cache_write_back_written_bytes_total", "Bytes written to the disk tier.",
            s.write_back_written_bytes);
  w.counter("latentgate_cache_write_through_blocks_total", "Blocks queued for writing because they were reused often.",
            s.write_through_blocks);
  w.counter("latentgate_cache_export_errors_total", "Blocks the latent pool failed to export for writing.",
            s.export_errors);
  w.counter("latentgate_cache_restored_blocks_total", "Blocks restored from the disk tier into the latent pool.",
            s.restored_blocks);
  w.counter("latentgate_cache_restore_bytes_total", "Stored bytes read by restores.", s.restore_bytes);
  if (w.family("latentgate_cache_restore_seconds_total", "Wall time of restores (read, verify, import).",
               MetricType::kCounter)) {
    w.sample(s.restore_seconds);
  }
  w.counter("latentgate_cache_disk_read_errors_total", "Disk tier reads that reported corruption or an I/O error.",
            s.disk_read_errors);
  if (w.family("latentgate_cache_rejected_blocks_total", "Stored blocks rejected (never served), by reason.",
               MetricType::kCounter)) {
    for (size_t i = 0; i < kRejectReasonCount; ++i) {
      w.sample({{"reason", std::string(rejectReasonName(static_cast<RejectReason>(i)))}},
               s.rejected_blocks[i]);
    }
  }
  if (w.family("latentgate_cache_disk_state", "The disk tier's state: 1 for the current one.", MetricType::kGauge)) {
    for (DiskState st : {DiskState::kNone, DiskState::kOk, DiskState::kUnwritable,
                                DiskState::kDegraded}) {
      w.sample({{"state", std::string(diskStateName(st))}}, int64_t{s.disk_state == st ? 1 : 0});
    }
  }
  w.gauge("latentgate_cache_disk_occupied_bytes",
          "What the disk tier's store occupies on disk (files, garbage, WAL, set-aside stores).",
          s.disk_occupied_bytes);
  w.counter("latentgate_cache_disk_write_failures_total", "Disk tier writes that failed, and background errors.",
            s.disk_write_failures);
  w.counter("latentgate_cache_disk_refused_writes_total", "Writes refused while the disk tier was unwritable.",
            s.disk_refused_writes);
  w.counter("latentgate_cache_disk_unwritable_episodes_total", "Times writing to the disk tier stopped working.",
            s.disk_unwritable_episodes);
  w.counter("latentgate_cache_disk_write_recoveries_total", "Times writing to the disk tier worked again.",
            s.disk_write_recoveries);
  w.gauge("latentgate_cache_disk_recovered_from_corruption",
          "1 when the disk tier's store was set aside as corrupt at open.",
          int64_t{s.disk_recovered_from_corruption ? 1 : 0});
  w.gauge("latentgate_cache_identity_stale", "1 when the weights changed under the server and the cache stopped.",
          int64_t{s.identity_stale ? 1 : 0});
  if (w.family("latentgate_cache_decisions_total", "Restore-or-recompute decisions for blocks found on disk.",
               MetricType::kCounter)) {
    w.sample({{"choice", "restore"}}, s.decisions_restore);
    w.sample({{"choice", "recompute"}}, s.decisions_recompute);
  }
  w.gauge("latentgate_cache_cost_restore_bandwidth_bytes_per_second", "The cost model's restore bandwidth.",
          s.costs.restore_bandwidth);
  w.gauge("latentgate_cache_cost_restore_latency_seconds", "The cost model's latency per restore.",
          s.costs.restore_latency);
  w.gauge("latentgate_cache_cost_prefill_token_seconds", "The cost model's prefill time per token outside attention.",
          s.costs.per_token);
  w.gauge("latentgate_cache_cost_attention_pair_seconds",
          "The cost model's prefill time per causal attention (query, key) pair.", s.costs.per_pair);
  collectMissRatioCurves(w, s);
}

void collectMissRatioCurves(ExpositionWriter& w, const CacheStats& s) {
  std::vector<std::pair<std::string, const MrcTierStats*>> tiers;
  if (s.mrc_tier0.present) tiers.emplace_back("tier0", &s.mrc_tier0);
  if (s.mrc_disk.present) tiers.emplace_back("disk", &s.mrc_disk);
  if (tiers.empty()) return;
  if (w.family("latentgate_cache_mrc_hit_ratio",
               "Estimated hit ratio (of block accesses) the tier would have had at size_factor times its size today "
               "(SHARDS miss-ratio curve; disk: behind today's tier 0).",
               MetricType::kGauge)) {
    for (const auto& [tier, t] : tiers) {
      for (size_t i = 0; i < kMrcSizeFactors.size(); ++i) {
        w.sample({{"tier", tier}, {"size_factor", std::string(kMrcSizeFactorNames[i])}}, t->hit_ratio[i]);
      }
    }
  }
  auto perTier = [&](const char* name, const char* help, MetricType type, auto value) {
    if (!w.family(name, help, type)) return;
    for (const auto& [tier, t] : tiers) w.sample({{"tier", tier}}, value(*t));
  };
  perTier("latentgate_cache_mrc_size_blocks", "The tier's size today in blocks (size_factor 1).", MetricType::kGauge,
          [](const MrcTierStats& t) { return t.today_blocks; });
  perTier("latentgate_cache_mrc_reliable_from_blocks",
          "Sizes below this many blocks are estimated from fewer than 512 sampled keys (+Inf: every size, "
          "fewer than 512 sampled accesses so far; 0: exact).",
          MetricType::kGauge,
          [](const MrcTierStats& t) { return t.reliable_from_blocks; });
  perTier("latentgate_cache_mrc_sampling_rate", "SHARDS' current sampling rate of block keys.", MetricType::kGauge,
          [](const MrcTierStats& t) { return t.sampling_rate; });
  perTier("latentgate_cache_mrc_accesses_total", "Block accesses the tier's curve heard.", MetricType::kCounter,
          [](const MrcTierStats& t) { return t.accesses; });
  perTier("latentgate_cache_mrc_sampled_accesses_total", "Of those, the sampled ones.", MetricType::kCounter,
          [](const MrcTierStats& t) { return t.sampled_accesses; });
  perTier("latentgate_cache_mrc_samples", "Sampled block keys the estimator holds.", MetricType::kGauge,
          [](const MrcTierStats& t) { return t.samples; });
  perTier("latentgate_cache_mrc_memory_bytes", "Memory the estimator holds.", MetricType::kGauge,
          [](const MrcTierStats& t) { return t.memory_bytes; });
}

}  // namespace lg::cache

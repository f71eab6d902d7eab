// The serving core's metric families and the memory picture, written at
// scrape time from stats snapshots (docs/metrics.md lists every family):
//   - the scheduler's (latentgate_scheduler_*): requests by state, admissions,
//     finishes and refusals by reason, preemptions, steps and their tokens,
//     step and token latency histograms;
//   - the memory's (latentgate_model_weights_bytes, latentgate_latent_pool_*):
//     the weights and the latent pool's blocks and bytes by state;
//   - the prefix cache's (latentgate_cache_*), which the cache writes itself
//     (cache/cache_metrics.h), in the same collector;
//   - vLLM's names for the scheduler's load and the pool's use
//     (vllm:num_requests_waiting, ...), which routers that pick a replica by
//     them read: llm-d's scorers, the Gateway API Inference Extension.
// The memory picture combines the scheduler's snapshot with the cache's (the
// disk tier), which is why it lives here, above both: /metrics and the
// dashboard (proxy/dashboard.h) show the same numbers from it.
//
// Thread-safety: the functions are pure over their snapshots; the collector
// that addEngineCollectors adds takes one SchedulerStats snapshot (a copy
// under the scheduler's stats mutex, as its own updates take) and one
// CacheStats snapshot per scrape, on the scraping thread.
#pragma once

#include <cstdint>
#include <string>

#include "cache/cache_stats.h"
#include "common/metrics.h"
#include "serving/scheduler_stats.h"

namespace lg::serving {

// Sizes that do not change while serving.
struct MemoryFacts {
  uint64_t weights_bytes = 0;  // the checkpoint's weight files (memory-mapped)
  uint64_t block_bytes = 0;    // one latent pool block (engine::LatentLayout::blockBytes)
};

// The memory picture at one moment, from the scheduler's and the cache's
// snapshots: what /metrics' memory families and the dashboard both show.
// running + cached + free = capacity.
struct MemoryPicture {
  uint64_t weights_bytes = 0;
  uint64_t block_bytes = 0;
  int64_t capacity_blocks = 0;
  int64_t running_blocks = 0;   // held by running sequences (a shared prefix once)
  int64_t cached_blocks = 0;    // used, held by no running sequence: the cache's
  int64_t free_blocks = 0;
  int64_t reserved_blocks = 0;  // promised to admitted sequences, not allocated yet (part of free)
  bool has_disk_tier = false;   // a prefix cache with a disk tier
  uint64_t disk_blocks = 0;
  uint64_t disk_bytes = 0;           // blocks as stored (latentgate_cache_bytes{tier="disk"})
  uint64_t disk_occupied_bytes = 0;  // everything the store occupies on disk
  cache::DiskState disk_state = cache::DiskState::kNone;
};
// `cache` null: no prefix cache (no disk tier).
MemoryPicture memoryPicture(const MemoryFacts& memory, const SchedulerStats& s, const cache::CacheStats* cache);

// What vLLM's families say besides the stats.
struct VllmFacts {
  std::string model_name;    // the served model's id: vLLM's `model_name` label
  int64_t block_tokens = 0;  // tokens per latent pool block (cache.block_tokens): vLLM's `block_size`
};

// vLLM's families, as vLLM writes them (labels `model_name` and `engine`, its
// engine index, "0" here: one engine), over the same snapshot as ours:
//   vllm:num_requests_waiting  gauge, requests queued for admission (preempted ones too)
//   vllm:num_requests_running  gauge, admitted sequences (looking up, prefilling, decoding)
//   vllm:kv_cache_usage_perc   gauge, 0..1: pool blocks held by running sequences over the
//                              capacity; cached blocks nobody holds count as free, as vLLM
//                              counts its evictable prefix-cache blocks
//   vllm:cache_config_info     gauge 1, labels `block_size`, `num_gpu_blocks` (the pool's
//                              capacity) and `engine`, as vLLM's (no `model_name`)
void collectVllmFamilies(metrics::ExpositionWriter& w, const VllmFacts& facts, const SchedulerStats& s);

// The scheduler's families (latentgate_scheduler_*) and the memory's
// (latentgate_model_weights_bytes, latentgate_latent_pool_*), from a stats
// snapshot.
void collectSchedulerStats(metrics::ExpositionWriter& w, const SchedulerStats& s);
void collectMemory(metrics::ExpositionWriter& w, const MemoryFacts& memory, const SchedulerStats& s);

// One collector for the scheduler's, the memory's, the cache's
// (cache::collectCacheStats) and vLLM's families, in that order: the
// scheduler must outlive the registry's scrapes, and so must the cache (null:
// no prefix cache, its families are left out).
void addEngineCollectors(metrics::Registry& registry, const SchedulerMetricsSource& scheduler,
                         const cache::CacheMetricsSource* cache, MemoryFacts memory, VllmFacts vllm);

}  // namespace lg::serving

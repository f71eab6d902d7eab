// GET /metrics: the gateway's, the scheduler's, the prefix cache's and the
// memory's metrics in the Prometheus text format (common/metrics.h), for the
// admin key or the metrics token (server.metrics_token). docs/metrics.md
// lists every family.
//
// What is collected where:
//   - GenerationMetrics: per API generation, at its final event on the engine
//     thread (Gateway calls generationEnded()): time to first token, time per
//     output token and end-to-end latency histograms, tokens by kind. Lock-free
//     (atomics only).
//   - RequestMetrics (request_metrics.h): requests by endpoint and status.
//   - addEngineCollectors: at scrape time, one SchedulerStats snapshot (a copy
//     under the scheduler's stats mutex, as its own updates take) and one
//     CacheStats snapshot: the scheduler's gauges, counters and histograms,
//     the cache's, and the memory picture (weights, latent pool blocks and
//     bytes by state, disk tier bytes).
//   - anything else adds its own collector to the registry (the ledger:
//     billing/ledger_metrics.h).
// Labels carry only bounded, non-secret values: route names, status codes,
// enum names, tier names, team ids (bounded). Never keys, prompts, paths or
// error messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "billing/key_store.h"
#include "cache/cache_stats.h"
#include "common/metrics.h"
#include "common/status.h"
#include "proxy/router.h"
#include "serving/events.h"
#include "serving/scheduler_stats.h"

namespace lg::proxy {

class GenerationMetrics {
 public:
  GenerationMetrics();
  GenerationMetrics(const GenerationMetrics&) = delete;
  GenerationMetrics& operator=(const GenerationMetrics&) = delete;

  // One generation of an API request ended: `final_event` is its final
  // event, `received` when its HTTP request was complete, `now` the time of
  // the final event. Any thread (the engine thread); lock-free.
  //   time to first token: received -> first token (the engine's
  //     submit -> first token plus what happened before submit: parsing,
  //     rendering, tokenizing); only when a token was generated.
  //   time per output token: first to last token / (tokens - 1); only with
  //     at least 2 tokens.
  //   end-to-end: received -> final event; not for requests refused in the
  //     queue (they were never served).
  //   tokens: the usage (hit tier 0, hit disk, miss, output), also of
  //     cancelled generations (what was computed).
  void generationEnded(serving::Clock::time_point received, const serving::StreamEvent& final_event,
                       serving::Clock::time_point now = serving::Clock::now());

  void collect(metrics::ExpositionWriter& w) const;

  enum TokenKind { kHitTier0, kHitDisk, kMiss, kOutput, kTokenKinds };
  uint64_t tokens(TokenKind kind) const { return tokens_[kind].load(std::memory_order_relaxed); }
  Histogram timeToFirstToken() const { return ttft_.snapshot(); }
  Histogram timePerOutputToken() const { return tpot_.snapshot(); }
  Histogram endToEnd() const { return e2e_.snapshot(); }

 private:
  metrics::AtomicHistogram ttft_;
  metrics::AtomicHistogram tpot_;
  metrics::AtomicHistogram e2e_;
  std::atomic<uint64_t> tokens_[kTokenKinds] = {};
};

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
MemoryPicture memoryPicture(const MemoryFacts& memory, const serving::SchedulerStats& s, const cache::CacheStats* cache);

// The scheduler's families (latentgate_scheduler_*), the cache's
// (latentgate_cache_*), and the memory's (latentgate_model_weights_bytes,
// latentgate_latent_pool_*), from stats snapshots.
void collectSchedulerStats(metrics::ExpositionWriter& w, const serving::SchedulerStats& s);
void collectCacheStats(metrics::ExpositionWriter& w, const cache::CacheStats& s);
void collectMemory(metrics::ExpositionWriter& w, const MemoryFacts& memory, const serving::SchedulerStats& s);

// One collector for the three above: the scheduler must outlive the
// registry's scrapes, and so must the cache (null: no prefix cache, its
// families are left out).
void addEngineCollectors(metrics::Registry& registry, const serving::SchedulerMetricsSource& scheduler,
                         const cache::CacheMetricsSource* cache, MemoryFacts memory);

// Who may read /metrics: the admin key, and the metrics token when one is
// configured (hashed like the admin key and compared in constant time).
struct MetricsAccess {
  const billing::AdminKey* admin = nullptr;
  std::optional<billing::AdminKey> token;  // server.metrics_token; nullopt: none
};
// The token as configured (empty: none); refuses one shorter than 16
// characters, as the admin key.
Result<MetricsAccess> metricsAccess(const billing::AdminKey& admin, std::string_view metrics_token);

// GET /metrics: the registry's text with Content-Type
// `text/plain; version=0.0.4; charset=utf-8`; anything but the admin key or
// the metrics token as a Bearer token is 401 invalid_api_key (an OpenAI
// error object). The registry and `access.admin` must outlive the router.
void addMetricsRoute(Router& router, const metrics::Registry& registry, MetricsAccess access);

}  // namespace lg::proxy

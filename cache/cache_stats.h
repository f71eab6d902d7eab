// CacheStats: one snapshot of everything the prefix cache counts, and the
// interface the gateway's /metrics (and `latentgate forward`'s stats line)
// read it through. Counters are totals since the cache was created; gauges
// (blocks, bytes, queue depth) are values at the time of the snapshot.
//
// Token accounting per request: prompt = tier-0 hits + disk hits + computed.
//   tier0.hit_tokens   tokens whose latents were reused from tier 0
//   tier0.miss_tokens  prompt tokens not found in tier 0
//   disk.hit_tokens    tier-0 misses restored from the disk tier
//   disk.miss_tokens   tier-0 misses not restored (absent, rejected, or the
//                      cost model chose to recompute): the computed tokens
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/block_codec.h"
#include "cache/cost_model.h"

namespace lg::cache {

// The disk tier's state, for /readyz.
enum class DiskState : uint8_t {
  kNone,        // no disk tier configured: tier 0 only, on purpose
  kOk,          // open and writable
  kUnwritable,  // open, serving reads, but writes fail (disk full, I/O errors): retried with backoff
  kDegraded,    // configured but could not be opened: tier 0 only (openDiskTierOrDegrade)
};

inline std::string_view diskStateName(DiskState s) {
  switch (s) {
    case DiskState::kNone: return "none";
    case DiskState::kOk: return "ok";
    case DiskState::kUnwritable: return "unwritable";
    case DiskState::kDegraded: return "degraded";
  }
  return "unknown";
}

struct TierStats {
  uint64_t hit_tokens = 0;
  uint64_t miss_tokens = 0;
  uint64_t blocks = 0;          // gauge: blocks held by the tier
  uint64_t bytes = 0;           // gauge: bytes held by the tier
  uint64_t evicted_blocks = 0;  // tier 0: by the byte budget or reclaimed for allocation; disk: cap or expiry
};

// Miss-ratio curves (cache/miss_ratio_curve.h, docs/cache.md "What more
// cache would buy"): sizes at which /metrics reports them, as multiples of
// the tier's size today.
inline constexpr std::array<double, 5> kMrcSizeFactors = {0.5, 1, 2, 4, 8};
inline constexpr std::array<std::string_view, 5> kMrcSizeFactorNames = {"0.5", "1", "2", "4", "8"};

struct MrcTierStats {
  bool present = false;           // the tier exists and its curve is kept
  uint64_t today_blocks = 0;      // the tier's size today, in blocks (tier 0: the pool or its budget; disk: the cap)
  uint64_t block_bytes = 0;       // bytes of one block on the tier
  int32_t block_tokens = 0;       // tokens of one block (a hit on it saves that many computed tokens)
  // Milliseconds the curve has counted for (it starts with the cache): the
  // accesses over this are the traffic per unit of time the curve saw.
  int64_t counted_ms = 0;
  double sampling_rate = 0;       // SHARDS' current rate R
  double reliable_from_blocks = 0;  // sizes below are estimated from fewer than 512 sampled keys (0: exact; inf: none yet)
  uint64_t accesses = 0;          // block accesses seen by the curve
  uint64_t sampled_accesses = 0;
  uint64_t samples = 0;           // sampled keys held now
  uint64_t memory_bytes = 0;      // what the estimator holds
  std::array<double, kMrcSizeFactors.size()> hit_ratio{};  // at kMrcSizeFactors x today_blocks
};

// One tier's miss-ratio curve for the admin API and the dashboard.
struct MrcCurvePoint {
  double size_factor = 0;  // of today's size
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  double hit_ratio = 0;
  bool reliable = false;   // blocks >= reliable_from_blocks
};
struct MrcCurve {
  std::string tier;  // "tier0", "disk"
  MrcTierStats stats;
  std::vector<MrcCurvePoint> points;  // size factors 2^(i/4), i = -16..16: 1/16x to 16x
};

struct CacheStats {
  uint64_t lookups = 0;            // completed lookups (the token counts below are theirs)
  uint64_t prompt_tokens = 0;
  uint64_t cancelled_lookups = 0;  // leases dropped while their lookup was pending
  uint64_t denied_shared_reads = 0;  // shared namespaces a lookup named but its team was not granted
  TierStats tier0;
  TierStats disk;

  // Whether the latent identity still holds (PrefixCache::guardIdentity).
  bool identity_stale = false;
  std::string identity_error;  // why not, when stale

  // Tier 0.
  uint64_t tier0_pinned_blocks = 0;     // gauge: indexed blocks a request also holds
  uint64_t tier0_budget_bytes = 0;      // 0: bounded by the pool only
  uint64_t reclaimed_blocks = 0;        // evicted because an allocation found the pool full
  uint64_t in_flight_blocks = 0;        // gauge: blocks claimed by a request that is computing them
  uint64_t in_flight_waits = 0;         // lookups that waited for another request's blocks
  uint64_t in_flight_wait_timeouts = 0;
  uint64_t published_blocks = 0;

  // Write-back / write-through (to the disk tier).
  uint64_t write_back_queue_depth = 0;  // gauge
  uint64_t write_back_queued_blocks = 0;
  uint64_t write_back_written_blocks = 0;
  uint64_t write_back_written_bytes = 0;
  uint64_t write_back_dropped_blocks = 0;  // queue full: dropped, never blocking a request
  uint64_t write_back_errors = 0;
  uint64_t write_through_blocks = 0;       // queued because they were reused often (or at exit)
  uint64_t export_errors = 0;              // blocks the pool failed to export for writing: not written

  // Restores (promotion from the disk tier to tier 0).
  uint64_t restored_blocks = 0;
  uint64_t restore_bytes = 0;     // stored bytes read
  double restore_seconds = 0;     // total wall time of restores (read + verify + import)
  uint64_t disk_read_errors = 0;  // RocksDB reported corruption or an I/O error
  std::array<uint64_t, kRejectReasonCount> rejected_blocks{};  // by RejectReason: never served
  bool disk_recovered_from_corruption = false;

  // Disk tier health.
  DiskState disk_state = DiskState::kNone;
  std::string disk_error;                 // why it is degraded or unwritable (no secrets: paths and errors)
  uint64_t disk_occupied_bytes = 0;       // gauge: what the store occupies on disk (files, garbage, WAL, set-aside stores)
  uint64_t disk_write_failures = 0;       // RocksDB writes that failed, and background errors
  uint64_t disk_refused_writes = 0;       // writes refused while unwritable, between retries
  uint64_t disk_unwritable_episodes = 0;  // times writing stopped working (each logged once)
  uint64_t disk_write_recoveries = 0;     // times it worked again

  // Restore-or-recompute decisions (one per lookup that found blocks on disk).
  uint64_t decisions_restore = 0;
  uint64_t decisions_recompute = 0;
  CostEstimates costs;  // the cost model's current figures

  // What more (or less) cache would buy: the curve of each tier.
  MrcTierStats mrc_tier0;
  MrcTierStats mrc_disk;

  uint64_t rejectedTotal() const {
    uint64_t n = 0;
    for (uint64_t v : rejected_blocks) n += v;
    return n;
  }
};

// What /metrics reads. Implementations are thread-safe.
class CacheMetricsSource {
 public:
  virtual ~CacheMetricsSource() = default;
  virtual CacheStats snapshot() const = 0;
  // Each tier's miss-ratio curve (tier 0, then the disk tier); none by default.
  virtual std::vector<MrcCurve> missRatioCurves() const { return {}; }
};

}  // namespace lg::cache

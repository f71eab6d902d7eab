// SchedulerStats: what the scheduler exposes for the gateway's /metrics
// (beside the cache's CacheStats) and for benchmarks. Gauges are values at
// the time of the snapshot; counters only grow.
#pragma once

#include <array>
#include <cstdint>

#include "common/histogram.h"
#include "serving/events.h"
#include "serving/request.h"

namespace lg::serving {

inline constexpr size_t kFinishReasonCount = static_cast<size_t>(FinishReason::kRefused) + 1;

struct SchedulerStats {
  // Gauges.
  int64_t queued = 0;      // waiting for admission (including preempted ones)
  int64_t looking_up = 0;  // admitted, waiting for the cache (restores, blocks in flight)
  int64_t prefilling = 0;
  int64_t decoding = 0;
  int64_t pool_blocks = 0;          // the latent pool's capacity
  int64_t pool_free_blocks = 0;
  int64_t running_blocks = 0;       // distinct blocks held by running sequences (shared prefixes once)
  int64_t cached_blocks = 0;        // used blocks no running sequence holds: the cache's (evictable unless a lookup pins them)
  int64_t reserved_blocks = 0;      // promised to admitted sequences' remaining prompt and output, not yet allocated

  // Counters.
  uint64_t submitted = 0;
  uint64_t admitted = 0;  // admissions, a resumed sequence counted again
  std::array<uint64_t, kFinishReasonCount> finished{};  // by FinishReason
  std::array<uint64_t, kRefusalCount> refused{};        // by Refusal, at submit or in the queue
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  uint64_t step_tokens = 0;     // all tokens of all steps
  uint64_t prefill_tokens = 0;  // of which prompt (or resumed) tokens
  uint64_t decode_tokens = 0;   // of which one-token decode steps
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;
  uint64_t hit_tokens = 0;      // prompt tokens served by the cache (first admissions only)
  uint64_t engine_errors = 0;

  Histogram step_seconds = Histogram::exponential(1e-3, 2, 14);        // 1 ms .. 8 s
  Histogram step_batch_tokens = Histogram::exponential(1, 2, 14);      // 1 .. 8192
  Histogram inter_token_seconds = Histogram::exponential(1e-3, 2, 14);  // gaps between a stream's tokens
  Histogram first_token_seconds = Histogram::exponential(1e-3, 2, 16);  // TTFT
  Histogram queued_seconds = Histogram::exponential(1e-3, 2, 16);
  // One constrained sequence's allowed-token mask, per step: 1 us .. 32 ms.
  Histogram constraint_mask_seconds = Histogram::exponential(1e-6, 2, 16);
};

class SchedulerMetricsSource {
 public:
  virtual ~SchedulerMetricsSource() = default;
  virtual SchedulerStats schedulerStats() const = 0;
};

}  // namespace lg::serving

// GenerationMetrics: the gateway's own metric families (docs/metrics.md),
// told every API generation's final event on the engine thread by the
// generation call (generation.h): time to first token, time per output
// token and end-to-end latency histograms, and tokens by kind. Lock-free
// (atomics only). Labels carry only bounded, non-secret values.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/histogram.h"
#include "common/metrics.h"
#include "billing/ledger.h"
#include "serving/events.h"

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
  //   why prompt tokens missed (`miss`, the generation's anatomy): tokens by
  //     cause, evicted ones by the tier they left, and generations by where
  //     and why their first computed token missed.
  void generationEnded(serving::Clock::time_point received, const serving::StreamEvent& final_event,
                       const billing::MissAnatomy& miss, serving::Clock::time_point now = serving::Clock::now());

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
  std::atomic<uint64_t> miss_tokens_[billing::kMissCauses] = {};
  std::atomic<uint64_t> evicted_tokens_[2] = {};  // by cache::BlockTier
  std::atomic<uint64_t> first_misses_[billing::kPromptRegions][billing::kMissCauses] = {};
};

}  // namespace lg::proxy

#include "proxy/gateway/generation_metrics.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace lg::proxy {

namespace {

using metrics::MetricType;
using metrics::ExpositionWriter;

double seconds(serving::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Wide enough for a CPU engine on a big model (minutes) and fine enough for a
// GPU one (milliseconds).
std::vector<double> ttftBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120};
}
std::vector<double> tpotBuckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5};
}
std::vector<double> e2eBuckets() {
  return {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1200};
}

}  // namespace

// ------------------------------------------------------------ GenerationMetrics

GenerationMetrics::GenerationMetrics() : ttft_(ttftBuckets()), tpot_(tpotBuckets()), e2e_(e2eBuckets()) {}

void GenerationMetrics::generationEnded(serving::Clock::time_point received, const serving::StreamEvent& e,
                                        const billing::MissAnatomy& miss, serving::Clock::time_point now) {
  const serving::Usage& u = e.usage;
  const serving::Timing& t = e.timing;
  const double since_received = std::max(0.0, seconds(now - received));
  if (u.completion_tokens > 0 && t.first_token > 0) {
    // What happened before submit (parsing, rendering, tokenizing, waiting
    // for the I/O thread) is the part of the wall time the engine did not see.
    const double before_submit = std::max(0.0, since_received - t.total);
    ttft_.observe(before_submit + t.first_token);
  }
  if (u.completion_tokens >= 2) tpot_.observe(t.decode / (u.completion_tokens - 1));
  if (e.finish_reason != serving::FinishReason::kRefused) e2e_.observe(since_received);
  auto add = [this](TokenKind k, int32_t n) {
    if (n > 0) tokens_[k].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  };
  add(kHitTier0, u.hit_tokens_tier0);
  add(kHitDisk, u.hit_tokens_disk);
  add(kMiss, u.miss_tokens);
  add(kOutput, u.completion_tokens);
  if (!miss.recorded()) return;
  for (size_t c = 0; c < billing::kMissCauses; ++c) {
    if (miss.tokens_by_cause[c] > 0) {
      miss_tokens_[c].fetch_add(static_cast<uint64_t>(miss.tokens_by_cause[c]), std::memory_order_relaxed);
    }
  }
  for (size_t tier = 0; tier < 2; ++tier) {
    const int64_t tokens = int64_t{u.misses.evicted_from[tier]} * u.misses.block_tokens;
    if (tokens > 0) evicted_tokens_[tier].fetch_add(static_cast<uint64_t>(tokens), std::memory_order_relaxed);
  }
  first_misses_[static_cast<size_t>(miss.first_miss_region)][static_cast<size_t>(miss.first_miss_cause)].fetch_add(
      1, std::memory_order_relaxed);
}

void GenerationMetrics::collect(ExpositionWriter& w) const {
  w.histogram("latentgate_time_to_first_token_seconds",
              "API generations: from the request received to the first generated token.", ttft_.snapshot());
  w.histogram("latentgate_time_per_output_token_seconds",
              "API generations with 2 or more output tokens: first to last token over the tokens after the first.",
              tpot_.snapshot());
  w.histogram("latentgate_e2e_request_latency_seconds",
              "API generations (not those refused in the queue): from the request received to its final event.",
              e2e_.snapshot());
  if (w.family("latentgate_tokens_total",
               "Tokens of API generations by kind: prompt tokens served by the cache's tier 0 or disk tier, prompt "
               "tokens computed (cache misses), output tokens.",
               MetricType::kCounter)) {
    w.sample({{"kind", "prompt_hit_tier0"}}, tokens(kHitTier0));
    w.sample({{"kind", "prompt_hit_disk"}}, tokens(kHitDisk));
    w.sample({{"kind", "prompt_miss"}}, tokens(kMiss));
    w.sample({{"kind", "output"}}, tokens(kOutput));
  }
  if (w.family("latentgate_prompt_miss_tokens_total",
               "Prompt tokens of API generations computed rather than reused, by why (docs/cache.md, \"Why requests "
               "miss\"): new, evicted, model_changed, in_flight, recomputed, partial_block, uncached.",
               MetricType::kCounter)) {
    for (size_t c = 0; c < billing::kMissCauses; ++c) {
      w.sample({{"cause", std::string(billing::missCauseName(static_cast<billing::MissCause>(c)))}},
               miss_tokens_[c].load(std::memory_order_relaxed));
    }
  }
  if (w.family("latentgate_prompt_evicted_tokens_total",
               "Prompt tokens computed again because their blocks had been evicted, by the tier they left last (pool: "
               "tier 0 without a disk tier behind it; disk).",
               MetricType::kCounter)) {
    for (const cache::BlockTier t : {cache::BlockTier::kPool, cache::BlockTier::kDisk}) {
      w.sample({{"tier", std::string(cache::blockTierName(t))}},
               evicted_tokens_[static_cast<size_t>(t)].load(std::memory_order_relaxed));
    }
  }
  if (w.family("latentgate_first_miss_total",
               "API generations that computed prompt tokens, by the part of the chat prompt their first computed "
               "token lies in (system, tools, history, input; none: not a chat prompt) and why it missed.",
               MetricType::kCounter)) {
    for (size_t r = 0; r < billing::kPromptRegions; ++r) {
      const std::string_view region = billing::promptRegionName(static_cast<billing::PromptRegion>(r));
      for (size_t c = 0; c < billing::kMissCauses; ++c) {
        w.sample({{"region", std::string(region.empty() ? "none" : region)},
                  {"cause", std::string(billing::missCauseName(static_cast<billing::MissCause>(c)))}},
                 first_misses_[r][c].load(std::memory_order_relaxed));
      }
    }
  }
}

}  // namespace lg::proxy

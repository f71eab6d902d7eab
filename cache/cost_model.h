// CostModel: decides, per request, whether restoring cached blocks from the
// disk tier beats recomputing them, from costs measured on this machine.
//
//   restore(bytes)        = latency + bytes / bandwidth
//   recompute([b, e))     = per_token x (e - b) + per_pair x sum_{p=b}^{e-1} (p + 1)
//
// Restoring is a read of stored bytes: a fixed per-request latency plus a
// bandwidth, fitted by exponentially weighted least squares over the observed
// (bytes, seconds) of restores (with one restore size only, the latency stays
// at its prior and the bandwidth absorbs the rest). Recomputing a token costs its weight GEMMs (constant per token)
// plus attention over every earlier position, so prefill cost per token grows
// with the context: `per_pair` is the cost of one (query, key) pair of causal
// attention; both are EWMAs over prefill calls, which report (tokens, pairs,
// seconds outside attention, seconds in attention; engine::ForwardTiming).
//
// Before any prefill has been observed the recompute cost is unknown and the
// model chooses restore (a restore is verified and falls back to recompute on
// any failure, so the optimistic choice is safe). The state serializes to a
// small string so a restarted process starts from the last process's figures
// (the disk tier keeps it; prefix_cache_persist.cc).
//
// Thread-safety: all methods may be called concurrently (one internal mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg::cache {

enum class RestorePolicy : uint8_t { kAuto, kAlways, kNever };
std::string_view restorePolicyName(RestorePolicy policy);

enum class RestoreChoice : uint8_t { kNone, kRestore, kRecompute };  // kNone: nothing to restore
std::string_view restoreChoiceName(RestoreChoice choice);

struct CostEstimates {
  double restore_bandwidth = 0;   // bytes per second
  double restore_latency = 0;     // seconds per restore request
  double per_token = 0;           // seconds per prefill token outside attention
  double per_pair = 0;            // seconds per causal attention (query, key) pair
  int64_t restores = 0;           // observations so far
  int64_t prefills = 0;
};

struct Decision {
  RestoreChoice choice = RestoreChoice::kNone;
  double restore_seconds = 0;    // estimate
  double recompute_seconds = -1;  // estimate; -1 when unknown (no prefill observed)
};

struct CostModelOptions {
  double alpha = 0.25;                        // EWMA weight of a new observation
  double prior_restore_bandwidth = 400e6;     // bytes/s until a restore was observed
  double prior_restore_latency = 0.5e-3;      // seconds
};

class CostModel {
 public:
  explicit CostModel(const CostModelOptions& options = {});

  // A restore of `bytes` took `seconds` (read, verify, import).
  void observeRestore(uint64_t bytes, double seconds);
  // A prefill of `tokens` new tokens whose attention covered `pairs`
  // (query, key) pairs, split into time outside and inside attention.
  void observePrefill(int64_t tokens, double pairs, double other_seconds, double attention_seconds);

  double restoreSeconds(uint64_t bytes) const;
  // -1 when no prefill has been observed yet.
  double recomputeSeconds(int64_t begin, int64_t end) const;

  // Restore `bytes` holding positions [begin, end), or recompute them?
  Decision decide(RestorePolicy policy, uint64_t bytes, int64_t begin, int64_t end) const;

  CostEstimates estimates() const;
  std::string serialize() const;
  // Restores a serialized state; InvalidArgument (and no change) if malformed.
  Status deserialize(std::string_view text);

  // Causal attention pairs of prefilling [begin, end) over `begin` cached positions.
  static double pairs(int64_t begin, int64_t end);

 private:
  double restoreSecondsLocked(uint64_t bytes) const;
  double recomputeSecondsLocked(int64_t begin, int64_t end) const;
  void fitRestoreLocked();

  // Exponentially weighted moments of the restore observations.
  struct Moments {
    double b = 0, s = 0, bb = 0, bs = 0;
  };

  const CostModelOptions options_;
  mutable std::mutex mu_;
  CostEstimates e_;  // guarded by mu_
  Moments m_;        // guarded by mu_
};

}  // namespace lg::cache

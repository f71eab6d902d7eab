// Private to the files that implement PrefixCache (cache/prefix_cache*.cc):
// the state of one lookup, shared by the lease, the steps of the lookup on
// the I/O pool and publishing, and the cache's counters. Nothing outside
// those files includes it; callers see only cache/prefix_cache.h.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"

namespace lg::cache {

// Where one lookup stands. kRunning: a step (advance, a restore) is working
// on it, in lookup() or on an I/O thread; kWaiting: parked in waiters_ until
// the awaited block is published or abandoned, or the wait budget ends;
// kReady: the lease owns it; kDone: released and cleaned up.
enum class LeasePhase : uint8_t { kRunning, kWaiting, kReady, kDone };

struct LeaseState {
  // Fixed by lookup().
  uint64_t id = 0;
  std::string ns;                                // the team namespace's key: publishes go here
  std::vector<int32_t> ids;
  std::vector<Digest> keys;                      // ns chain keys of the prompt's full blocks
  std::vector<std::vector<Digest>> shared_keys;  // per readable shared namespace, up to max_hit
  const std::vector<Digest>* hit_keys = nullptr;  // `keys` or one of `shared_keys`
  std::string hit_ns;                            // where the hit blocks are found
  Digest ns_tag;                                 // namespaceTag(ns)
  Digest hit_ns_tag;                             // namespaceTag(hit_ns)
  int32_t block_tokens = 0;
  int32_t max_hit = 0;  // blocks a hit may cover: the last prompt token is always computed
  int32_t n_full = 0;   // the prompt's full blocks
  std::chrono::milliseconds wait{0};
  std::chrono::steady_clock::time_point deadline;
  RestorePolicy policy = RestorePolicy::kAuto;
  std::function<void()> on_ready;

  // Guarded by the cache's mu_.
  LeasePhase phase = LeasePhase::kRunning;
  bool cancelled = false;  // released while kRunning: the running step cleans up
  Digest awaited;          // kWaiting: the in-flight key
  bool deadline_timer = false;

  // Written by the one step that runs at a time; read by the lease once ready.
  int32_t next = 0;  // tier-0 walk position (block index)
  std::vector<engine::BlockId> blocks;  // references held for the caller
  bool taken = false;
  std::vector<int32_t> claimed;  // block indices claimed in flight, not yet published (mu_ once ready)
  int32_t published_upto = 0;
  int32_t hit_blocks = 0;
  int32_t tier0_blocks = 0;
  int32_t disk_blocks = 0;
  Decision decision;
  double restore_seconds = 0;
  uint64_t restore_bytes = 0;
  bool waited = false;
  LookupMisses misses;  // set when the lookup finishes

  // The token ids of the prompt's block j.
  std::vector<int32_t> blockIds(int32_t j) const {
    return {ids.begin() + static_cast<ptrdiff_t>(j) * block_tokens, ids.begin() + static_cast<ptrdiff_t>(j + 1) * block_tokens};
  }

  std::atomic<bool> ready{false};
  mutable std::mutex ready_mu;
  mutable std::condition_variable ready_cv;
};

// The counters snapshot() reports; each is bumped without mu_.
struct PrefixCache::Counters {
  std::atomic<uint64_t> lookups{0}, prompt_tokens{0}, cancelled{0}, denied_shared_reads{0};
  std::atomic<uint64_t> tier0_hit{0}, tier0_miss{0}, disk_hit{0}, disk_miss{0};
  std::atomic<uint64_t> tier0_evicted{0}, reclaimed{0}, waits{0}, wait_timeouts{0}, published{0};
  std::atomic<uint64_t> write_through{0}, export_errors{0};
  std::atomic<uint64_t> restored{0}, restore_bytes{0}, restore_nanos{0};
  std::array<std::atomic<uint64_t>, kRejectReasonCount> rejected{};
  std::atomic<uint64_t> decisions_restore{0}, decisions_recompute{0};
};

}  // namespace lg::cache

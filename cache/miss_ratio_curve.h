// Miss-ratio curves estimated online with SHARDS (spatially hashed sampling:
// Waldspurger, Park, Garthwaite, Ahmad, "Efficient MRC Construction with
// SHARDS", FAST 2015): what hit ratio an LRU cache of S blocks would have
// had on the block accesses seen so far, for every S at once.
//
// A key is sampled when its hash value (the top 32 bits of its first 8 bytes:
// block keys are SHA-256 digests, already uniform) is below a threshold T out
// of P = 2^32; the sampling rate is R = T / P. Only sampled keys are kept, in
// an LRU stack of the sample: each key's last access time in an open-
// addressing table, and the live times in a Fenwick tree, so a reuse distance
// (the sampled keys used since, counted in O(log n)) is one prefix sum. A
// distance d among the sample stands for d / R blocks of the whole stream,
// and each sampled access stands for 1 / R accesses (its weight). The curve is
// the weighted histogram of scaled distances over every access counted;
// SHARDS_adj's correction puts the difference between the accesses counted
// and the sampled weight into the first bucket.
//
// Fixed size (SHARDS' bounded variant): when more than `max_samples` keys
// are held, T drops to the largest hash value in the sample and every key at
// or above it is dropped (a max-heap of the sampled keys finds them), so the
// memory is bounded whatever the traffic; later samples weigh 1 / (new R).
//
// A request is one batch of accesses, as the prefix cache serves it: every
// block of the request is looked up against the stack as it was before the
// request (its distance is its position then), then the request's blocks move
// to the top, its first block most recent (the cache touches a prefix deepest
// first). With one access per request this is Mattson's LRU stack exactly.
//
// Memory: per sampled key at most 12 bytes of table at a load of 3/8 to 3/4
// (32 bytes), 8 of heap, at most 8 of Fenwick tree (times are renumbered
// when they run out) and 8 of scratch for that renumbering: <= 56 bytes, plus
// a fixed histogram of 23 KB. memoryBytes() counts every buffer's capacity.
//
// Thread-safety: record() may be called from any thread. The sampling test
// runs without a lock (an atomic threshold); only requests with a sampled
// key take the estimator's own mutex, for O(log n) per sampled key.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "cache/fingerprint.h"

namespace lg::cache {

struct MissRatioCurveOptions {
  double sampling_rate = 0.01;  // the initial rate R, in (0, 1]
  size_t max_samples = 16384;   // sampled keys held at most (the rate drops beyond); >= 1
};

// One read of the curve.
struct MissRatioCurveSnapshot {
  double sampling_rate = 0;       // the current R
  uint64_t accesses = 0;          // every access counted
  uint64_t sampled_accesses = 0;  // of those, the sampled ones
  uint64_t samples = 0;           // sampled keys held now
  uint64_t memory_bytes = 0;      // every buffer the estimator holds
  // Sizes below are estimated from few samples: kMinSampledBelow / R; 0 at
  // rate 1 (exact); infinity before kMinSampledBelow sampled accesses.
  double reliable_from_blocks = 0;
  std::vector<double> hit_ratio;  // at each size asked, in blocks (0 while nothing was sampled)
};

class MissRatioCurve {
 public:
  static constexpr uint64_t kModulus = uint64_t{1} << 32;  // P
  // The estimate at a size S rests on the sampled keys that fit in S x R
  // blocks; from this many on it is reliable (within 2 points of hit rate on
  // the traces of tests/cache/miss_ratio_curve_test.cc), below it a few
  // sampled keys decide a steep curve. reliableFrom() = this / R.
  static constexpr double kMinSampledBelow = 512;

  explicit MissRatioCurve(const MissRatioCurveOptions& options);
  MissRatioCurve(const MissRatioCurve&) = delete;
  MissRatioCurve& operator=(const MissRatioCurve&) = delete;

  // The 64-bit key of a block key (its first 8 bytes).
  static uint64_t keyOf(const Digest& d);

  // One request's accesses, in prompt order (see the top of this file).
  // `keys` must be uniformly distributed (keyOf, or a good hash).
  void record(std::span<const uint64_t> keys);
  void record(std::span<const Digest> keys);
  // One access: a request of one block.
  void recordOne(uint64_t key) { record(std::span<const uint64_t>(&key, 1)); }

  // The hit ratio an LRU cache of each of `sizes` blocks would have had.
  MissRatioCurveSnapshot snapshot(std::span<const double> sizes) const;
  double samplingRate() const;

 private:
  // Whether `key` is in the sample at threshold t.
  static bool sampled(uint64_t key, uint64_t t) { return (key >> 32) < t; }
  // batch_'s sampled keys (at threshold t): distances, then the stack.
  void recordBatchLocked(uint64_t t);
  size_t findLocked(uint64_t key) const;     // a slot, or kNone
  void insertLocked(uint64_t key, uint32_t time);
  void eraseLocked(uint64_t key);             // from the table and the Fenwick tree
  void growTableLocked();
  void fenwickAddLocked(uint32_t time, int32_t delta);
  uint32_t fenwickPrefixLocked(uint32_t time) const;  // live times <= time
  uint32_t nextTimeLocked();                  // renumbers when times run out
  void shrinkSampleLocked();                  // fixed size: lower T until it fits
  void addLocked(double distance, double weight);
  size_t memoryBytesLocked() const;

  static constexpr size_t kNone = ~size_t{0};
  const size_t max_samples_;
  std::atomic<uint64_t> threshold_;  // T: written under mu_, read by the sampling test
  std::atomic<uint64_t> accesses_{0};

  mutable std::mutex mu_;
  uint64_t sampled_accesses_ = 0;   // guarded by mu_
  std::vector<uint64_t> keys_;      // guarded by mu_: the table's keys (0: empty)
  std::vector<uint32_t> times_;     // guarded by mu_: each key's last access time
  size_t count_ = 0;                // guarded by mu_: keys held
  std::vector<uint64_t> heap_;      // guarded by mu_: the sampled keys, a max-heap
  std::vector<int32_t> fenwick_;    // guarded by mu_: 1-based, live times
  uint32_t next_time_ = 1;          // guarded by mu_
  std::vector<std::pair<uint32_t, uint32_t>> scratch_;  // guarded by mu_: (time, slot) when renumbering
  std::vector<double> hist_;        // guarded by mu_: weight by scaled distance bucket
  double cold_weight_ = 0;          // guarded by mu_: first accesses of sampled keys
  double sampled_weight_ = 0;       // guarded by mu_: sum of 1 / R over sampled accesses
  std::vector<uint64_t> batch_;     // guarded by mu_: one request's sampled keys
  std::vector<double> batch_dist_;  // guarded by mu_
};

}  // namespace lg::cache

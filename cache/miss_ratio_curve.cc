#include "cache/miss_ratio_curve.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/check.h"

namespace lg::cache {
namespace {

// Histogram of scaled distances: exact below 128, then 64 buckets per octave
// (a bucket is 1/64 of its octave wide: 1.6%), up to 2^53 blocks.
constexpr size_t kLinear = 128;
constexpr int kSubBits = 6;
constexpr int kFirstExp = 7;   // log2(kLinear)
constexpr int kLastExp = 52;
constexpr size_t kBuckets = kLinear + static_cast<size_t>(kLastExp - kFirstExp + 1) * (size_t{1} << kSubBits);

size_t bucketOf(double x) {
  if (x < static_cast<double>(kLinear)) return x <= 0 ? 0 : static_cast<size_t>(x);
  const uint64_t d = x >= 0x1p53 ? (uint64_t{1} << 53) - 1 : static_cast<uint64_t>(x);
  const int e = 63 - std::countl_zero(d);
  const uint64_t sub = (d >> (e - kSubBits)) & ((uint64_t{1} << kSubBits) - 1);
  return kLinear + static_cast<size_t>(e - kFirstExp) * (size_t{1} << kSubBits) + static_cast<size_t>(sub);
}

double bucketLow(size_t i) {
  if (i < kLinear) return static_cast<double>(i);
  const size_t j = i - kLinear;
  const int e = static_cast<int>(j >> kSubBits) + kFirstExp;
  const double sub = static_cast<double>(j & ((size_t{1} << kSubBits) - 1));
  return std::ldexp(static_cast<double>(size_t{1} << kSubBits) + sub, e - kSubBits);
}

constexpr size_t kInitialSlots = 64;
constexpr uint32_t kMinTimes = 1024;

size_t slotOf(uint64_t key, size_t mask) { return static_cast<size_t>(key) & mask; }

}  // namespace

MissRatioCurve::MissRatioCurve(const MissRatioCurveOptions& options)
    : max_samples_(std::max<size_t>(options.max_samples, 1)),
      threshold_(std::clamp<uint64_t>(static_cast<uint64_t>(std::llround(options.sampling_rate * static_cast<double>(kModulus))),
                                      1, kModulus)),
      keys_(kInitialSlots, 0),
      times_(kInitialSlots, 0),
      fenwick_(kMinTimes + 1, 0),
      hist_(kBuckets, 0.0) {}

uint64_t MissRatioCurve::keyOf(const Digest& d) {
  uint64_t k;
  std::memcpy(&k, d.bytes.data(), sizeof k);
  return k == 0 ? 1 : k;  // 0 marks an empty slot
}

double MissRatioCurve::samplingRate() const {
  return static_cast<double>(threshold_.load(std::memory_order_relaxed)) / static_cast<double>(kModulus);
}

void MissRatioCurve::record(std::span<const Digest> keys) {
  if (keys.empty()) return;
  accesses_.fetch_add(keys.size(), std::memory_order_relaxed);
  uint64_t t = threshold_.load(std::memory_order_relaxed);
  bool any = false;
  for (const Digest& d : keys) any |= sampled(keyOf(d), t);
  if (!any) return;
  std::lock_guard lock(mu_);
  t = threshold_.load(std::memory_order_relaxed);  // it may have dropped meanwhile
  batch_.clear();
  for (const Digest& d : keys) {
    if (const uint64_t k = keyOf(d); sampled(k, t)) batch_.push_back(k);
  }
  recordBatchLocked(t);
}

void MissRatioCurve::record(std::span<const uint64_t> keys) {
  if (keys.empty()) return;
  accesses_.fetch_add(keys.size(), std::memory_order_relaxed);
  uint64_t t = threshold_.load(std::memory_order_relaxed);
  bool any = false;
  for (uint64_t k : keys) any |= sampled(k == 0 ? 1 : k, t);
  if (!any) return;
  std::lock_guard lock(mu_);
  t = threshold_.load(std::memory_order_relaxed);
  batch_.clear();
  for (uint64_t k : keys) {
    k = k == 0 ? 1 : k;
    if (sampled(k, t)) batch_.push_back(k);
  }
  recordBatchLocked(t);
}

void MissRatioCurve::recordBatchLocked(uint64_t t) {
  const std::vector<uint64_t>& batch = batch_;
  if (batch.empty()) return;
  const double weight = static_cast<double>(kModulus) / static_cast<double>(t);  // 1 / R
  // Distances against the stack as it was before the request.
  batch_dist_.clear();
  for (uint64_t k : batch) {
    const size_t slot = findLocked(k);
    if (slot == kNone) {
      batch_dist_.push_back(-1);
    } else {
      batch_dist_.push_back(static_cast<double>(count_ - fenwickPrefixLocked(times_[slot])));
    }
  }
  for (double d : batch_dist_) {
    ++sampled_accesses_;
    sampled_weight_ += weight;
    if (d < 0) {
      cold_weight_ += weight;
    } else {
      addLocked(d * weight, weight);
    }
  }
  // Then the request's keys to the top, the first one most recent.
  for (size_t i = batch.size(); i-- > 0;) {
    const uint32_t time = nextTimeLocked();  // may renumber: read times_ after it
    const size_t slot = findLocked(batch[i]);
    if (slot != kNone) {
      fenwickAddLocked(times_[slot], -1);
      times_[slot] = time;
    } else {
      insertLocked(batch[i], time);
    }
    fenwickAddLocked(time, +1);
  }
  if (count_ > max_samples_) shrinkSampleLocked();
}

void MissRatioCurve::addLocked(double distance, double weight) { hist_[bucketOf(distance)] += weight; }

size_t MissRatioCurve::findLocked(uint64_t key) const {
  const size_t mask = keys_.size() - 1;
  for (size_t i = slotOf(key, mask);; i = (i + 1) & mask) {
    if (keys_[i] == key) return i;
    if (keys_[i] == 0) return kNone;
  }
}

void MissRatioCurve::growTableLocked() {
  std::vector<uint64_t> keys(keys_.size() * 2, 0);
  std::vector<uint32_t> times(keys.size(), 0);
  const size_t mask = keys.size() - 1;
  for (size_t s = 0; s < keys_.size(); ++s) {
    if (keys_[s] == 0) continue;
    size_t i = slotOf(keys_[s], mask);
    while (keys[i] != 0) i = (i + 1) & mask;
    keys[i] = keys_[s];
    times[i] = times_[s];
  }
  keys_.swap(keys);
  times_.swap(times);
}

void MissRatioCurve::insertLocked(uint64_t key, uint32_t time) {
  if ((count_ + 1) * 4 > keys_.size() * 3) growTableLocked();
  const size_t mask = keys_.size() - 1;
  size_t i = slotOf(key, mask);
  while (keys_[i] != 0) i = (i + 1) & mask;
  keys_[i] = key;
  times_[i] = time;
  ++count_;
  if (heap_.size() == heap_.capacity()) {
    // Grow to what the bound needs, not to twice it.
    heap_.reserve(std::max(heap_.size() + 1, std::min(heap_.capacity() * 2 + 16, max_samples_ + 64)));
  }
  heap_.push_back(key);
  std::push_heap(heap_.begin(), heap_.end());
}

void MissRatioCurve::eraseLocked(uint64_t key) {
  size_t i = findLocked(key);
  LG_CHECK(i != kNone);
  fenwickAddLocked(times_[i], -1);
  // Backward-shift deletion keeps every probe sequence unbroken.
  const size_t mask = keys_.size() - 1;
  for (size_t j = (i + 1) & mask; keys_[j] != 0; j = (j + 1) & mask) {
    const size_t home = slotOf(keys_[j], mask);
    // Move j into the hole at i unless its home lies cyclically in (i, j].
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    keys_[i] = keys_[j];
    times_[i] = times_[j];
    i = j;
  }
  keys_[i] = 0;
  times_[i] = 0;
  --count_;
}

void MissRatioCurve::shrinkSampleLocked() {
  while (count_ > max_samples_ && !heap_.empty()) {
    const uint64_t t = heap_.front() >> 32;
    if (t == 0) break;  // cannot sample less than one hash value
    threshold_.store(t, std::memory_order_relaxed);
    while (!heap_.empty() && (heap_.front() >> 32) >= t) {
      std::pop_heap(heap_.begin(), heap_.end());
      const uint64_t key = heap_.back();
      heap_.pop_back();
      eraseLocked(key);
    }
  }
}

void MissRatioCurve::fenwickAddLocked(uint32_t time, int32_t delta) {
  for (size_t i = time; i < fenwick_.size(); i += i & (~i + 1)) fenwick_[i] += delta;
}

uint32_t MissRatioCurve::fenwickPrefixLocked(uint32_t time) const {
  int64_t sum = 0;
  for (size_t i = time; i > 0; i -= i & (~i + 1)) sum += fenwick_[i];
  return static_cast<uint32_t>(sum);
}

uint32_t MissRatioCurve::nextTimeLocked() {
  if (next_time_ < fenwick_.size()) return next_time_++;
  // Times ran out: renumber the live ones 1..n in order and rebuild the tree
  // with room for as many again.
  scratch_.clear();
  if (scratch_.capacity() < count_) scratch_.reserve(std::max<size_t>(count_, std::min(count_ * 5 / 4, max_samples_ + 64)));
  for (size_t s = 0; s < keys_.size(); ++s) {
    if (keys_[s] != 0) scratch_.emplace_back(times_[s], static_cast<uint32_t>(s));
  }
  std::sort(scratch_.begin(), scratch_.end());
  for (size_t i = 0; i < scratch_.size(); ++i) times_[scratch_[i].second] = static_cast<uint32_t>(i + 1);
  const size_t n = scratch_.size();
  const size_t size = std::max<size_t>(kMinTimes, 2 * n + 64) + 1;
  fenwick_.assign(size, 0);
  for (size_t i = 1; i <= n; ++i) fenwick_[i] = 1;
  for (size_t i = 1; i < size; ++i) {
    const size_t j = i + (i & (~i + 1));
    if (j < size) fenwick_[j] += fenwick_[i];
  }
  next_time_ = static_cast<uint32_t>(n + 1);
  return next_time_++;
}

size_t MissRatioCurve::memoryBytesLocked() const {
  return sizeof(*this) + keys_.capacity() * sizeof(uint64_t) + times_.capacity() * sizeof(uint32_t) +
         heap_.capacity() * sizeof(uint64_t) + fenwick_.capacity() * sizeof(int32_t) +
         scratch_.capacity() * sizeof(scratch_[0]) + hist_.capacity() * sizeof(double) +
         batch_.capacity() * sizeof(uint64_t) + batch_dist_.capacity() * sizeof(double);
}

MissRatioCurveSnapshot MissRatioCurve::snapshot(std::span<const double> sizes) const {
  MissRatioCurveSnapshot out;
  out.accesses = accesses_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  out.sampling_rate = samplingRate();
  // At rate 1 the curve is exact; below it, a size is reliable once 512
  // sampled keys fit in it, and none is before 512 sampled accesses at all.
  if (out.sampling_rate >= 1.0) {
    out.reliable_from_blocks = 0;
  } else if (static_cast<double>(sampled_accesses_) < kMinSampledBelow) {
    out.reliable_from_blocks = std::numeric_limits<double>::infinity();
  } else {
    out.reliable_from_blocks = kMinSampledBelow / out.sampling_rate;
  }
  out.sampled_accesses = sampled_accesses_;
  out.samples = count_;
  out.memory_bytes = memoryBytesLocked();
  out.hit_ratio.assign(sizes.size(), 0.0);
  const double total = static_cast<double>(out.accesses);
  // Nothing sampled yet: no estimate (SHARDS_adj would call every access a hit).
  if (total <= 0 || sampled_accesses_ == 0) return out;
  // SHARDS_adj: what the sample over- or under-counted (the sampled weight
  // against the accesses counted), as hits at distance 0.
  const double adjust = total - sampled_weight_;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const double size = sizes[k];
    if (!(size > 0)) continue;
    double hits = adjust;
    for (size_t i = 0; i < kBuckets; ++i) {
      const double lo = bucketLow(i);
      if (lo >= size) break;
      const double hi = i + 1 < kBuckets ? bucketLow(i + 1) : lo * 2;
      hits += size >= hi ? hist_[i] : hist_[i] * (size - lo) / (hi - lo);
    }
    out.hit_ratio[k] = std::clamp(hits / total, 0.0, 1.0);
  }
  return out;
}

}  // namespace lg::cache

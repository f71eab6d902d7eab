// The SHARDS estimator (cache/miss_ratio_curve.h) against an exact LRU stack
// over the same traces (tests/cache/mrc_traces.h), its memory bound, and its
// feed from the prefix cache.
#include "cache/miss_ratio_curve.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/cache/mrc_traces.h"

namespace lg::cache::testing {
namespace {

constexpr double kMaxError = 0.02;  // 2 points of hit rate
// Sizes are compared from where this many sampled keys fit in the cache
// (size x rate): below it too few sampled keys decide the estimate.
constexpr double kMinSampled = MissRatioCurve::kMinSampledBelow;

// The largest difference between the estimate and the exact curve at `sizes`.
double maxError(const MissRatioCurve& est, const ExactLruStack& exact, const std::vector<double>& sizes,
                bool print) {
  const MissRatioCurveSnapshot snap = est.snapshot(sizes);
  double worst = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double want = exact.hitRatio(sizes[i]);
    worst = std::max(worst, std::abs(snap.hit_ratio[i] - want));
    if (print) std::printf("  size %8.0f  exact %.4f  shards %.4f\n", sizes[i], want, snap.hit_ratio[i]);
  }
  return worst;
}

TEST(MissRatioCurveTest, EveryKeySampledIsTheExactStack) {
  // At rate 1 nothing is left out: the estimate is Mattson's curve exactly
  // (up to the histogram's buckets, which are exact below 128).
  MissRatioCurve est({.sampling_rate = 1.0, .max_samples = 1 << 20});
  ExactLruStack exact;
  const SyntheticTrace t = knownDistanceTrace(4000, 3, 0.2);
  for (uint64_t k : t.keys) {
    est.recordOne(k);
    exact.recordOne(k);
  }
  std::vector<double> sizes;
  for (int s = 1; s <= 128; ++s) sizes.push_back(s);
  const MissRatioCurveSnapshot snap = est.snapshot(sizes);
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_NEAR(snap.hit_ratio[i], exact.hitRatio(sizes[i]), 1e-12);
  EXPECT_EQ(snap.accesses, 4000u);
  EXPECT_EQ(snap.sampled_accesses, 4000u);
  EXPECT_EQ(snap.samples, exact.distinct());
}

TEST(MissRatioCurveTest, NothingSampledIsNoEstimateAndRateOneIsExactEverywhere) {
  // At 1% a handful of accesses sample nothing: the curve says nothing
  // (not "every access hit", which SHARDS_adj's correction would make of it).
  MissRatioCurve low({.sampling_rate = 0.01, .max_samples = 100});
  uint64_t k = 0;
  for (uint64_t i = 0; k == 0; ++i) {
    if ((splitmix64(i) >> 32) >= static_cast<uint64_t>(0.01 * 4294967296.0)) k = splitmix64(i);
  }
  for (int i = 0; i < 10; ++i) low.recordOne(k);  // 9 of 10 would hit: an unsampled key
  const std::vector<double> sizes = {1, 1000};
  MissRatioCurveSnapshot s = low.snapshot(sizes);
  EXPECT_EQ(s.accesses, 10u);
  EXPECT_EQ(s.sampled_accesses, 0u);
  EXPECT_EQ(s.hit_ratio, (std::vector<double>{0, 0}));
  EXPECT_TRUE(std::isinf(s.reliable_from_blocks));
  MissRatioCurve exact({.sampling_rate = 1.0, .max_samples = 100});
  for (int i = 0; i < 10; ++i) exact.recordOne(k);
  s = exact.snapshot(sizes);
  EXPECT_EQ(s.reliable_from_blocks, 0);
  EXPECT_DOUBLE_EQ(s.hit_ratio[0], 0.9);
}

TEST(MissRatioCurveTest, SyntheticTraceWithKnownReuseDistances) {
  const SyntheticTrace t = knownDistanceTrace(400000, 11);
  ExactLruStack exact;
  for (size_t i = 0; i < t.keys.size(); ++i) {
    // The reference itself finds exactly the distances the trace was built with.
    ASSERT_EQ(exact.recordOne(t.keys[i])[0], t.distances[i]) << "access " << i;
  }
  for (const double rate : {0.1, 0.05}) {
    const std::vector<double> sizes = geometricSizes(kMinSampled / rate, 2.0 * static_cast<double>(exact.distinct()));
    MissRatioCurve est({.sampling_rate = rate, .max_samples = 1 << 20});
    for (uint64_t k : t.keys) est.recordOne(k);
    const double err = maxError(est, exact, sizes, rate == 0.1);
    std::printf("synthetic, rate %.2f: %zu distinct keys, %llu samples, max error %.4f\n", rate, exact.distinct(),
                static_cast<unsigned long long>(est.snapshot({}).samples), err);
    EXPECT_LE(err, kMaxError) << "rate " << rate;
  }
}

TEST(MissRatioCurveTest, AgentTraceWithinTwoPoints) {
  const auto trace = agentTrace({.teams = 16, .open_conversations = 64, .requests = 12000});
  ExactLruStack exact;
  for (const auto& req : trace) exact.record(req);
  for (const double rate : {0.4, 0.1, 0.05}) {
    const std::vector<double> sizes = geometricSizes(kMinSampled / rate, 2.0 * static_cast<double>(exact.distinct()));
    MissRatioCurve est({.sampling_rate = rate, .max_samples = 1 << 20});
    for (const auto& req : trace) est.record(req);
    const double err = maxError(est, exact, sizes, rate == 0.4);
    std::printf("agent, rate %.2f: %llu accesses, %zu distinct keys, %llu samples, max error %.4f\n", rate,
                static_cast<unsigned long long>(exact.accesses()), exact.distinct(),
                static_cast<unsigned long long>(est.snapshot({}).samples), err);
    EXPECT_LE(err, kMaxError) << "rate " << rate;
  }
}

TEST(MissRatioCurveTest, FixedSizeLowersTheRateAndStaysAccurate) {
  const SyntheticTrace t = knownDistanceTrace(400000, 5);
  ExactLruStack exact;
  for (uint64_t k : t.keys) exact.recordOne(k);
  // Start at rate 1 with room for 8,000 keys: the rate must fall to about
  // 8,000 / distinct keys.
  MissRatioCurve est({.sampling_rate = 1.0, .max_samples = 8000});
  for (uint64_t k : t.keys) est.recordOne(k);
  const MissRatioCurveSnapshot snap = est.snapshot({});
  EXPECT_LE(snap.samples, 8000u);
  EXPECT_LT(snap.sampling_rate, 8000.0 / static_cast<double>(exact.distinct()) * 1.2);
  EXPECT_GT(snap.sampling_rate, 8000.0 / static_cast<double>(exact.distinct()) * 0.6);
  const double err = maxError(est, exact,
                              geometricSizes(kMinSampled / snap.sampling_rate, 2.0 * static_cast<double>(exact.distinct())),
                              false);
  std::printf("fixed size 8000: rate %.4f, max error %.4f\n", snap.sampling_rate, err);
  EXPECT_LE(err, kMaxError);
}

TEST(MissRatioCurveTest, MemoryStaysUnderTheBoundOnALongTrace) {
  // (1) Fixed size: 4 million accesses over an ever-growing key space (the
  // worst case: every key is new) never hold more than the bound.
  constexpr size_t kMax = 4096;
  MissRatioCurve bounded({.sampling_rate = 0.05, .max_samples = kMax});
  constexpr size_t kFixedBytes = 32 * 1024;  // the histogram and the object
  size_t peak = 0;
  for (uint64_t i = 0; i < 4'000'000; ++i) {
    bounded.recordOne(splitmix64(i));
    if (i % 100'000 == 0) peak = std::max<size_t>(peak, bounded.snapshot({}).memory_bytes);
  }
  const MissRatioCurveSnapshot b = bounded.snapshot({});
  peak = std::max<size_t>(peak, b.memory_bytes);
  EXPECT_LE(b.samples, kMax);
  EXPECT_LE(peak, kMax * 56 + kFixedBytes) << "peak " << peak;
  std::printf("bounded: %llu samples, rate %.6f, peak %zu bytes\n", static_cast<unsigned long long>(b.samples),
              b.sampling_rate, peak);

  // (2) Per sampled key: 10 million distinct blocks at 1% (100,000 keys in
  // the sample, under a bound it never reaches) stay within 56 bytes per
  // sampled key plus the fixed part: 0.57 MB per million blocks seen.
  MissRatioCurve rate({.sampling_rate = 0.01, .max_samples = 1 << 20});
  for (uint64_t i = 0; i < 10'000'000; ++i) rate.recordOne(splitmix64(i ^ 0x5555));
  const MissRatioCurveSnapshot r = rate.snapshot({});
  EXPECT_NEAR(static_cast<double>(r.samples), 100000, 1500);
  EXPECT_LE(r.memory_bytes, r.samples * 56 + kFixedBytes);
  const double per_million = static_cast<double>(r.memory_bytes) / 10.0;
  std::printf("rate 1%%: %llu samples, %llu bytes: %.1f bytes per sampled key, %.0f bytes per million blocks\n",
              static_cast<unsigned long long>(r.samples), static_cast<unsigned long long>(r.memory_bytes),
              static_cast<double>(r.memory_bytes) / static_cast<double>(r.samples), per_million);
  EXPECT_LE(per_million, 1e6);
}

TEST(MissRatioCurveTest, RenumberingAndDeletionKeepDistancesExact) {
  // Many accesses over few keys run the times out again and again; a small
  // bound deletes from the middle of probe chains. At rate 1 with no
  // shrinking, distances must stay exact throughout.
  MissRatioCurve est({.sampling_rate = 1.0, .max_samples = 1 << 20});
  ExactLruStack exact;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t k = splitmix64(rng() % 300);
    est.recordOne(k);
    exact.recordOne(k);
  }
  std::vector<double> sizes;
  for (int s = 1; s <= 127; ++s) sizes.push_back(s);
  const MissRatioCurveSnapshot snap = est.snapshot(sizes);
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_NEAR(snap.hit_ratio[i], exact.hitRatio(sizes[i]), 1e-12);

  // Shrinking: the keys held are exactly those below the threshold.
  MissRatioCurve small({.sampling_rate = 1.0, .max_samples = 100});
  for (uint64_t i = 0; i < 50000; ++i) small.recordOne(splitmix64(i % 5000));
  const MissRatioCurveSnapshot s = small.snapshot({});
  EXPECT_LE(s.samples, 100u);
  EXPECT_GT(s.samples, 60u);
  uint64_t below = 0;
  const auto t = static_cast<uint64_t>(std::llround(s.sampling_rate * static_cast<double>(MissRatioCurve::kModulus)));
  for (uint64_t i = 0; i < 5000; ++i) below += (splitmix64(i) >> 32) < t ? 1 : 0;
  EXPECT_EQ(below, s.samples);
}

}  // namespace
}  // namespace lg::cache::testing

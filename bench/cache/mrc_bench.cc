// mrc_bench: the SHARDS miss-ratio curve estimator (cache/miss_ratio_curve.h)
// against an exact LRU stack on the agent-like and the known-distance traces
// of its test (tests/cache/mrc_traces.h), its cost per block access next to
// the SHA-256 chaining every lookup already pays, and its memory per million
// blocks (docs/benchmarks.md, "Miss-ratio curves").
//
//   build/bench/cache/mrc_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache/fingerprint.h"
#include "cache/miss_ratio_curve.h"
#include "tests/cache/mrc_traces.h"

namespace {

using lg::cache::Digest;
using lg::cache::MissRatioCurve;
using lg::cache::MissRatioCurveOptions;
using lg::cache::testing::AgentTraceOptions;
using lg::cache::testing::ExactLruStack;
using Clock = std::chrono::steady_clock;

struct ErrorStats {
  double max_reliable = 0, mean_reliable = 0, max_all = 0;
  double rate = 0;
  uint64_t samples = 0, memory = 0;
};

ErrorStats compare(const MissRatioCurve& est, const ExactLruStack& exact) {
  const auto sizes = lg::cache::testing::geometricSizes(16, 2.0 * static_cast<double>(exact.distinct()));
  const auto snap = est.snapshot(sizes);
  ErrorStats e;
  e.rate = snap.sampling_rate;
  e.samples = snap.samples;
  e.memory = snap.memory_bytes;
  int n = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double err = std::abs(snap.hit_ratio[i] - exact.hitRatio(sizes[i]));
    e.max_all = std::max(e.max_all, err);
    if (sizes[i] >= snap.reliable_from_blocks) {
      e.max_reliable = std::max(e.max_reliable, err);
      e.mean_reliable += err;
      ++n;
    }
  }
  if (n > 0) e.mean_reliable /= n;
  return e;
}

void printRow(const char* trace, const std::string& variant, uint64_t seed, const ErrorStats& e) {
  std::printf("| %s | %s | %llu | %.4f | %llu | %.2f | %.2f | %.2f | %.0f |\n", trace, variant.c_str(),
              static_cast<unsigned long long>(seed), e.rate, static_cast<unsigned long long>(e.samples),
              100 * e.max_reliable, 100 * e.mean_reliable, 100 * e.max_all, static_cast<double>(e.memory) / 1024);
}

void errors(bool quick) {
  std::printf("\n## Error against the exact LRU stack (points of hit rate)\n\n");
  std::printf("| trace | variant | seed | rate (final) | samples | max err, reliable sizes | mean err, reliable | "
              "max err, all sizes >= 16 | memory KiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  const int seeds = quick ? 1 : 3;
  for (int s = 0; s < seeds; ++s) {
    const uint64_t seed = 11 + static_cast<uint64_t>(s) * 101;
    const auto t = lg::cache::testing::knownDistanceTrace(quick ? 150000 : 400000, seed);
    ExactLruStack exact;
    for (uint64_t k : t.keys) exact.recordOne(k);
    for (const double rate : {0.1, 0.01}) {
      MissRatioCurve est({.sampling_rate = rate, .max_samples = 1 << 20});
      for (uint64_t k : t.keys) est.recordOne(k);
      printRow("synthetic", "rate " + std::to_string(rate).substr(0, 4), seed, compare(est, exact));
    }
    MissRatioCurve fixed({.sampling_rate = 1.0, .max_samples = 8192});
    for (uint64_t k : t.keys) fixed.recordOne(k);
    printRow("synthetic", "fixed 8192", seed, compare(fixed, exact));
  }
  for (int s = 0; s < seeds; ++s) {
    const uint64_t seed = 7 + static_cast<uint64_t>(s) * 101;
    AgentTraceOptions o;
    o.teams = 16;
    o.open_conversations = 64;
    o.requests = quick ? 4000 : 12000;
    o.seed = seed;
    const auto trace = lg::cache::testing::agentTrace(o);
    ExactLruStack exact;
    for (const auto& r : trace) exact.record(r);
    for (const double rate : {0.4, 0.1, 0.01}) {
      MissRatioCurve est({.sampling_rate = rate, .max_samples = 1 << 20});
      for (const auto& r : trace) est.record(r);
      printRow("agent", "rate " + std::to_string(rate).substr(0, 4), seed, compare(est, exact));
    }
    MissRatioCurve fixed({.sampling_rate = 1.0, .max_samples = 8192});
    for (const auto& r : trace) fixed.record(r);
    printRow("agent", "fixed 8192", seed, compare(fixed, exact));
  }
}

// Requests of 70 random block keys (a 40-block system prompt and a
// conversation): the estimator's cost per block, and SHA-256 chaining's.
void cost(bool quick) {
  std::printf("\n## Cost per block access (one thread)\n\n");
  const size_t requests = quick ? 20000 : 100000;
  constexpr size_t kBlocks = 70;
  std::mt19937_64 rng(3);
  // 20% of the requests' blocks are new keys, the rest reuse earlier ones.
  std::vector<Digest> keys(requests * kBlocks);
  std::vector<Digest> pool;
  for (Digest& d : keys) {
    if (pool.empty() || rng() % 5 == 0) {
      for (auto& b : d.bytes) b = static_cast<uint8_t>(rng());
      pool.push_back(d);
    } else {
      d = pool[rng() % pool.size()];
    }
  }
  std::printf("| what | ns per block | sampled | memory KiB |\n|---|---:|---:|---:|\n");
  for (const double rate : {0.001, 0.01, 0.1, 1.0}) {
    MissRatioCurve est({.sampling_rate = rate, .max_samples = 16384});
    const auto t0 = Clock::now();
    for (size_t r = 0; r < requests; ++r) est.record(std::span<const Digest>(keys.data() + r * kBlocks, kBlocks));
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(keys.size());
    const auto snap = est.snapshot({});
    std::printf("| record(), rate %g, max 16384 samples (final rate %.4f) | %.1f | %llu | %.0f |\n", rate,
                snap.sampling_rate, ns, static_cast<unsigned long long>(snap.sampled_accesses),
                static_cast<double>(snap.memory_bytes) / 1024);
  }
  // What a lookup already pays per block: the SHA-256 chain over 64 token ids.
  std::vector<int32_t> ids(kBlocks * 64);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % 100000);
  const Digest model = lg::cache::sha256("model");
  const size_t chains = quick ? 2000 : 10000;
  const auto t0 = Clock::now();
  size_t sink = 0;
  for (size_t i = 0; i < chains; ++i) {
    ids[0] = static_cast<int32_t>(i);
    sink += lg::cache::chainBlockKeys("team:a", model, ids, 64).size();
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(chains * kBlocks);
  std::printf("| for comparison: chainBlockKeys, 64-token blocks (every lookup) | %.1f | | |\n", ns);
  if (sink == 0) std::printf("?\n");
}

void memory() {
  std::printf("\n## Memory\n\n| stream | samples | bytes | bytes per sampled key | bytes per million blocks |\n"
              "|---|---:|---:|---:|---:|\n");
  for (const double rate : {0.01, 0.001}) {
    MissRatioCurve est({.sampling_rate = rate, .max_samples = 1 << 22});
    constexpr uint64_t kBlocks = 10'000'000;
    for (uint64_t i = 0; i < kBlocks; ++i) est.recordOne(lg::cache::testing::splitmix64(i));
    const auto s = est.snapshot({});
    std::printf("| 10M distinct blocks at rate %g, unbounded | %llu | %llu | %.1f | %.0f |\n", rate,
                static_cast<unsigned long long>(s.samples), static_cast<unsigned long long>(s.memory_bytes),
                static_cast<double>(s.memory_bytes) / static_cast<double>(s.samples),
                static_cast<double>(s.memory_bytes) / 10.0);
  }
  MissRatioCurve bounded({.sampling_rate = 0.01, .max_samples = 16384});
  for (uint64_t i = 0; i < 20'000'000; ++i) bounded.recordOne(lg::cache::testing::splitmix64(i));
  const auto s = bounded.snapshot({});
  std::printf("| 20M distinct blocks at rate 0.01, max 16384 samples (the default bound; final rate %.5f) | %llu | "
              "%llu | %.1f | %.0f |\n",
              s.sampling_rate, static_cast<unsigned long long>(s.samples),
              static_cast<unsigned long long>(s.memory_bytes),
              static_cast<double>(s.memory_bytes) / static_cast<double>(s.samples),
              static_cast<double>(s.memory_bytes) / 20.0);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  errors(quick);
  cost(quick);
  memory();
  return 0;
}

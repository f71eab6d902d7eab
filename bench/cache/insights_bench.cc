// insights_bench: what the cache insights of issue 25 cost per request of the
// prefix cache (docs/benchmarks.md, "What the cache insights cost"): the
// miss-ratio curves (cache.mrc_max_samples; one hash comparison per block
// access, the curve's mutex for sampled ones) and the eviction record
// (cache.evicted_blocks_tracked; a table insert per evicted block, one lookup
// per missed block). The per-request miss classification itself always runs
// and is in every configuration.
//
// One thread runs an agent-like stream of requests through a PrefixCache
// over a FakeLatentPool (tests/support): each request is one of `teams`'
// system prompts (hit after its first use) and a new suffix of `new_blocks`
// blocks (missed, classified, published; the pool of 4,096 blocks is small
// enough that the published blocks keep evicting older ones); every 8th
// request in the second half resends a prompt of 1,000 requests before,
// whose suffix was evicted since (the record names it). A request is the
// cache's whole part of a served request: acquire (keying and lookup, the
// classification, the curves' record at its end), reserving the missed
// blocks (which evicts), publish; the latents are not written (nothing here
// reads them). After a warm-up round of each, the configurations alternate
// for `rounds` rounds on fresh caches; each round gives the thread's CPU time
// per request (CPU time, not wall time: on a shared machine a preempted
// round would otherwise count the other process's time), and the medians
// are compared.
//
//   build/bench/cache/insights_bench [--requests 20000] [--rounds 5]
//                                    [--block-tokens 64] [--new-blocks 16]
//
// 20,000 requests a round reach the eviction record's steady state (its
// default 262,144 keys are full after 16,384 requests: each eviction then
// also forgets the oldest); shorter rounds measure a smaller, growing table.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "tests/cache/cache_test_util.h"

namespace {

using namespace lg;
using namespace lg::cache;
using lg::cache::testing::FakeLatentPool;

double threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

struct Args {
  int requests = 20000;
  int rounds = 5;
  int block_tokens = 64;
  int new_blocks = 16;
  int system_blocks = 32;
  int teams = 8;
};

constexpr int32_t kPoolBlocks = 4096;
constexpr int kResendDistance = 1000;  // requests: 16,000 blocks published since, 4x the pool

struct Variant {
  const char* name;
  bool curves;
  bool eviction_record;
};

struct RoundResult {
  double ns_per_request = 0;
  uint64_t curve_bytes = 0;  // both tiers' estimators (only tier 0 here: no disk tier)
  uint64_t accesses = 0;
  uint64_t evicted_misses = 0;  // missed blocks the record named as evicted
};

RoundResult runRound(const Args& a, const Variant& v) {
  FakeLatentPool pool(lg::testing::smallLayout(a.block_tokens), kPoolBlocks);
  PrefixCacheOptions o;
  o.secret = lg::cache::testing::testSecret();
  o.mrc_enabled = v.curves;
  o.evicted_blocks_tracked = v.eviction_record ? PrefixCacheOptions{}.evicted_blocks_tracked : 0;
  auto created = PrefixCache::create(pool, nullptr, sha256("insights-bench"), o);
  if (!created.isOk()) {
    std::fprintf(stderr, "insights_bench: %s\n", created.status().toString().c_str());
    std::exit(1);
  }
  std::unique_ptr<PrefixCache> cache = std::move(created).value();

  const int32_t bt = a.block_tokens;
  std::vector<std::vector<int32_t>> systems;
  for (int t = 0; t < a.teams; ++t) systems.push_back(lg::cache::testing::tokens(a.system_blocks * bt, 1000 + t));
  // The prompts are made before the clock starts: only the cache is timed.
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(static_cast<size_t>(a.requests));
  for (int i = 0; i < a.requests; ++i) {
    if (i >= a.requests / 2 && i >= kResendDistance && i % 8 == 0) {
      prompts.push_back(prompts[static_cast<size_t>(i - kResendDistance)]);
      continue;
    }
    prompts.push_back(lg::cache::testing::concat(systems[static_cast<size_t>(i % a.teams)],
                                                 lg::cache::testing::tokens(a.new_blocks * bt, 100000 + i)));
  }
  const TeamNamespace team = TeamNamespace::ofTeam("bench").value();
  RoundResult r;
  const double t0 = threadCpuNs();
  for (int i = 0; i < a.requests; ++i) {
    const std::vector<int32_t>& ids = prompts[static_cast<size_t>(i)];
    PrefixLease lease = cache->acquire(team, ids);
    r.evicted_misses += static_cast<uint64_t>(lease.misses().blocks[static_cast<size_t>(BlockMiss::kEvicted)]);
    engine::SequenceBlocks seq(pool, 1 << 20);
    seq.adopt(lease.takeBlocks(), lease.cachedTokens());
    if (!seq.reserve(static_cast<int32_t>(ids.size())).isOk()) {
      std::fprintf(stderr, "insights_bench: request %d could not reserve its blocks\n", i);
      std::exit(1);
    }
    seq.commit(static_cast<int32_t>(ids.size()) - seq.length());
    if (!lease.publish(seq.blocks(), seq.length()).isOk()) {
      std::fprintf(stderr, "insights_bench: request %d could not publish\n", i);
      std::exit(1);
    }
  }
  const double ns = threadCpuNs() - t0;
  r.ns_per_request = ns / a.requests;
  for (const MrcCurve& c : cache->missRatioCurves()) {
    r.curve_bytes += c.stats.memory_bytes;
    r.accesses += c.stats.accesses;
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "insights_bench: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (k == "--requests") a.requests = std::max(1, value());
    else if (k == "--rounds") a.rounds = std::max(1, value());
    else if (k == "--block-tokens") a.block_tokens = value();
    else if (k == "--new-blocks") a.new_blocks = std::max(1, value());
    else {
      std::fprintf(stderr, "insights_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const Variant variants[] = {{"insights on (defaults)", true, true},
                              {"curves off", false, true},
                              {"eviction record off", true, false},
                              {"both off", false, false}};
  constexpr size_t kVariants = sizeof variants / sizeof *variants;
  std::vector<std::vector<double>> ns(kVariants);
  std::vector<RoundResult> last(kVariants);
  for (const Variant& v : variants) runRound(a, v);  // warm-up, not counted
  for (int r = 0; r < a.rounds; ++r) {
    for (size_t v = 0; v < kVariants; ++v) {
      last[v] = runRound(a, variants[v]);
      ns[v].push_back(last[v].ns_per_request);
    }
  }
  const int blocks = a.system_blocks + a.new_blocks;
  std::printf("%d requests a round of %d blocks of %d tokens (%d hit, %d new), %d rounds, alternated\n", a.requests,
              blocks, a.block_tokens, a.system_blocks, a.new_blocks, a.rounds);
  const double base = median(ns[kVariants - 1]);
  for (size_t v = 0; v < kVariants; ++v) {
    std::string rounds;
    for (double x : ns[v]) rounds += (rounds.empty() ? "" : " ") + std::to_string(static_cast<int64_t>(x));
    const double m = median(ns[v]);
    std::printf("%-24s median %8.0f ns/request (%+.0f ns, x%.4f of both off); rounds: %s; curve bytes %llu over "
                "%llu accesses; %llu missed blocks named evicted\n",
                variants[v].name, m, m - base, m / base, rounds.c_str(),
                static_cast<unsigned long long>(last[v].curve_bytes),
                static_cast<unsigned long long>(last[v].accesses),
                static_cast<unsigned long long>(last[v].evicted_misses));
  }
  return 0;
}

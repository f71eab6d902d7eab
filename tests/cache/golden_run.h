// One "process" of the prefix cache over a golden fixture, in-process: its own
// CPU backend (fresh tier 0), the disk tier in `dir`, a PrefixCache, a run of
// `ids` that reuses what the cache holds, then publish and persist.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/model_fingerprint.h"
#include "cache/prefix_cache.h"
#include "engine/forward_runner.h"
#include "engine/sequence_blocks.h"
#include "tests/cache/cache_test_util.h"
#include "tests/engine/golden/golden_util.h"

namespace lg::cache::testing {

struct GoldenRunOptions {
  int block_tokens = 8;
  StoredDType stored_dtype = StoredDType::kF32;
  RestorePolicy restore = RestorePolicy::kAlways;
  std::string ns = "team";
  bool persist = true;
  int32_t chunk = 0;
  bool verify_store_checksums = false;  // DiskTierOptions
};

struct GoldenRun {
  std::vector<float> logits;  // [ids, vocab]; rows < cached are NaN
  int32_t cached = 0;
  CacheStats stats;
  bool ok = false;
};

inline GoldenRun runWithCache(const std::string& fixture, const std::string& dir, std::span<const int32_t> ids,
                              const GoldenRunOptions& o = {}) {
  GoldenRun run;
  auto backend = engine::testing::makeBackend(fixture, engine::LatentDType::kF32, o.block_tokens, 2);
  if (backend == nullptr) return run;
  auto fp = fingerprintModel(engine::testing::fixtureDir(fixture));
  EXPECT_TRUE(fp.isOk()) << fp.status().toString();
  if (!fp.isOk()) return run;
  DiskTierOptions disk_options;
  disk_options.path = dir;
  disk_options.verify_store_checksums = o.verify_store_checksums;
  auto disk = DiskTier::open(disk_options);
  EXPECT_TRUE(disk.isOk()) << disk.status().toString();
  if (!disk.isOk()) return run;
  PrefixCacheOptions options;
  options.stored_dtype = o.stored_dtype;
  options.restore_policy = o.restore;
  options.write_through_hits = 0;
  options.secret = testSecret();
  auto cache = PrefixCache::create(backend->latentPool(), disk->get(),
                                   latentIdentity(fp->digest, backend->latentPool(), options.stored_dtype), options);
  EXPECT_TRUE(cache.isOk());
  if (!cache.isOk()) return run;
  {
    PrefixLease lease = (*cache)->acquire(TeamNamespace::ofTeam(o.ns).value(), ids);
    engine::SequenceBlocks seq(*backend);
    seq.adopt(lease.takeBlocks(), lease.cachedTokens());
    run.cached = lease.cachedTokens();
    engine::ForwardRunOptions ro;
    ro.chunk = o.chunk;
    auto logits = engine::runForwardFrom(*backend, seq, ids, ro);
    EXPECT_TRUE(logits.isOk()) << logits.status().toString();
    if (!logits.isOk()) return run;
    run.logits = std::move(logits).value();
    EXPECT_TRUE(lease.publish(seq.blocks(), seq.length()).isOk());
  }
  if (o.persist) {
    EXPECT_TRUE((*cache)->persistAll().isOk());
  }
  run.stats = (*cache)->snapshot();
  run.ok = true;
  return run;
}

// Largest |a - b| over rows [row0, row1).
inline double maxDiff(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, int64_t row0,
                      int64_t row1) {
  return engine::testing::maxAbsDiff(a, b, vocab, row0, row1);
}

}  // namespace lg::cache::testing

// The prefix cache under ThreadSanitizer: many threads look up, pin, evict,
// restore and publish overlapping prefixes over a small pool with a real
// RocksDB disk tier behind it, some of them through the non-blocking lookup
// (polling, callbacks, and leases dropped while pending). This binary
// compiles the cache, the block allocator and SequenceBlocks from source with -fsanitize=thread
// (tests/cache/CMakeLists.txt); a race report ends the process with exit code
// 66, which fails the test.
//
// RocksDB is not instrumented (Debian's static librocksdb): its lock-free
// memtable publishes entries through atomics the sanitizer cannot see, while
// the intercepted memcpy/memcmp inside it are seen, so every concurrent write
// and read of the memtable looks like a race. Those reports are suppressed by
// one rule, `race:rocksdb::` (a report with a RocksDB frame in it). Races
// between the cache's own accesses, which never run inside RocksDB frames,
// are still reported; DeliberateRaceIsReported proves the sanitizer is live.
#include <atomic>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/tsan_check.h"

#include "tests/cache/cache_test_util.h"

// Halt on the first report with a distinctive exit code, so a race fails the
// test under ctest even if the report scrolls by.
extern "C" const char* __tsan_default_options() { return "halt_on_error=1:exitcode=66:second_deadlock_stack=1"; }
extern "C" const char* __tsan_default_suppressions() { return "race:rocksdb::\n"; }

namespace lg::cache::testing {
namespace {

constexpr int kBt = 4;
constexpr int kThreads = 8;
constexpr int kRequestsPerThread = 120;

// Prompts of an agent workload: 3 system prompts x 4 conversations x growing
// turns, so requests share prefixes of every length with each other.
std::vector<int32_t> prompt(int system, int conversation, int turn) {
  std::vector<int32_t> ids = tokens(3 * kBt + 1, 1000 + system);
  for (int t = 0; t <= turn; ++t) {
    const auto msg = tokens(kBt + (conversation + t) % 3, 100 * system + 10 * conversation + t);
    ids.insert(ids.end(), msg.begin(), msg.end());
  }
  return ids;
}

// Runs the workload; `budget_blocks` 0 leaves eviction to the allocator's
// reclaimer (the pool is then the only bound).
void runWorkload(int32_t pool_blocks, uint64_t budget_blocks) {
  ScopedTempDir dir;
  DiskTierOptions disk_options;
  disk_options.path = dir.path() + "/kv";
  // Small, so that the disk tier evicts too. The cap counts what the store
  // occupies on disk, RocksDB's own files (~100 KB here) included.
  disk_options.max_bytes = 512 << 10;
  auto disk = DiskTier::open(disk_options);
  ASSERT_TRUE(disk.isOk()) << disk.status().toString();
  FakeLatentPool pool(smallLayout(kBt), pool_blocks);
  PrefixCacheOptions o;
  o.tier0_budget_bytes = budget_blocks * smallLayout(kBt).blockBytes();
  o.write_through_hits = 2;
  o.write_back_queue_blocks = 16;
  o.write_back_batch_blocks = 4;
  o.secret = testSecret();
  auto created = PrefixCache::create(pool, disk->get(), sha256("model"), o);
  ASSERT_TRUE(created.isOk());
  PrefixCache& cache = **created;
  // Three teams. "team" publishes its prefixes into "shared", which "team"
  // and "other" were granted; "guest" names it too but was never granted, so
  // it must only ever be served blocks it computed itself.
  cache.grantShared(shared("shared"), team("team"));
  cache.grantShared(shared("shared"), team("other"));

  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < kRequestsPerThread; ++i) {
        const auto ids = prompt(static_cast<int>(rng() % 3), static_cast<int>(rng() % 4), static_cast<int>(rng() % 5));
        LookupOptions a;
        if (rng() % 4 == 0) a.shared_namespaces = {shared("shared")};
        const uint32_t who = rng() % 8;
        const std::string ns = who == 0 ? "other" : who == 1 ? "guest" : "team";
        // Blocks computed by "team" reach "other" through the shared namespace
        // (and then its own namespace, where it publishes what it adopted).
        const std::vector<std::string> may_read_from =
            ns == "other" ? std::vector<std::string>{"team"} : std::vector<std::string>{};
        if (rng() % 8 == 0) {
          // A client that goes away: the lease is dropped while it may still
          // be pending (waiting for another request's blocks or restoring).
          PrefixLease dropped = cache.lookup(team(ns), ids, a);
          if (rng() % 2 == 0) std::this_thread::yield();
          continue;
        }
        if (rng() % 4 == 0) {
          // A scheduler's view: no blocking call; poll, and be called back.
          // The lease is then dropped unused (its claims are abandoned).
          std::atomic<bool> called{false};
          a.on_ready = [&called] { called.store(true); };
          PrefixLease lease = cache.lookup(team(ns), ids, a);
          while (!lease.ready()) std::this_thread::yield();
          while (!called.load()) std::this_thread::yield();  // the callback follows readiness
          a.on_ready = nullptr;
        }
        RequestResult r = runRequest(cache, pool, ns, ids, a, may_read_from);
        if (!r.served_right_blocks) wrong.fetch_add(1);
        if (r.cached_tokens > 0) hits.fetch_add(1);
        switch (rng() % 16) {
          case 0: (void)cache.evictUnpinned(static_cast<int32_t>(rng() % 8)); break;
          case 1: (void)cache.snapshot(); break;
          case 2: (void)cache.publishToNamespace(team("team"), shared("shared"), ids); break;
          case 3: cache.observePrefill(0, static_cast<int64_t>(ids.size()), 1e-3, 1e-3); break;
          case 4: (void)cache.purgeNamespace(team("guest")); break;  // purges race with guest's requests
          default: break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(cache.persistAll().isOk());
  const CacheStats s = cache.snapshot();
  EXPECT_EQ(wrong.load(), 0);  // includes any block that crossed teams other than by a grant
  EXPECT_GT(s.denied_shared_reads, 0u);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(s.tier0.hit_tokens + s.tier0.miss_tokens, s.prompt_tokens);
  EXPECT_EQ(s.tier0.hit_tokens + s.disk.hit_tokens + s.disk.miss_tokens, s.prompt_tokens);
  EXPECT_EQ(s.in_flight_blocks, 0u);
  EXPECT_EQ(s.tier0_pinned_blocks, 0u);
  EXPECT_GT(s.tier0.evicted_blocks, 0u);
  if (budget_blocks == 0) {
    EXPECT_GT(s.reclaimed_blocks, 0u);
  }
  EXPECT_GT(s.write_back_written_blocks, 0u);
  std::printf("lookups %llu, hit tokens tier0 %llu disk %llu, computed %llu, evicted %llu, reclaimed %llu, "
              "restored %llu, waits %llu, written %llu, dropped %llu, disk evicted %llu\n",
              static_cast<unsigned long long>(s.lookups), static_cast<unsigned long long>(s.tier0.hit_tokens),
              static_cast<unsigned long long>(s.disk.hit_tokens), static_cast<unsigned long long>(s.disk.miss_tokens),
              static_cast<unsigned long long>(s.tier0.evicted_blocks), static_cast<unsigned long long>(s.reclaimed_blocks),
              static_cast<unsigned long long>(s.restored_blocks), static_cast<unsigned long long>(s.in_flight_waits),
              static_cast<unsigned long long>(s.write_back_written_blocks),
              static_cast<unsigned long long>(s.write_back_dropped_blocks),
              static_cast<unsigned long long>(s.disk.evicted_blocks));
  created->reset();
  // Every reference was returned: the index's, the requests', the restores'.
  EXPECT_EQ(pool.allocator().numFree(), pool.allocator().capacity());
  for (engine::BlockId b = 0; b < pool.allocator().capacity(); ++b) ASSERT_EQ(pool.allocator().refCount(b), 0);
}

// Prompts use at most 11 blocks, so kThreads x 11 blocks can always be pinned
// at once: allocation never fails, whatever the interleaving.
TEST(CacheTsanTest, ManyThreadsShareEvictRestoreAndPublishUnderABudget) { runWorkload(kThreads * 14 + 24, 40); }

TEST(CacheTsanTest, ManyThreadsReclaimFromAFullPool) { runWorkload(kThreads * 11 + 12, 0); }

// Proves the sanitizer is live in this binary: a deliberate race must end the
// (death-test) child with the exit code above.
TEST(CacheTsanTest, DeliberateRaceIsReported) { lg::testing::expectDeliberateRaceIsReported(); }

}  // namespace
}  // namespace lg::cache::testing

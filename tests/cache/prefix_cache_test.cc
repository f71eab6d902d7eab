// PrefixCache over a FakeLatentPool (blocks hold a pattern derived from their
// tokens) with a real RocksDB disk tier: hit accounting, pinning, LRU
// eviction, reclaiming, in-flight claims, write-back / write-through,
// restore, rejection, namespaces and reference counts.
#include "cache/prefix_cache.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "cache/model_fingerprint.h"
#include "tests/cache/cache_test_util.h"

namespace lg::cache::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kBt = 4;

class PrefixCacheTest : public ::testing::Test {
 protected:
  void make(PrefixCacheOptions options = {}, bool with_disk = true, int32_t pool_blocks = 64) {
    cache_.reset();
    pool_ = std::make_unique<FakeLatentPool>(smallLayout(kBt), pool_blocks);
    if (with_disk && disk_ == nullptr) openDisk();
    if (options.secret == nullptr) options.secret = testSecret();
    auto c = PrefixCache::create(*pool_, with_disk ? disk_.get() : nullptr, model_, options);
    ASSERT_TRUE(c.isOk()) << c.status().toString();
    cache_ = std::move(c).value();
  }
  void openDisk() {
    DiskTierOptions o;
    o.path = dir_.path() + "/kv";
    auto d = DiskTier::open(o);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    disk_ = std::move(d).value();
  }
  void TearDown() override {
    cache_.reset();
    if (pool_) {
      EXPECT_EQ(pool_->allocator().numFree(), pool_->allocator().capacity()) << "leaked references";
    }
  }
  RequestResult request(std::string_view team_id, const std::vector<int32_t>& ids, const LookupOptions& o = {},
                        const std::vector<std::string>& may_read_from = {}) {
    RequestResult r = runRequest(*cache_, *pool_, team_id, ids, o, may_read_from);
    EXPECT_TRUE(r.served_right_blocks);
    return r;
  }

  ScopedTempDir dir_;
  Digest model_ = sha256("model");
  std::unique_ptr<FakeLatentPool> pool_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<PrefixCache> cache_;
};

TEST_F(PrefixCacheTest, HitsAreWholeBlocksAndNeverTheLastToken) {
  make({}, /*with_disk=*/false);
  const auto ids = tokens(4 * kBt, 1);  // exactly 4 blocks
  EXPECT_EQ(request("team", ids).cached_tokens, 0);
  // The same prompt again: the last token is computed, so its block is not reused.
  EXPECT_EQ(request("team", ids).cached_tokens, 3 * kBt);
  // One token more: all 4 blocks are reused.
  auto longer = ids;
  longer.push_back(7);
  RequestResult r = request("team", longer);
  EXPECT_EQ(r.cached_tokens, 4 * kBt);
  EXPECT_EQ(r.tier0_blocks, 4);
  // A prompt that diverges inside block 2 reuses exactly blocks 0 and 1.
  auto diverging = ids;
  diverging[2 * kBt + 1] += 1;
  EXPECT_EQ(request("team", diverging).cached_tokens, 2 * kBt);
  // Shorter than a block: nothing to reuse, nothing published.
  EXPECT_EQ(request("team", tokens(kBt - 1, 1)).cached_tokens, 0);
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.lookups, 5u);
  EXPECT_EQ(s.tier0.hit_tokens, uint64_t{(3 + 4 + 2) * kBt});
  EXPECT_EQ(s.tier0.hit_tokens + s.tier0.miss_tokens, s.prompt_tokens);
}

TEST_F(PrefixCacheTest, GeneratedTokensExtendTheLeaseAndHitTheNextTurn) {
  make({}, /*with_disk=*/false);
  const auto prompt = tokens(2 * kBt + 1, 11);   // 2 full blocks + 1 token
  const auto reply = tokens(2 * kBt - 1, 12);    // fills block 2 and most of block 3
  PrefixLease lease = cache_->acquire(team("team"), prompt);
  ASSERT_EQ(lease.cachedTokens(), 0);
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  const auto all = concat(prompt, reply);
  const std::vector<Digest> content = contentKeys(*pool_, "team", all);
  // "Decode": the prompt and the reply but its last token (sampled, never fed).
  const auto fed = static_cast<int32_t>(all.size()) - 1;
  ASSERT_TRUE(seq.reserve(fed).isOk());
  for (size_t i = 0; i < seq.blocks().size(); ++i) pool_->compute(seq.blocks()[i], content[i]);
  seq.commit(fed);
  // Before extend() the lease covers the prompt only: block 2 is not published.
  ASSERT_TRUE(lease.publish(seq.blocks(), seq.length()).isOk());
  EXPECT_EQ(cache_->snapshot().published_blocks, 2u);
  EXPECT_EQ(lease.coveredTokens(), static_cast<int32_t>(prompt.size()));
  ASSERT_TRUE(lease.extend(std::span(reply).first(reply.size() - 1)).isOk());
  ASSERT_TRUE(lease.publish(seq.blocks(), seq.length()).isOk());
  EXPECT_EQ(cache_->snapshot().published_blocks, 3u);  // block 3 is partial
  lease = PrefixLease();
  seq.reset();
  // The next turn resends prompt + reply + a new message: blocks 0..2 hit and
  // hold exactly what was computed for those tokens.
  RequestResult next = request("team", concat(all, tokens(kBt, 13)));
  EXPECT_EQ(next.cached_tokens, 3 * kBt);
  EXPECT_TRUE(next.served_right_blocks);
  // extend() on an empty lease is refused.
  PrefixLease empty;
  EXPECT_FALSE(empty.extend(reply).isOk());
}

TEST_F(PrefixCacheTest, NamespacesAndModelsDoNotShare) {
  make({}, false);
  const auto ids = tokens(5 * kBt, 2);
  request("team-a", ids);
  EXPECT_EQ(request("team-b", ids).cached_tokens, 0);
  EXPECT_EQ(request("team-a", ids).cached_tokens, 4 * kBt);
}

TEST_F(PrefixCacheTest, AnotherModelReusesNothingFromDisk) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  make(o, true);
  const auto ids = tokens(5 * kBt, 5);
  request("t", ids);
  cache_->writerForTest()->drain();
  model_ = sha256("another model");
  make(o, true);
  EXPECT_EQ(request("t", ids).cached_tokens, 0);
  EXPECT_EQ(cache_->snapshot().rejectedTotal(), 0u);
  model_ = sha256("model");
  make(o, true);
  EXPECT_EQ(request("t", ids).cached_tokens, 4 * kBt);
}

// Why requests miss (miss_anatomy.h): each cause produced on purpose.
TEST_F(PrefixCacheTest, EachMissedBlockIsClassifiedByWhyItMissed) {
  PrefixCacheOptions o;
  o.write_through_hits = -1;
  o.tier0_budget_bytes = 4 * smallLayout(kBt).blockBytes();
  make(o, /*with_disk=*/false);
  const auto a = tokens(4 * kBt + 1, 200);
  const auto b = tokens(4 * kBt + 1, 201);
  auto blocksOf = [](const LookupMisses& m, BlockMiss c) { return m.blocks[static_cast<size_t>(c)]; };

  // Never computed: every block that could hit is new.
  RequestResult r = request("t", a);
  EXPECT_EQ(r.misses.first_block, 0);
  EXPECT_EQ(r.misses.first_cause, BlockMiss::kNew);
  EXPECT_EQ(blocksOf(r.misses, BlockMiss::kNew), 4);
  EXPECT_EQ(r.misses.block_tokens, kBt);
  // A hit up to the last block: nothing left to classify.
  r = request("t", a);
  EXPECT_EQ(r.cached_tokens, 4 * kBt);
  EXPECT_EQ(r.misses.first_block, -1);

  // Evicted from the pool (no disk tier behind it): b pushes a out of the
  // budget of 4 blocks.
  request("t", b);
  request("t", tokens(kBt - 1, 202));  // the budget is enforced at a lookup
  r = request("t", a);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(r.misses.first_block, 0);
  EXPECT_EQ(r.misses.first_cause, BlockMiss::kEvicted);
  EXPECT_EQ(r.misses.evicted_tier, BlockTier::kPool);
  EXPECT_GE(r.misses.evicted_ago_ms, 0);
  EXPECT_LT(r.misses.evicted_ago_ms, 60000);
  EXPECT_EQ(blocksOf(r.misses, BlockMiss::kEvicted), 4);
  EXPECT_EQ(r.misses.evicted_from[static_cast<size_t>(BlockTier::kPool)], 4);
  // Another team's identical prompt was never computed in its namespace.
  EXPECT_EQ(request("u", a).misses.first_cause, BlockMiss::kNew);

  // In flight: another lease holds the claims and this one does not wait.
  const auto c = tokens(3 * kBt + 1, 203);
  PrefixLease first = cache_->acquire(team("t"), c);
  LookupOptions no_wait;
  no_wait.in_flight_wait = 0ms;
  PrefixLease second = cache_->acquire(team("t"), c, no_wait);
  EXPECT_EQ(second.misses().first_block, 0);
  EXPECT_EQ(second.misses().first_cause, BlockMiss::kInFlight);
  EXPECT_EQ(second.misses().blocks[static_cast<size_t>(BlockMiss::kInFlight)], 3);
}

TEST_F(PrefixCacheTest, MissesOnDiskAreRecomputedEvictedFromDiskOrOfAnEarlierModel) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  make(o, true);
  const auto ids = tokens(4 * kBt + 1, 210);
  request("t", ids);
  cache_->writerForTest()->drain();
  auto blocksOf = [](const LookupMisses& m, BlockMiss c) { return m.blocks[static_cast<size_t>(c)]; };

  // On disk, but the policy recomputes.
  make(o, true);  // fresh tier 0
  LookupOptions never;
  never.restore_policy = RestorePolicy::kNever;
  RequestResult r = request("t", ids, never);
  EXPECT_EQ(r.misses.first_cause, BlockMiss::kRecomputed);
  EXPECT_EQ(blocksOf(r.misses, BlockMiss::kRecomputed), 4);

  // Removed from the disk tier after leaving the pool: evicted from disk.
  make(o, true);
  const std::vector<Digest> keys = chainBlockKeys(team("t").key(), model_, ids, kBt);
  disk_->remove(keys[1]);
  r = request("t", ids);
  EXPECT_EQ(r.cached_tokens, kBt);  // block 0 restored
  EXPECT_EQ(r.misses.first_block, 1);
  EXPECT_EQ(r.misses.first_cause, BlockMiss::kEvicted);
  EXPECT_EQ(r.misses.evicted_tier, BlockTier::kDisk);
  // Blocks 2 and 3 are on disk still, but lost with block 1 before them.
  EXPECT_EQ(blocksOf(r.misses, BlockMiss::kEvicted), 3);

  // A restart under another identity: the old blocks are on disk under the
  // keys of the identity before.
  const auto other = tokens(4 * kBt + 1, 211);
  request("t", other);
  cache_->writerForTest()->drain();
  model_ = sha256("another model");
  make(o, true);
  r = request("t", other);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(r.misses.first_cause, BlockMiss::kModelChanged);
  EXPECT_EQ(blocksOf(r.misses, BlockMiss::kModelChanged), 4);
  // A prompt never computed under either identity stays new.
  EXPECT_EQ(request("t", tokens(4 * kBt + 1, 212)).misses.first_cause, BlockMiss::kNew);
}

TEST(EvictedBlocksTest, RemembersTheMostRecentEvictionsWithinItsBound) {
  EvictedBlocks evicted(3);
  for (int i = 0; i < 4; ++i) evicted.record(sha256("k" + std::to_string(i)), BlockTier::kPool, 100 + i);
  EXPECT_FALSE(evicted.find(sha256("k0")).has_value());  // the oldest is forgotten
  ASSERT_TRUE(evicted.find(sha256("k3")).has_value());
  EXPECT_EQ(evicted.find(sha256("k3"))->at_ms, 103);
  // Evicted again (from disk, later): the newest record counts, and its
  // older place in the order does not make it forgotten early.
  evicted.record(sha256("k1"), BlockTier::kDisk, 200);
  evicted.record(sha256("k4"), BlockTier::kPool, 201);
  EXPECT_EQ(evicted.size(), 3u);
  ASSERT_TRUE(evicted.find(sha256("k1")).has_value());
  EXPECT_EQ(evicted.find(sha256("k1"))->tier, BlockTier::kDisk);
  EXPECT_FALSE(evicted.find(sha256("k2")).has_value());
  EvictedBlocks none(0);
  none.record(sha256("k"), BlockTier::kPool, 1);
  EXPECT_FALSE(none.find(sha256("k")).has_value());

  // Many keys through a small table: every key the ring still holds is
  // found, with its latest record, and none it dropped.
  EvictedBlocks churn(1000);
  for (int i = 0; i < 5000; ++i) churn.record(sha256("c" + std::to_string(i % 2500)), BlockTier::kPool, i);
  EXPECT_EQ(churn.size(), 1000u);
  for (int i = 0; i < 2500; ++i) {
    const auto found = churn.find(sha256("c" + std::to_string(i)));
    EXPECT_EQ(found.has_value(), i >= 1500) << i;
    if (found) {
      EXPECT_EQ(found->at_ms, 2500 + i) << i;
    }
  }

  // The memory bound, measured: the heap (mapped chunks included) a full
  // record holds per key.
  for (size_t keys : {size_t{100000}, size_t{262144}}) {
    const auto heap = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
    const size_t before = heap();
    EvictedBlocks full(keys);
    for (size_t i = 0; i < 3 * keys; ++i) full.record(sha256(std::to_string(i)), BlockTier::kPool, 1);
    EXPECT_EQ(full.size(), keys);
    const size_t per_key = (heap() - before) / keys;
    EXPECT_LE(per_key, EvictedBlocks::kBytesPerKey) << keys;
    if (keys == 262144) {
      EXPECT_LE(per_key, 56u) << "the default capacity";
    }
  }
}

TEST_F(PrefixCacheTest, SharedNamespaceIsReadOnlyOnPurpose) {
  make({}, false);
  const auto system = tokens(4 * kBt, 3);
  request("admin", concat(system, {1}));
  auto published = cache_->publishToNamespace(team("admin"), shared("shared"), system);
  ASSERT_TRUE(published.isOk());
  EXPECT_EQ(*published, 4);
  EXPECT_EQ(cache_->publishToNamespace(team("nobody"), shared("shared"), system).status().code(),
            StatusCode::kNotFound);
  cache_->grantShared(shared("shared"), team("team-2"));
  cache_->grantShared(shared("shared"), team("team-3"));
  const auto prompt = concat(system, tokens(2 * kBt, 4));
  // Without naming the shared namespace a team sees nothing...
  EXPECT_EQ(request("team", prompt).cached_tokens, 0);
  // ...with it, the shared prefix is reused, and the team's own continuation
  // is published in its own namespace only.
  LookupOptions o;
  o.shared_namespaces = {shared("shared")};
  EXPECT_EQ(request("team-2", prompt, o, {"admin"}).cached_tokens, 4 * kBt);
  EXPECT_EQ(request("team-2", concat(prompt, {9}), {}, {"admin"}).cached_tokens, 6 * kBt);
  EXPECT_EQ(request("team-3", concat(prompt, {9}), o, {"admin"}).cached_tokens, 4 * kBt);
  // A team that was not granted the namespace reads nothing from it, even
  // when it names it; revoking a grant takes effect at the next lookup.
  EXPECT_EQ(request("team-4", concat(prompt, {7}), o).cached_tokens, 0);
  cache_->grantShared(shared("shared"), team("team-5"));
  cache_->revokeShared(shared("shared"), team("team-5"));
  EXPECT_EQ(request("team-5", concat(prompt, {8}), o).cached_tokens, 0);
  // What a team adopted while it was granted stays in its own namespace (like
  // any prefix it computed): revoking stops further reads of the shared one.
  cache_->revokeShared(shared("shared"), team("team-3"));
  EXPECT_EQ(request("team-3", concat(prompt, {9}), o, {"admin"}).cached_tokens, 6 * kBt);
  EXPECT_EQ(cache_->snapshot().denied_shared_reads, 3u);
}

TEST_F(PrefixCacheTest, TeamsNeverHitWaitOnOrTimeEachOthersBlocks) {
  make({}, false);
  const auto ids = tokens(6 * kBt + 1, 5);
  // Team A has the prefix cached, and another request of A is computing a
  // longer one (its blocks are claimed, in flight).
  request("team-a", ids);
  const auto longer = concat(ids, tokens(4 * kBt, 6));
  PrefixLease computing = cache_->acquire(team("team-a"), longer);
  ASSERT_GT(computing.claimedBlocks(), 0);
  // Team B, naming every shared namespace there is (none granted), with a
  // long wait budget: it is ready at once, reuses nothing and never waited.
  cache_->publishToNamespace(team("team-a"), shared("a-shared"), ids).value();
  LookupOptions o;
  o.shared_namespaces = {shared("a-shared")};
  o.in_flight_wait = std::chrono::milliseconds(60000);
  PrefixLease b = cache_->lookup(team("team-b"), longer, o);
  ASSERT_TRUE(b.ready());
  EXPECT_EQ(b.cachedTokens(), 0);
  EXPECT_FALSE(b.waited());
  EXPECT_EQ(cache_->snapshot().in_flight_waits, 0u);
  // B's own claims (it claimed `longer` in its namespace) do not make a third
  // team wait either.
  ASSERT_GT(b.claimedBlocks(), 0);
  PrefixLease c = cache_->lookup(team("team-c"), longer, o);
  ASSERT_TRUE(c.ready());
  EXPECT_FALSE(c.waited());
  EXPECT_EQ(cache_->snapshot().in_flight_waits, 0u);
  // A team id and a shared name that are spelled the same are different
  // namespaces.
  EXPECT_NE(team("x").key(), shared("x").key());
  EXPECT_FALSE(TeamNamespace::ofTeam("").isOk());
  EXPECT_FALSE(TeamNamespace::ofTeam("a/b").isOk());
  EXPECT_FALSE(SharedNamespace::named(std::string(129, 'a')).isOk());
}

TEST_F(PrefixCacheTest, BudgetEvictsLeastRecentlyUsedUnpinnedBlocks) {
  PrefixCacheOptions o;
  o.tier0_budget_bytes = 6 * smallLayout(kBt).blockBytes();
  make(o, false);
  const auto a = tokens(4 * kBt + 1, 10);
  const auto b = tokens(4 * kBt + 1, 11);
  // A request holding a's blocks pins them.
  PrefixLease held = cache_->acquire(team("t"), a);
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  ASSERT_TRUE(seq.reserve(static_cast<int32_t>(a.size())).isOk());
  const auto content = contentKeys(*pool_, "t", a);
  for (size_t i = 0; i < seq.blocks().size(); ++i) pool_->compute(seq.blocks()[i], content[i]);
  seq.commit(static_cast<int32_t>(a.size()));
  ASSERT_TRUE(held.publish(seq.blocks(), seq.length()).isOk());
  request("t", b);  // 4 more blocks: over the budget of 6, but a's are pinned and b's in use
  EXPECT_EQ(cache_->snapshot().tier0.blocks, 8u);
  // The budget is enforced at the next lookup: b's deepest blocks go first.
  request("t", tokens(kBt - 1, 13));
  CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.tier0.blocks, 6u);
  EXPECT_EQ(s.tier0_pinned_blocks, 4u);
  EXPECT_EQ(s.tier0.evicted_blocks, 2u);
  EXPECT_EQ(request("t", b).cached_tokens, 2 * kBt);
  seq.reset();  // a is no longer pinned, and b was used more recently
  request("t", tokens(4 * kBt + 1, 12));
  EXPECT_EQ(request("t", a).cached_tokens, 0);
}

TEST_F(PrefixCacheTest, FullPoolReclaimsUnpinnedCachedBlocks) {
  make({}, false, /*pool_blocks=*/8);
  request("t", tokens(4 * kBt + 1, 20));  // 5 blocks used while running, 4 stay cached
  EXPECT_EQ(pool_->allocator().numFree(), 4);
  // A 6-block request needs 2 of the cached blocks back.
  RequestResult r = request("t", tokens(6 * kBt, 21));
  EXPECT_TRUE(r.served_right_blocks);
  EXPECT_GE(cache_->snapshot().reclaimed_blocks, 2u);
  // Pinned blocks are never reclaimed: with every block held, allocation fails.
  PrefixLease lease = cache_->acquire(team("t"), tokens(6 * kBt, 21));
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  std::vector<engine::BlockId> extra;
  EXPECT_EQ(pool_->allocator().allocate(pool_->allocator().numFree() + 6, extra).code(),
            StatusCode::kResourceExhausted);
}

TEST_F(PrefixCacheTest, ConcurrentRequestWaitsForTheBlocksBeingComputed) {
  make({}, false);
  const auto ids = tokens(6 * kBt, 30);
  PrefixLease first = cache_->acquire(team("t"), ids);
  EXPECT_EQ(first.claimedBlocks(), 6);
  EXPECT_EQ(cache_->snapshot().in_flight_blocks, 6u);
  RequestResult second;
  std::thread waiter([&] { second = runRequest(*cache_, *pool_, "t", ids); });
  std::this_thread::sleep_for(50ms);  // the waiter is parked on block 0
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  ASSERT_TRUE(seq.reserve(static_cast<int32_t>(ids.size())).isOk());
  const auto content = contentKeys(*pool_, "t", ids);
  for (size_t i = 0; i < seq.blocks().size(); ++i) pool_->compute(seq.blocks()[i], content[i]);
  seq.commit(static_cast<int32_t>(ids.size()));
  ASSERT_TRUE(first.publish(seq.blocks(), seq.length()).isOk());
  waiter.join();
  EXPECT_TRUE(second.served_right_blocks);
  EXPECT_EQ(second.cached_tokens, 5 * kBt);  // computed once, by the first request
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.in_flight_waits, 1u);
  EXPECT_EQ(s.in_flight_blocks, 0u);
  EXPECT_EQ(s.published_blocks, 6u);
}

TEST_F(PrefixCacheTest, AbandonedClaimsWakeWaitersAndTimeoutsEnd) {
  make({}, false);
  const auto ids = tokens(3 * kBt + 1, 31);
  auto first = std::make_unique<PrefixLease>(cache_->acquire(team("t"), ids));
  RequestResult second;
  std::thread waiter([&] { second = runRequest(*cache_, *pool_, "t", ids); });
  std::this_thread::sleep_for(50ms);
  first.reset();  // failed request: its claims are abandoned, the waiter computes
  waiter.join();
  EXPECT_EQ(second.cached_tokens, 0);
  EXPECT_EQ(request("t", ids).cached_tokens, 3 * kBt);  // the waiter published them

  const auto other = tokens(3 * kBt + 1, 32);
  PrefixLease blocker = cache_->acquire(team("t"), other);
  LookupOptions o;
  o.in_flight_wait = 30ms;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(request("t", other, o).cached_tokens, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  EXPECT_EQ(cache_->snapshot().in_flight_wait_timeouts, 1u);
}

TEST_F(PrefixCacheTest, EvictedBlocksAreWrittenBackAndRestored) {
  make({}, true);
  const auto ids = tokens(8 * kBt + 2, 40);
  request("t", ids);
  EXPECT_EQ(cache_->evictUnpinned(100), 8);
  cache_->writerForTest()->drain();
  EXPECT_EQ(disk_->stats().blocks, 8u);
  RequestResult r = request("t", ids);
  EXPECT_EQ(r.cached_tokens, 8 * kBt);
  EXPECT_EQ(r.tier0_blocks, 0);
  EXPECT_EQ(r.disk_blocks, 8);
  EXPECT_EQ(r.decision, RestoreChoice::kRestore);
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.restored_blocks, 8u);
  EXPECT_EQ(s.disk.hit_tokens, uint64_t{8 * kBt});
  EXPECT_GT(s.restore_bytes, 0u);
  EXPECT_EQ(s.costs.restores, 1);
  // Restored blocks are in tier 0 again.
  EXPECT_EQ(request("t", ids).tier0_blocks, 8);
}

TEST_F(PrefixCacheTest, RestartKeepsWrittenThroughHotPrefixes) {
  PrefixCacheOptions o;
  o.write_through_hits = 2;
  make(o, true);
  const auto hot = tokens(3 * kBt + 1, 50), cold = tokens(3 * kBt + 1, 51);
  request("t", hot);
  request("t", cold);
  request("t", hot);
  request("t", hot);  // second reuse: written through
  cache_->writerForTest()->drain();
  EXPECT_EQ(cache_->snapshot().write_through_blocks, 3u);
  // "Restart": a new pool and cache over the same store, nothing evicted.
  make(o, true);
  EXPECT_EQ(request("t", hot).cached_tokens, 3 * kBt);
  EXPECT_EQ(request("t", cold).cached_tokens, 0);
}

TEST_F(PrefixCacheTest, PolicyNeverRecomputesAndAutoFollowsCosts) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  make(o, true);
  const auto ids = tokens(4 * kBt + 1, 60);
  request("t", ids);
  cache_->writerForTest()->drain();
  make(o, true);  // fresh tier 0
  LookupOptions a;
  a.restore_policy = RestorePolicy::kNever;
  RequestResult r = request("t", ids, a);
  EXPECT_EQ(r.decision, RestoreChoice::kRecompute);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(cache_->snapshot().decisions_recompute, 1u);
  // Auto: recomputing is made to look free, so the cost model recomputes...
  make(o, true);
  cache_->observePrefill(0, 1000, 1e-9, 1e-9);
  EXPECT_EQ(request("t", ids).decision, RestoreChoice::kRecompute);
  // ...and expensive, so it restores.
  make(o, true);
  cache_->observePrefill(0, 10, 10.0, 10.0);
  r = request("t", ids);
  EXPECT_EQ(r.decision, RestoreChoice::kRestore);
  EXPECT_EQ(r.cached_tokens, 4 * kBt);
}

TEST_F(PrefixCacheTest, CorruptStoredBlocksAreRejectedCountedAndRecomputed) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  make(o, true);
  const auto ids = tokens(6 * kBt + 1, 70);
  request("t", ids);
  cache_->writerForTest()->drain();
  const auto keys = chainBlockKeys(team("t").key(), model_, ids, kBt);
  // Flip one payload byte of block 3 and one token id of block 5, in RocksDB.
  auto values = disk_->multiGet(keys);
  ASSERT_TRUE(values[3] && values[5]);
  std::string bad3 = *values[3], bad5 = *values[5];
  bad3[bad3.size() - 32 - 7] ^= 0x01;  // in the payload, before the 32-byte MAC
  bad5[128] ^= 0x01;  // the first token id follows the 128-byte header
  std::vector<std::pair<Digest, std::string>> batch = {{keys[3], bad3}, {keys[5], bad5}};
  ASSERT_TRUE(disk_->putBatch(batch).isOk());
  make(o, true);
  RequestResult r = request("t", ids);  // served_right_blocks is checked by request()
  EXPECT_EQ(r.cached_tokens, 3 * kBt);  // blocks 0..2; block 3 rejected, the rest recomputed
  CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.rejected_blocks[static_cast<size_t>(RejectReason::kChecksum)], 1u);
  // Block 5 is reached once block 3 is good again (re-published and written through).
  cache_->writerForTest()->drain();
  make(o, true);
  r = request("t", ids);
  EXPECT_EQ(r.cached_tokens, 6 * kBt);  // block 5 was recomputed and rewritten on the way
  EXPECT_EQ(cache_->snapshot().rejectedTotal(), 0u);
}

TEST_F(PrefixCacheTest, FullWriteBackQueueDropsAndCountsWithoutBlocking) {
  PrefixCacheOptions o;
  o.write_back_queue_blocks = 2;
  make(o, true);
  cache_->writerForTest()->setPausedForTest(true);
  request("t", tokens(6 * kBt + 1, 80));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cache_->evictUnpinned(100), 6);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.write_back_queue_depth, 2u);
  EXPECT_EQ(s.write_back_dropped_blocks, 4u);
  cache_->writerForTest()->setPausedForTest(false);
  cache_->writerForTest()->drain();
  s = cache_->snapshot();
  EXPECT_EQ(s.write_back_written_blocks, 2u);
  EXPECT_EQ(s.write_back_queue_depth, 0u);
}

TEST_F(PrefixCacheTest, PersistAllWritesEverythingAndSavesTheCostModel) {
  make({}, true);
  request("t", tokens(5 * kBt + 3, 90));
  cache_->observePrefill(0, 100, 0.5, 0.25);
  ASSERT_TRUE(cache_->persistAll().isOk());
  EXPECT_EQ(disk_->stats().blocks, 5u);
  make({}, true);  // a new cache reads the saved figures
  EXPECT_EQ(cache_->costModel().estimates().prefills, 1);
  EXPECT_NEAR(cache_->costModel().estimates().per_token, 0.005, 1e-12);
}

TEST_F(PrefixCacheTest, PublishValidatesItsInput) {
  make({}, false);
  const auto ids = tokens(3 * kBt, 95);
  PrefixLease lease = cache_->acquire(team("t"), ids);
  std::vector<engine::BlockId> two = {0, 1};
  EXPECT_EQ(lease.publish(two, 3 * kBt).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lease.publish(two, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lease.publish(two, 2 * kBt).code(), StatusCode::kInvalidArgument);  // blocks 0, 1 are not allocated
  PrefixLease empty;
  EXPECT_FALSE(empty.publish(two, 0).isOk());
}

// --- Purging a team.

TEST_F(PrefixCacheTest, PurgeRemovesATeamsBlocksFromEveryTierAcrossRestarts) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;  // everything published is written to disk too
  make(o, true);
  const auto a = tokens(4 * kBt + 1, 150), b = tokens(4 * kBt + 1, 151), a2 = tokens(3 * kBt + 1, 152);
  request("team-a", a);
  request("team-b", b);
  cache_->writerForTest()->drain();
  ASSERT_EQ(disk_->stats().blocks, 8u);

  // A restart: the store's index (with each block's namespace tag) is
  // rebuilt from disk; team A sends another prompt.
  cache_.reset();
  disk_.reset();
  openDisk();
  make(o, true);
  request("team-a", a2);
  cache_->writerForTest()->drain();
  ASSERT_EQ(disk_->stats().blocks, 11u);

  auto purged = cache_->purgeNamespace(team("team-a"));
  ASSERT_TRUE(purged.isOk()) << purged.status().toString();
  EXPECT_EQ(purged->tier0, 3u);  // a2's blocks, indexed in this process
  EXPECT_EQ(purged->disk, 7u);   // a's from before the restart and a2's
  EXPECT_EQ(disk_->stats().blocks, 4u);
  PrefixCacheOptions restore = o;
  restore.restore_policy = RestorePolicy::kAlways;
  make(restore, true);
  EXPECT_EQ(request("team-a", a).cached_tokens, 0);
  EXPECT_EQ(request("team-a", a2).cached_tokens, 0);
  // Team B is untouched, and still there after another restart.
  cache_.reset();
  disk_.reset();
  openDisk();
  make(restore, true);
  RequestResult rb = request("team-b", b);
  EXPECT_EQ(rb.cached_tokens, 4 * kBt);
  EXPECT_EQ(rb.disk_blocks, 4);
  EXPECT_EQ(cache_->snapshot().rejectedTotal(), 0u);
}

// Issue 21, item 10: an id reused after its team was deleted names another
// namespace (its generation), which hits nothing of the earlier owner's in
// either tier; and a purge while a sequence of the team still holds blocks
// unindexes them without freeing them under it.
TEST_F(PrefixCacheTest, ANewGenerationHitsNothingAndAPurgeLeavesHeldBlocksToTheirHolder) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  make(o, true);
  const auto a = tokens(4 * kBt + 1, 160);
  request("acme", a);
  cache_->writerForTest()->drain();
  LookupOptions always;
  always.restore_policy = RestorePolicy::kAlways;
  {
    PrefixLease next = cache_->acquire(TeamNamespace::ofTeam("acme", 1).value(), a, always);
    EXPECT_EQ(next.cachedTokens(), 0) << "generation 1 hit generation 0's blocks";
  }

  // A running sequence of the team holds its hit blocks while it is purged.
  PrefixLease lease = cache_->acquire(team("acme"), a);
  ASSERT_EQ(lease.cachedTokens(), 4 * kBt);
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  const std::vector<Digest> content = contentKeys(*pool_, "acme", a);
  auto purged = cache_->purgeNamespace(team("acme"));
  ASSERT_TRUE(purged.isOk()) << purged.status().toString();
  EXPECT_EQ(purged->tier0, 4u);
  EXPECT_EQ(purged->disk, 4u);
  request("other", tokens(8 * kBt + 1, 161));  // allocates: freed blocks would be reused here
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(pool_->holds(seq.blocks()[i], content[i])) << "block " << i << " was freed under its sequence";
  }
  EXPECT_EQ(request("acme", a, always).cached_tokens, 0);
}

// --- Forged and stale blocks.

TEST_F(PrefixCacheTest, BlocksWrittenWithAnotherSecretAreRejectedAsForged) {
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  o.secret = std::make_shared<const CacheSecret>(CacheSecret::fromBytesForTest("someone else"));
  make(o, true);  // someone who can write the store, without this installation's key
  const auto ids = tokens(5 * kBt + 1, 140);
  request("t", ids);
  cache_->writerForTest()->drain();
  ASSERT_EQ(disk_->stats().blocks, 5u);
  // This installation's cache finds them on disk, and rejects every one.
  PrefixCacheOptions mine;
  mine.restore_policy = RestorePolicy::kAlways;
  make(mine, true);
  RequestResult r = request("t", ids);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(cache_->snapshot().rejected_blocks[static_cast<size_t>(RejectReason::kForged)], 1u);
}

TEST_F(PrefixCacheTest, SwitchingTheStoredDtypeNeverServesOldBlocks) {
  // Written as int8 (lossy), then the operator switches to f32: the identity
  // covers the stored dtype, so every old block is a miss, none is served.
  const auto ids = tokens(4 * kBt + 1, 141);
  PrefixCacheOptions lossy;
  lossy.stored_dtype = StoredDType::kInt8;
  lossy.write_through_hits = 0;
  model_ = latentIdentity(sha256("checkpoint"), FakeLatentPool(smallLayout(kBt), 1), StoredDType::kInt8);
  make(lossy, true);
  request("t", ids);
  cache_->writerForTest()->drain();
  ASSERT_EQ(disk_->stats().blocks, 4u);
  PrefixCacheOptions exact;
  exact.restore_policy = RestorePolicy::kAlways;
  model_ = latentIdentity(sha256("checkpoint"), FakeLatentPool(smallLayout(kBt), 1), StoredDType::kF32);
  make(exact, true);
  RequestResult r = request("t", ids);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(r.disk_blocks, 0);
  EXPECT_EQ(cache_->snapshot().rejectedTotal(), 0u);  // not even looked at: other keys
}

// --- Leases that never block the calling thread.

// Computes and publishes a lease's blocks (a request's prefill).
void computeAndPublish(FakeLatentPool& pool, PrefixLease& lease, const std::vector<int32_t>& ids) {
  engine::SequenceBlocks seq(pool, 1 << 20);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  ASSERT_TRUE(seq.reserve(static_cast<int32_t>(ids.size())).isOk());
  const auto content = contentKeys(pool, "t", ids);
  for (size_t i = static_cast<size_t>(lease.hitBlocks()); i < seq.blocks().size(); ++i) pool.compute(seq.blocks()[i], content[i]);
  seq.commit(static_cast<int32_t>(ids.size()) - seq.length());
  ASSERT_TRUE(lease.publish(seq.blocks(), seq.length()).isOk());
}

bool pollUntilReady(const PrefixLease& lease) {
  for (int i = 0; i < 5000 && !lease.ready(); ++i) std::this_thread::sleep_for(1ms);
  return lease.ready();
}

TEST_F(PrefixCacheTest, PendingLeaseCompletesWhileTheCallingThreadKeepsWorking) {
  make({}, false);
  const auto ids = tokens(6 * kBt, 130);
  PrefixLease first = cache_->acquire(team("t"), ids);
  ASSERT_EQ(first.claimedBlocks(), 6);
  std::atomic<int> calls{0};
  std::atomic<bool> called_off_thread{false};
  LookupOptions o;
  o.on_ready = [&, caller = std::this_thread::get_id()] {
    calls.fetch_add(1);
    called_off_thread.store(std::this_thread::get_id() != caller);
  };
  // Block 0 is in flight: the lookup returns at once, pending, instead of
  // waiting for it...
  PrefixLease second = cache_->lookup(team("t"), ids, o);
  EXPECT_FALSE(second.ready());
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(cache_->snapshot().in_flight_waits, 1u);
  // ...so this same thread can go on and compute the blocks it waits for (a
  // scheduler's engine thread serving both requests; a blocking lookup would
  // deadlock here).
  computeAndPublish(*pool_, first, ids);
  ASSERT_TRUE(pollUntilReady(second));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(called_off_thread.load());  // resumed by the cache's I/O pool
  EXPECT_TRUE(second.waited());
  EXPECT_EQ(second.cachedTokens(), 5 * kBt);
  EXPECT_EQ(second.tier0Blocks(), 5);
  computeAndPublish(*pool_, second, ids);
}

TEST_F(PrefixCacheTest, TierZeroHitIsReadyAtOnceAndCallsBackInline) {
  make({}, false);
  const auto ids = tokens(3 * kBt + 1, 131);
  request("t", ids);
  int calls = 0;
  LookupOptions o;
  o.on_ready = [&] { ++calls; };
  PrefixLease lease = cache_->lookup(team("t"), ids, o);
  EXPECT_TRUE(lease.ready());
  EXPECT_EQ(calls, 1);  // inside lookup(), on this thread
  EXPECT_EQ(lease.cachedTokens(), 3 * kBt);
}

TEST_F(PrefixCacheTest, RestoreRunsOnTheIoPoolAndCallsBackOnce) {
  make({}, true);
  const auto ids = tokens(8 * kBt + 2, 132);
  request("t", ids);
  ASSERT_EQ(cache_->evictUnpinned(100), 8);
  cache_->writerForTest()->drain();
  std::atomic<int> calls{0};
  std::atomic<bool> called_off_thread{false};
  LookupOptions o;
  o.restore_policy = RestorePolicy::kAlways;
  o.on_ready = [&, caller = std::this_thread::get_id()] {
    calls.fetch_add(1);
    called_off_thread.store(std::this_thread::get_id() != caller);
  };
  PrefixLease lease = cache_->lookup(team("t"), ids, o);
  ASSERT_TRUE(pollUntilReady(lease));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(called_off_thread.load());  // read, verified and imported off the calling thread
  EXPECT_EQ(lease.diskBlocks(), 8);
  EXPECT_EQ(lease.cachedTokens(), 8 * kBt);
  engine::SequenceBlocks seq(*pool_, 1 << 20);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  const auto content = contentKeys(*pool_, "t", ids);
  for (size_t i = 0; i < seq.blocks().size(); ++i) EXPECT_TRUE(pool_->holds(seq.blocks()[i], content[i]));
}

TEST_F(PrefixCacheTest, DroppingAPendingLeaseCancelsItAndLeaksNothing) {
  make({}, false);
  const auto ids = tokens(4 * kBt + 1, 133);
  const auto longer = concat(ids, tokens(2 * kBt, 134));
  request("t", tokens(kBt + 1, 135));
  PrefixLease first = cache_->acquire(team("t"), ids);
  bool called = false;
  LookupOptions o;
  o.on_ready = [&] { called = true; };
  {
    PrefixLease pending = cache_->lookup(team("t"), longer, o);
    EXPECT_FALSE(pending.ready());
  }  // the client went away
  computeAndPublish(*pool_, first, ids);
  EXPECT_FALSE(called);  // a cancelled lookup is never called back
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.cancelled_lookups, 1u);
  EXPECT_EQ(s.in_flight_blocks, 0u);
  EXPECT_EQ(s.tier0_pinned_blocks, 0u);
  // The dropped lookup claimed nothing: another request computes the rest.
  EXPECT_EQ(request("t", longer).cached_tokens, 4 * kBt);
}

TEST_F(PrefixCacheTest, FailedExportsAreCountedAndNotWritten) {
  make({}, true);
  request("t", tokens(4 * kBt + 1, 136));
  pool_->failNextExportsForTest(2);
  EXPECT_EQ(cache_->evictUnpinned(100), 4);
  cache_->writerForTest()->drain();
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.export_errors, 2u);
  EXPECT_EQ(s.write_back_written_blocks, 2u);
  EXPECT_EQ(disk_->stats().blocks, 2u);
}

TEST_F(PrefixCacheTest, PersistAllReleasesEveryBlockWhenAnExportFails) {
  make({}, true);
  request("t", tokens(5 * kBt + 1, 137));
  pool_->failNextExportsForTest(1);
  const Status s = cache_->persistAll();
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(cache_->snapshot().export_errors, 1u);
  EXPECT_EQ(disk_->stats().blocks, 4u);  // the others were written
  // The failed block is retried by the next persist; TearDown checks that no
  // reference was leaked along the way.
  cache_->writerForTest()->drain();
}

TEST_F(PrefixCacheTest, UnopenableStoreDegradesToTierZeroOnly) {
  // A regular file where the store should be.
  const std::string file = dir_.path() + "/kv-is-a-file";
  { std::ofstream(file) << "x"; }
  DiskTierOptions o;
  o.path = file;
  DiskTierOpen opened = openDiskTierOrDegrade(o);
  EXPECT_EQ(opened.tier, nullptr);
  EXPECT_NE(opened.error.find(file), std::string::npos) << opened.error;
  EXPECT_EQ(std::filesystem::file_size(file), 1u);  // untouched
  // RocksDB refusing the store: another tier holds it open (its LOCK).
  openDisk();
  o.path = dir_.path() + "/kv";
  DiskTierOpen locked = openDiskTierOrDegrade(o);
  EXPECT_EQ(locked.tier, nullptr);
  EXPECT_NE(locked.error.find("LOCK"), std::string::npos) << locked.error;

  // The cache runs with tier 0 only and says so.
  PrefixCacheOptions po;
  po.disk_error = opened.error;
  make(po, /*with_disk=*/false);
  EXPECT_EQ(cache_->writerForTest(), nullptr);
  const auto ids = tokens(4 * kBt + 1, 77);
  EXPECT_EQ(request("team", ids).cached_tokens, 0);
  const RequestResult again = request("team", ids);
  EXPECT_EQ(again.cached_tokens, 4 * kBt);
  EXPECT_EQ(again.tier0_blocks, 4);
  const CacheStats s = cache_->snapshot();
  EXPECT_EQ(s.disk_state, DiskState::kDegraded);
  EXPECT_EQ(s.disk_error, opened.error);
  EXPECT_EQ(diskStateName(s.disk_state), "degraded");
  EXPECT_EQ(cache_->persistAll().code(), StatusCode::kUnavailable);

  // For comparison: no disk tier on purpose, and a healthy one.
  make({}, /*with_disk=*/false);
  EXPECT_EQ(cache_->snapshot().disk_state, DiskState::kNone);
  make({}, /*with_disk=*/true);
  EXPECT_EQ(cache_->snapshot().disk_state, DiskState::kOk);
  EXPECT_TRUE(cache_->snapshot().disk_error.empty());
}

}  // namespace
}  // namespace lg::cache::testing

namespace lg::cache::testing {
namespace {

// The miss-ratio curves (cache/miss_ratio_curve.h) hear every lookup: tier 0
// every full block of the prompt, the disk tier the blocks tier 0 missed.
TEST_F(PrefixCacheTest, LookupsFeedTheMissRatioCurvesOfBothTiers) {
  PrefixCacheOptions o;
  o.mrc_sampling_rate = 1.0;  // every key sampled: the counts are exact
  make(o);
  const std::vector<int32_t> a = tokens(41, 1);  // 10 full blocks, all hittable
  request("alpha", a);  // tier 0: 10 cold; disk: the same 10, cold
  request("alpha", a);  // tier 0: 10 hits; disk: nothing reaches it
  CacheStats s = cache_->snapshot();
  ASSERT_TRUE(s.mrc_tier0.present);
  ASSERT_TRUE(s.mrc_disk.present);
  EXPECT_EQ(s.mrc_tier0.today_blocks, 64u);  // the pool
  EXPECT_EQ(s.mrc_tier0.accesses, 20u);
  EXPECT_EQ(s.mrc_tier0.sampled_accesses, 20u);
  EXPECT_EQ(s.mrc_tier0.samples, 10u);
  EXPECT_DOUBLE_EQ(s.mrc_tier0.hit_ratio[1], 0.5);  // at today's size: the second request hit
  EXPECT_DOUBLE_EQ(s.mrc_tier0.hit_ratio[0], 0.5);  // 32 blocks hold the 10 too
  EXPECT_EQ(s.mrc_disk.accesses, 10u);
  EXPECT_DOUBLE_EQ(s.mrc_disk.hit_ratio[4], 0.0);
  EXPECT_GT(s.mrc_tier0.memory_bytes, 0u);

  // Evicted to disk: tier 0 misses them all, the disk tier's curve sees the
  // 10 again, at distances 0..9 (a hit for a disk tier of 10 blocks or more).
  EXPECT_EQ(cache_->evictUnpinned(64), 10);
  ASSERT_TRUE(cache_->persistAll().isOk());
  request("alpha", a);
  s = cache_->snapshot();
  EXPECT_EQ(s.mrc_tier0.accesses, 30u);
  EXPECT_EQ(s.mrc_disk.accesses, 20u);
  EXPECT_DOUBLE_EQ(s.mrc_disk.hit_ratio[0], 0.5);
  // Tier 0 of 64 blocks (an LRU of 64 over these accesses) would have hit
  // the third request too: what eviction took, more cache would have kept.
  EXPECT_NEAR(s.mrc_tier0.hit_ratio[1], 20.0 / 30.0, 1e-12);

  const std::vector<MrcCurve> curves = cache_->missRatioCurves();
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(curves[0].tier, "tier0");
  EXPECT_EQ(curves[1].tier, "disk");
  ASSERT_EQ(curves[0].points.size(), 33u);
  const MrcCurvePoint& today = curves[0].points[16];
  EXPECT_DOUBLE_EQ(today.size_factor, 1.0);
  EXPECT_EQ(today.blocks, 64u);
  EXPECT_EQ(today.bytes, 64u * pool_->layout().blockBytes());
  EXPECT_NEAR(today.hit_ratio, 20.0 / 30.0, 1e-12);
  EXPECT_EQ(curves[0].points[0].blocks, 4u);  // 1/16x
  EXPECT_TRUE(today.reliable);  // at rate 1 the curve is exact
  for (size_t i = 1; i < curves[0].points.size(); ++i) {
    EXPECT_GE(curves[0].points[i].hit_ratio, curves[0].points[i - 1].hit_ratio);
  }
}

TEST_F(PrefixCacheTest, MissRatioCurvesCanBeTurnedOffAndAreAbsentWithoutADiskTier) {
  PrefixCacheOptions off;
  off.mrc_enabled = false;
  make(off);
  request("alpha", tokens(41, 1));
  EXPECT_FALSE(cache_->snapshot().mrc_tier0.present);
  EXPECT_TRUE(cache_->missRatioCurves().empty());

  make({}, /*with_disk=*/false);
  request("alpha", tokens(41, 1));
  const CacheStats s = cache_->snapshot();
  EXPECT_TRUE(s.mrc_tier0.present);
  EXPECT_FALSE(s.mrc_disk.present);
  EXPECT_DOUBLE_EQ(s.mrc_tier0.sampling_rate, 1.0);  // per tier: 1024 / 64 blocks, at most 1
  EXPECT_EQ(s.mrc_tier0.accesses, 10u);
  EXPECT_EQ(cache_->missRatioCurves().size(), 1u);
}

}  // namespace
}  // namespace lg::cache::testing

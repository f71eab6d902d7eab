// KV events (issue 24): the wire format against the golden bytes of vLLM's
// format (made with Python's msgpack from vLLM's msgspec layout; design notes,
// kv-events.md), what the prefix cache reports of its blocks (stored with
// their parents and tokens, removed, re-announced roots first), and the
// publisher over real ZMQ sockets (sequence 0 is AllBlocksCleared, replay,
// merging a chain's blocks into one BlockStored).
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <unordered_set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.h>

#include "cache/block_events.h"
#include "cache/kv_events/kv_event_encoding.h"
#include "cache/kv_events/kv_event_publisher.h"
#include "cache/prefix_cache.h"
#include "common/hex.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/server_process.h"

namespace lg::cache::kv_events {
namespace {

using namespace std::chrono_literals;

std::string hex(std::string_view bytes) { return hexLower(bytes); }

// The golden batch's blocks: block_size 4, two blocks, h = low64(sha256(b"k1"/b"k2")).
KvEvent goldenStored() {
  KvEvent e;
  e.kind = KvEvent::Kind::kBlockStored;
  e.block_hashes = {externalBlockHash(sha256("k1")), externalBlockHash(sha256("k2"))};
  e.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  e.block_size = 4;
  e.medium = "GPU";
  return e;
}

TEST(KvEventEncoding, BlockHashIsTheLastEightBytesBigEndian) {
  EXPECT_EQ(externalBlockHash(sha256("k1")), 0x8668b09c08a16dd0ULL);
  EXPECT_EQ(externalBlockHash(sha256("k2")), 0x2765cff4d780306eULL);
}

TEST(KvEventEncoding, MatchesVllmGoldenBytes) {
  const double ts = 1767225600.0;
  const std::vector<KvEvent> stored = {goldenStored()};
  EXPECT_EQ(hex(encodeBatch(ts, stored, EventEncoding::kArray)),
            "93cb41da556e400000009198ab426c6f636b53746f72656492cf8668b09c08a16dd0cf2765cff4d780306ec0980102030405060708"
            "04c0a3475055c000");
  KvEvent removed;
  removed.kind = KvEvent::Kind::kBlockRemoved;
  removed.block_hashes = {0x2765cff4d780306eULL};
  removed.medium = "GPU";
  EXPECT_EQ(hex(encodeBatch(ts, std::vector<KvEvent>{removed}, EventEncoding::kArray)),
            "93cb41da556e400000009193ac426c6f636b52656d6f76656491cf2765cff4d780306ea347505500");
  EXPECT_EQ(hex(encodeBatch(ts, std::vector<KvEvent>{KvEvent{}}, EventEncoding::kArray)),
            "93cb41da556e400000009191b0416c6c426c6f636b73436c656172656400");
  EXPECT_EQ(hex(sequenceFrame(0)), "0000000000000000");
  EXPECT_EQ(hex(sequenceFrame(kReplayEndSeq)), "ffffffffffffffff");
}

TEST(KvEventEncoding, MapFormNamesEveryFieldWithoutADefault) {
  KvEvent e = goldenStored();
  e.parent_block_hash = 300;  // uint16
  const std::string m = encodeBatch(0.0, std::vector<KvEvent>{e}, EventEncoding::kMap);
  // 8 keys: type, then the fields in declaration order, lora_id/lora_name as nil.
  EXPECT_NE(m.find("\x88\xa4type\xab" "BlockStored\xac" "block_hashes\x92"), std::string::npos);
  EXPECT_NE(m.find("\xb1parent_block_hash\xcd\x01\x2c"), std::string::npos);
  EXPECT_NE(m.find("\xa7lora_id\xc0\xa6medium\xa3GPU\xa9lora_name\xc0"), std::string::npos);
}

TEST(KvEventEncoding, IntegersTakeTheirSmallestForm) {
  MsgpackWriter w;
  for (uint64_t v : {0ULL, 127ULL, 128ULL, 255ULL, 256ULL, 65535ULL, 65536ULL, 0xffffffffULL, 0x100000000ULL}) w.uint(v);
  w.sint(-1);
  w.sint(-33);
  EXPECT_EQ(hex(w.take()), "007fcc80ccffcd0100cdffffce00010000ceffffffffcf0000000100000000ffd0df");
}

// Records what the cache reports, in order.
struct RecordingSink : BlockEventSink {
  struct Event {
    bool stored;
    BlockTier tier;
    Digest key;
    bool has_parent;
    Digest parent;
    std::vector<int32_t> ids;
  };
  std::mutex mu;
  std::vector<Event> events;
  void blockStored(BlockTier tier, const Digest& key, const Digest* parent, std::span<const int32_t> ids) override {
    std::lock_guard lock(mu);
    events.push_back({true, tier, key, parent != nullptr, parent ? *parent : Digest{}, {ids.begin(), ids.end()}});
  }
  void blockRemoved(BlockTier tier, const Digest& key) override {
    std::lock_guard lock(mu);
    events.push_back({false, tier, key, false, {}, {}});
  }
  std::vector<Event> take() {
    std::lock_guard lock(mu);
    return std::exchange(events, {});
  }
};

constexpr int kBt = 4;

class CacheEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = std::make_unique<testing::FakeLatentPool>(testing::smallLayout(kBt), 64);
    DiskTierOptions d;
    d.path = dir_.path() + "/kv";
    auto disk = DiskTier::open(d);
    ASSERT_TRUE(disk.isOk());
    disk_ = std::move(disk).value();
    PrefixCacheOptions o;
    o.secret = testing::testSecret();
    o.write_through_hits = -1;
    auto c = PrefixCache::create(*pool_, disk_.get(), sha256("model"), o);
    ASSERT_TRUE(c.isOk());
    cache_ = std::move(c).value();
    cache_->setBlockEvents(&sink_);
  }
  void TearDown() override {
    cache_->setBlockEvents(nullptr);
    cache_.reset();
  }

  testing::ScopedTempDir dir_;
  std::unique_ptr<testing::FakeLatentPool> pool_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<PrefixCache> cache_;
  RecordingSink sink_;
};

TEST_F(CacheEventsTest, BlocksAreReportedWithTheirParentsTokensAndTiers) {
  const std::vector<int32_t> ids = testing::tokens(3 * kBt + 1, 5);  // 3 full blocks
  testing::runRequest(*cache_, *pool_, "team-a", ids);
  const std::vector<Digest> keys = chainBlockKeys(testing::team("team-a").key(), sha256("model"), ids, kBt);
  auto events = sink_.take();
  ASSERT_EQ(events.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_TRUE(events[j].stored);
    EXPECT_EQ(events[j].tier, BlockTier::kPool);
    EXPECT_EQ(events[j].key, keys[j]);
    EXPECT_EQ(events[j].has_parent, j > 0);
    if (j > 0) {
      EXPECT_EQ(events[j].parent, keys[j - 1]);
    }
    EXPECT_EQ(events[j].ids, std::vector<int32_t>(ids.begin() + j * kBt, ids.begin() + (j + 1) * kBt));
  }
  // Another team's identical prompt: other blocks (its own namespace), same tokens.
  testing::runRequest(*cache_, *pool_, "team-b", ids);
  events = sink_.take();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_NE(events[0].key, keys[0]);
  EXPECT_EQ(events[0].ids, std::vector<int32_t>(ids.begin(), ids.begin() + kBt));

  // Re-announcement: every tier-0 block, each after its parent.
  ASSERT_EQ(cache_->announceResident(), 6u);
  events = sink_.take();
  ASSERT_EQ(events.size(), 6u);
  std::unordered_set<Digest, DigestHash> seen;
  for (const auto& e : events) {
    EXPECT_TRUE(e.stored);
    if (e.has_parent) {
      EXPECT_TRUE(seen.count(e.parent)) << "a block was announced before its parent";
    }
    seen.insert(e.key);
  }

  // Eviction: removed from tier 0, written back and stored on disk with the same parent and tokens.
  EXPECT_EQ(cache_->evictUnpinned(100), 6);
  cache_->writerForTest()->drain();
  events = sink_.take();
  int removed_pool = 0, stored_disk = 0;
  for (const auto& e : events) {
    if (!e.stored && e.tier == BlockTier::kPool) ++removed_pool;
    if (e.stored && e.tier == BlockTier::kDisk) {
      ++stored_disk;
      EXPECT_EQ(e.ids.size(), static_cast<size_t>(kBt));
      if (e.key == keys[1]) {
        EXPECT_TRUE(e.has_parent);
        EXPECT_EQ(e.parent, keys[0]);
      }
    }
  }
  EXPECT_EQ(removed_pool, 6);
  EXPECT_EQ(stored_disk, 6);
  // Restored: back in tier 0 (stored again there, with parents).
  auto longer = ids;
  longer.push_back(9);
  const auto r = testing::runRequest(*cache_, *pool_, "team-a", longer);
  EXPECT_EQ(r.disk_blocks, 3);
  events = sink_.take();
  int stored_pool = 0;
  for (const auto& e : events) stored_pool += e.stored && e.tier == BlockTier::kPool;
  EXPECT_EQ(stored_pool, 3);
  // Purge: removed from both tiers.
  ASSERT_TRUE(cache_->purgeNamespace(testing::team("team-a")).isOk());
  events = sink_.take();
  int removed_disk = 0;
  removed_pool = 0;
  for (const auto& e : events) {
    removed_disk += !e.stored && e.tier == BlockTier::kDisk;
    removed_pool += !e.stored && e.tier == BlockTier::kPool;
  }
  EXPECT_EQ(removed_pool, 3);
  EXPECT_EQ(removed_disk, 3);
}

// ------------------------------------------------------------- publisher

std::vector<std::string> recvMultipart(void* socket, int timeout_ms) {
  zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, 0) < 0) {
      zmq_msg_close(&msg);
      return {};
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return frames;
}

// The batch without its timestamp (array header, 0xcb and 8 bytes).
std::string eventsOf(const std::string& payload) { return payload.substr(10); }

TEST(KvEventPublisherTest, SequenceZeroClearsReplayAnswersAndChainsMerge) {
  testing::ScopedTempDir dir;
  PublisherOptions o;
  o.endpoint = "ipc://" + dir.path() + "/pub";
  o.replay_endpoint = "ipc://" + dir.path() + "/replay";
  o.topic = "kv@127.0.0.1:8443@demo";
  o.block_size = kBt;
  o.pool_medium = "CPU";
  o.reannounce_interval = 0ms;
  auto started = KvEventPublisher::start(o, {});
  ASSERT_TRUE(started.isOk()) << started.status().toString();
  auto& pub = *started;

  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
  ASSERT_EQ(zmq_connect(sub, o.endpoint.c_str()), 0);
  void* replay = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(replay, o.replay_endpoint.c_str()), 0);

  // Sequence 0, published before anyone subscribed, is there by replay.
  const std::string start = sequenceFrame(0);
  zmq_send(replay, "", 0, ZMQ_SNDMORE);
  zmq_send(replay, start.data(), start.size(), 0);
  auto first = recvMultipart(replay, 5000);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0], "");
  EXPECT_EQ(first[1], sequenceFrame(0));
  EXPECT_EQ(eventsOf(first[2]), eventsOf(encodeBatch(0, std::vector<KvEvent>{KvEvent{}}, EventEncoding::kArray)));
  auto end = recvMultipart(replay, 5000);
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[1], sequenceFrame(kReplayEndSeq));
  EXPECT_EQ(end[2], "");

  // Live: a chain of three blocks and a removal, sent until the subscription
  // has reached the publisher (ZMQ's slow joiner), arrive as one merged
  // BlockStored and one BlockRemoved.
  const Digest k0 = sha256("b0"), k1 = sha256("b1"), k2 = sha256("b2");
  const std::vector<int32_t> t0 = {1, 2, 3, 4}, t1 = {5, 6, 7, 8}, t2 = {9, 10, 11, 12};
  std::vector<std::string> got;
  for (int attempt = 0; attempt < 50 && got.empty(); ++attempt) {
    pub->blockStored(BlockTier::kPool, k0, nullptr, t0);
    pub->blockStored(BlockTier::kPool, k1, &k0, t1);
    pub->blockStored(BlockTier::kPool, k2, &k1, t2);
    pub->blockRemoved(BlockTier::kDisk, k2);
    got = recvMultipart(sub, 100);
    // Sequence 0 itself arrives live when the subscription reached the
    // publisher before its thread sent it: not what this part checks.
    while (got.size() == 3 && got[1] == sequenceFrame(0)) got = recvMultipart(sub, 100);
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], o.topic);
  EXPECT_GE(got[1], sequenceFrame(1));
  KvEvent stored;
  stored.kind = KvEvent::Kind::kBlockStored;
  stored.block_hashes = {externalBlockHash(k0), externalBlockHash(k1), externalBlockHash(k2)};
  stored.token_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  stored.block_size = kBt;
  stored.medium = "CPU";
  KvEvent removed;
  removed.kind = KvEvent::Kind::kBlockRemoved;
  removed.block_hashes = {externalBlockHash(k2)};
  removed.medium = "DISK";
  EXPECT_EQ(hex(eventsOf(got[2])), hex(eventsOf(encodeBatch(0, std::vector<KvEvent>{stored, removed}, EventEncoding::kArray))));
  const PublisherStats s = pub->stats();
  EXPECT_GE(s.batches, 2u);
  EXPECT_EQ(s.all_cleared, 1u);
  EXPECT_EQ(s.replays, 1u);
  EXPECT_EQ(s.dropped, 0u);

  // A malformed replay request is counted and answered with nothing.
  zmq_send(replay, "x", 1, 0);
  EXPECT_TRUE(recvMultipart(replay, 300).empty());
  EXPECT_EQ(pub->stats().bad_replays, 1u);

  zmq_close(sub);
  zmq_close(replay);
  pub.reset();
  zmq_ctx_term(ctx);
}

TEST(KvEventPublisherTest, AnEndpointInUseIsAClearError) {
  testing::ScopedTempDir dir;
  PublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:" + std::to_string(lg::test::freeLoopbackPort());
  o.bind = true;
  auto first = KvEventPublisher::start(o, {});
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  auto second = KvEventPublisher::start(o, {});
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().toString().find("cache.kv_events.endpoint: cannot bind"), std::string::npos)
      << second.status().toString();
}

}  // namespace
}  // namespace lg::cache::kv_events

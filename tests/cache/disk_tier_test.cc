// DiskTier against real RocksDB (no mocks): persistence, eviction, corruption.
#include "cache/disk_tier.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lg_disk_tier_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<DiskTier> open(uint64_t max_bytes = uint64_t{1} << 30,
                                 std::chrono::seconds ttl = std::chrono::seconds(0)) {
    DiskTierOptions o;
    o.path = dir_ + "/kv";
    o.max_bytes = max_bytes;
    o.ttl = ttl;
    auto t = DiskTier::open(o);
    EXPECT_TRUE(t.isOk()) << t.status().toString();
    return t.isOk() ? std::move(t).value() : nullptr;
  }
  static std::string value(char c, size_t n = 5000) { return std::string(n, c); }

  std::string dir_;
};

TEST_F(DiskTierTest, PersistsAcrossReopen) {
  const Digest a = sha256("a"), b = sha256("b"), c = sha256("c");
  {
    auto tier = open();
    std::vector<std::pair<Digest, std::string>> batch = {{a, value('a')}, {b, value('b')}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    EXPECT_EQ(tier->stats().blocks, 2u);
  }
  auto tier = open();
  EXPECT_EQ(tier->stats().blocks, 2u);
  EXPECT_EQ(tier->stats().bytes, 10000u);
  std::vector<Digest> keys = {a, c, b};
  auto got = tier->multiGet(keys);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], value('a'));
  EXPECT_FALSE(got[1].has_value());
  EXPECT_EQ(got[2], value('b'));
  // Reused buffers: a later call's misses are never the earlier call's values.
  ReadBuffers buffers;
  tier->multiGet(keys, buffers);
  EXPECT_EQ(buffers.found, (std::vector<uint8_t>{1, 0, 1}));
  const std::vector<Digest> c_then_a = {c, a};
  tier->multiGet(c_then_a, buffers);
  EXPECT_EQ(buffers.found, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(buffers.values[1], value('a'));
  tier->remove(a);
  EXPECT_FALSE(tier->multiGet(std::span(&a, 1))[0].has_value());
  EXPECT_EQ(tier->stats().blocks, 1u);
}

TEST_F(DiskTierTest, ByteCapEvictsLeastRecentlyUsed) {
  auto tier = open(/*max_bytes=*/50000);
  std::vector<Digest> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back(sha256("k" + std::to_string(i)));
    std::vector<std::pair<Digest, std::string>> batch = {{keys.back(), value('x', 10000)}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();
  }
  const auto s = tier->stats();
  EXPECT_LE(s.bytes, 50000u);
  EXPECT_GT(s.evicted_blocks, 0u);
  // The newest block survived, the oldest did not.
  EXPECT_TRUE(tier->contains(keys.back()));
  EXPECT_FALSE(tier->contains(keys.front()));
}

TEST_F(DiskTierTest, ReadsRefreshRecency) {
  auto tier = open(/*max_bytes=*/50000);
  std::vector<Digest> keys;
  auto put = [&](int i) {
    keys.push_back(sha256("k" + std::to_string(i)));
    std::vector<std::pair<Digest, std::string>> batch = {{keys.back(), value('x', 10000)}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();
  };
  for (int i = 0; i < 5; ++i) put(i);
  (void)tier->multiGet(std::span(&keys[0], 1));  // k0 is now the most recently used
  put(5);
  put(6);
  EXPECT_TRUE(tier->contains(keys[0]));
  EXPECT_FALSE(tier->contains(keys[1]));
}

TEST_F(DiskTierTest, ExpiryUsesAccessTimesThatSurviveReopen) {
  const Digest old_key = sha256("old"), new_key = sha256("new");
  {
    auto tier = open(uint64_t{1} << 30, std::chrono::seconds(1));
    std::vector<std::pair<Digest, std::string>> batch = {{old_key, value('o')}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();  // persists the access time
    EXPECT_TRUE(tier->contains(old_key));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // The reopened store knows when the block was last used: it expires at open.
  auto tier = open(uint64_t{1} << 30, std::chrono::seconds(1));
  EXPECT_FALSE(tier->contains(old_key));
  std::vector<std::pair<Digest, std::string>> batch = {{new_key, value('n')}};
  ASSERT_TRUE(tier->putBatch(batch).isOk());
  tier->enforceLimits();
  EXPECT_FALSE(tier->multiGet(std::span(&old_key, 1))[0].has_value());
  EXPECT_TRUE(tier->contains(new_key));
  EXPECT_EQ(tier->stats().evicted_blocks, 1u);
}

}  // namespace
}  // namespace lg::cache

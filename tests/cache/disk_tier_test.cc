// DiskTier against real RocksDB and real files (no mocks): persistence,
// eviction by what the store occupies on disk, expiry, private files,
// set-aside corrupt stores.
#include "cache/disk_tier.h"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

namespace fs = std::filesystem;

// Bytes allocated to the files under `dir`, as `du` counts them.
uint64_t du(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// "path mode" for everything under (and including) `root` that is not
// private: directories must be 0700, files 0600.
std::vector<std::string> notPrivate(const std::string& root) {
  std::vector<std::string> bad;
  auto check = [&](const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return;
    const mode_t mode = st.st_mode & 07777;
    const mode_t want = S_ISDIR(st.st_mode) ? 0700 : 0600;
    if (mode != want) {
      char m[8];
      std::snprintf(m, sizeof m, "%o", static_cast<unsigned>(mode));
      bad.push_back(p.string() + " " + m);
    }
  };
  check(root);
  for (const auto& e : fs::recursive_directory_iterator(root)) check(e.path());
  return bad;
}

void writeFile(const fs::path& p, size_t bytes) {
  std::ofstream f(p, std::ios::binary);
  f << std::string(bytes, 'z');
}

// Runs with a permissive umask, as a library user might, and restores it.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lg_disk_tier_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string store() const { return dir_ + "/kv"; }
  std::unique_ptr<DiskTier> open(uint64_t max_bytes = uint64_t{1} << 30,
                                 std::chrono::seconds ttl = std::chrono::seconds(0)) {
    DiskTierOptions o;
    o.path = store();
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
  constexpr uint64_t kCap = uint64_t{2} << 20;
  auto tier = open(kCap);
  std::vector<Digest> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back(sha256("k" + std::to_string(i)));
    std::vector<std::pair<Digest, std::string>> batch = {{keys.back(), value('x', 512 << 10)}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();
    EXPECT_LE(du(store()), kCap) << "after block " << i;
  }
  const auto s = tier->stats();
  EXPECT_LE(s.occupied_bytes, kCap);
  EXPECT_LE(s.bytes, kCap);
  EXPECT_GT(s.evicted_blocks, 0u);
  EXPECT_GT(s.reclaims, 0u);
  // The newest block survived, the oldest did not.
  EXPECT_TRUE(tier->contains(keys.back()));
  EXPECT_TRUE(tier->multiGet(std::span(&keys.back(), 1))[0].has_value());
  EXPECT_FALSE(tier->contains(keys.front()));
}

TEST_F(DiskTierTest, ReadsRefreshRecency) {
  auto tier = open(/*max_bytes=*/uint64_t{3} << 20);
  std::vector<Digest> keys;
  auto put = [&](int i) {
    keys.push_back(sha256("k" + std::to_string(i)));
    std::vector<std::pair<Digest, std::string>> batch = {{keys.back(), value('x', 512 << 10)}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();
  };
  for (int i = 0; i < 5; ++i) put(i);
  EXPECT_EQ(tier->stats().evicted_blocks, 0u);
  (void)tier->multiGet(std::span(&keys[0], 1));  // k0 is now the most recently used
  put(5);
  put(6);
  EXPECT_GT(tier->stats().evicted_blocks, 0u);
  EXPECT_TRUE(tier->contains(keys[0]));
  EXPECT_FALSE(tier->contains(keys[1]));
}

// The cap counts what the store occupies on disk (blob files with garbage,
// SSTs, WAL, MANIFEST, LOG), not the values alone: writing 6x the cap keeps
// the directory under the cap after every batch, and what is left is the
// most recent data. The numbers are in docs/cache.md.
TEST_F(DiskTierTest, ByteCapCountsWhatTheStoreOccupiesOnDisk) {
  constexpr uint64_t kCap = uint64_t{8} << 20;
  constexpr size_t kValue = 128 << 10;
  constexpr int kBlocks = 384;  // 48 MiB written
  auto tier = open(kCap);
  uint64_t most = 0;
  double reclaim_seconds = 0, slowest = 0;
  std::vector<Digest> keys;
  for (int i = 0; i < kBlocks; i += 4) {
    std::vector<std::pair<Digest, std::string>> batch;
    for (int j = i; j < i + 4; ++j) {
      keys.push_back(sha256("block " + std::to_string(j)));
      batch.emplace_back(keys.back(), value(static_cast<char>('a' + j % 26), kValue));
    }
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    const uint64_t reclaims = tier->stats().reclaims;
    const auto t0 = std::chrono::steady_clock::now();
    tier->enforceLimits();
    if (tier->stats().reclaims > reclaims) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      reclaim_seconds += took;
      slowest = std::max(slowest, took);
    }
    const uint64_t on_disk = du(store());
    most = std::max(most, on_disk);
    ASSERT_LE(on_disk, kCap) << "after " << i + 4 << " blocks";
    EXPECT_EQ(tier->stats().occupied_bytes, on_disk) << "after " << i + 4 << " blocks";
  }
  const DiskTierStats s = tier->stats();
  EXPECT_GT(s.blocks, 0u);
  EXPECT_LT(s.bytes, s.occupied_bytes);  // RocksDB's own files count too
  EXPECT_GT(s.bytes, kCap / 2) << "evicted far more than the cap asks";
  // The most recent blocks are the ones kept, and read back intact.
  for (int j = kBlocks - 8; j < kBlocks; ++j) {
    auto got = tier->multiGet(std::span(&keys[static_cast<size_t>(j)], 1));
    ASSERT_TRUE(got[0].has_value()) << j;
    EXPECT_EQ(*got[0], value(static_cast<char>('a' + j % 26), kValue));
  }
  EXPECT_FALSE(tier->contains(keys[0]));
  std::printf("cap %llu: wrote %d x %zu bytes; at most %llu bytes on disk, finally %llu (%llu blocks, %llu bytes of "
              "values), %llu evicted, %llu reclaims (evict + flush + compact) of %.0f ms on average, %.0f ms at most\n",
              static_cast<unsigned long long>(kCap), kBlocks, kValue, static_cast<unsigned long long>(most),
              static_cast<unsigned long long>(s.occupied_bytes), static_cast<unsigned long long>(s.blocks),
              static_cast<unsigned long long>(s.bytes), static_cast<unsigned long long>(s.evicted_blocks),
              static_cast<unsigned long long>(s.reclaims), 1e3 * reclaim_seconds / std::max<uint64_t>(s.reclaims, 1),
              1e3 * slowest);
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

TEST_F(DiskTierTest, StoreFilesAndDirectoriesArePrivate) {
  ScopedUmask permissive(022);  // RocksDB alone would create 0644 files and 0755 directories
  {
    auto tier = open();
    for (int i = 0; i < 40; ++i) {
      std::vector<std::pair<Digest, std::string>> batch = {{sha256("p" + std::to_string(i)), value('p', 5000)}};
      ASSERT_TRUE(tier->putBatch(batch).isOk());
    }
    ASSERT_TRUE(tier->flush().isOk());
    tier->enforceLimits();
  }
  auto tier = open();  // a second open rolls the LOG and writes a new MANIFEST and OPTIONS
  ASSERT_TRUE(tier->flush().isOk());
  bool blob = false, sst = false;
  for (const auto& e : fs::directory_iterator(store())) {
    blob |= e.path().extension() == ".blob";
    sst |= e.path().extension() == ".sst";
  }
  EXPECT_TRUE(blob && sst) << "the test should cover blob and table files";
  EXPECT_EQ(notPrivate(store()), std::vector<std::string>{});
}

TEST_F(DiskTierTest, AnExistingStoreIsTightenedAtOpen) {
  ScopedUmask permissive(022);
  {
    auto tier = open();
    std::vector<std::pair<Digest, std::string>> batch = {{sha256("a"), value('a')}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    ASSERT_TRUE(tier->flush().isOk());
  }
  // As an older version (or another tool) left it: world-readable.
  fs::create_directory(store() + "/extra");
  writeFile(store() + "/extra/notes", 10);
  ASSERT_EQ(::chmod(store().c_str(), 0755), 0);
  for (const auto& e : fs::recursive_directory_iterator(store())) {
    ASSERT_EQ(::chmod(e.path().c_str(), e.is_directory() ? 0777 : 0644), 0);
  }
  ASSERT_FALSE(notPrivate(store()).empty());
  auto tier = open();
  EXPECT_EQ(notPrivate(store()), std::vector<std::string>{});
  EXPECT_EQ(tier->multiGet(std::vector<Digest>{sha256("a")})[0], value('a'));
}

TEST_F(DiskTierTest, SetAsideStoresAreBoundedInNumberAndAge) {
  ScopedUmask permissive(022);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto aside = [&](const std::string& suffix) {
    const std::string p = store() + ".corrupt-" + suffix;
    fs::create_directories(p);
    writeFile(p + "/000001.blob", 1000);
    return p;
  };
  const std::string oldest = aside(std::to_string(now - 300));
  const std::string older = aside(std::to_string(now - 200));
  const std::string newer = aside(std::to_string(now - 100));
  const std::string newest = aside(std::to_string(now - 100) + "-1");  // set aside twice in one second
  // Not set-aside stores of this path: left alone.
  const std::string other_store = dir_ + "/other.corrupt-" + std::to_string(now - 999999);
  fs::create_directories(other_store);
  const std::string not_a_time = store() + ".corrupt-notes";
  fs::create_directories(not_a_time);
  {
    auto tier = open();
    EXPECT_EQ(tier->stats().removed_corrupt_stores, 2u);
  }
  EXPECT_FALSE(fs::exists(oldest));
  EXPECT_FALSE(fs::exists(older));
  EXPECT_TRUE(fs::exists(newer));
  EXPECT_TRUE(fs::exists(newest));
  EXPECT_TRUE(fs::exists(other_store));
  EXPECT_TRUE(fs::exists(not_a_time));
  EXPECT_EQ(notPrivate(newer), std::vector<std::string>{});  // kept ones are private too
  EXPECT_EQ(notPrivate(newest), std::vector<std::string>{});

  // One older than kCorruptStoreMaxAge goes even when fewer are kept.
  fs::remove_all(newer);
  const std::string stale = aside(std::to_string(now - kCorruptStoreMaxAge.count() - 60));
  {
    auto tier = open();
    EXPECT_EQ(tier->stats().removed_corrupt_stores, 1u);
  }
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(newest));
}

TEST_F(DiskTierTest, SetAsideStoresCountAgainstTheCapAndGoFirst) {
  constexpr uint64_t kCap = uint64_t{3} << 20;
  const std::string aside = store() + ".corrupt-" + std::to_string(std::time(nullptr));
  fs::create_directories(aside);
  writeFile(aside + "/000007.blob", 1 << 20);
  auto tier = open(kCap);
  EXPECT_GE(tier->stats().occupied_bytes, uint64_t{1} << 20);
  EXPECT_TRUE(fs::exists(aside));
  std::vector<Digest> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(sha256("s" + std::to_string(i)));
    std::vector<std::pair<Digest, std::string>> batch = {{keys.back(), value('s', 512 << 10)}};
    ASSERT_TRUE(tier->putBatch(batch).isOk());
    tier->enforceLimits();
  }
  // 2 MiB of blocks and 1 MiB set aside do not fit in 3 MiB: the set-aside
  // store went, every block stayed.
  EXPECT_FALSE(fs::exists(aside));
  EXPECT_EQ(tier->stats().removed_corrupt_stores, 1u);
  EXPECT_EQ(tier->stats().evicted_blocks, 0u);
  for (const Digest& k : keys) EXPECT_TRUE(tier->contains(k));
  EXPECT_LE(tier->stats().occupied_bytes, kCap);
}

TEST_F(DiskTierTest, BadOptionsAreRefusedAndChangeNothing) {
  DiskTierOptions o;
  EXPECT_EQ(DiskTier::open(o).status().code(), StatusCode::kInvalidArgument);  // no path
  o.path = store();
  o.write_buffer_bytes = 1000;
  EXPECT_EQ(DiskTier::open(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(store()));
  // A regular file where the store should be: an error naming the path; the
  // file is untouched.
  writeFile(store(), 3);
  o.write_buffer_bytes = DiskTierOptions().write_buffer_bytes;
  auto r = DiskTier::open(o);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find(store()), std::string::npos) << r.status().toString();
  EXPECT_EQ(fs::file_size(store()), 3u);
}

}  // namespace
}  // namespace lg::cache

// Fault tests with real RocksDB on a golden model: bytes flipped in stored
// values, in blob files and in SST files are caught (rejected / read-error /
// set-aside metrics) and the results stay correct (recomputed); a process
// killed with SIGKILL during heavy write-back leaves a store that opens,
// serves nothing corrupt and is reused.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/cache/cache_test_util.h"
#include "tests/cache/golden_run.h"

extern char** environ;

namespace lg::cache::testing {
namespace {

namespace fs = std::filesystem;
using engine::testing::Golden;
using engine::testing::loadGolden;

constexpr const char* kFixture = "tiny-v3";
constexpr int kBt = 8;

// Flips one byte at `count` evenly spaced offsets of every file ending in `ext`.
int flipFiles(const std::string& dir, const std::string& ext, int count) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ext) continue;
    ++files;
    const uint64_t size = fs::file_size(entry.path());
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    for (int k = 1; k <= count; ++k) {
      const auto off = static_cast<std::streamoff>(size * static_cast<uint64_t>(k) / static_cast<uint64_t>(count + 1));
      char c = 0;
      f.seekg(off);
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(off);
      f.write(&c, 1);
    }
  }
  return files;
}

uint64_t faultSignals(const CacheStats& s) {
  return s.disk_read_errors + s.rejectedTotal() + (s.disk_recovered_from_corruption ? 1 : 0);
}

// Parameter: whether RocksDB's own checksums are verified on reads too
// (DiskTierOptions::verify_store_checksums). Either way nothing corrupt is
// served: without them the block codec's checks must catch everything.
class CacheFaultTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    options_.verify_store_checksums = GetParam();
    golden_ = loadGolden(kFixture);
    n_ = static_cast<int64_t>(golden_.ids.size());
    auto backend = engine::testing::makeBackend(kFixture, engine::LatentDType::kF32, kBt, 2);
    ASSERT_NE(backend, nullptr);
    layout_ = backend->latentLayout();
    auto fp = fingerprintModel(engine::testing::fixtureDir(kFixture));
    ASSERT_TRUE(fp.isOk());
    identity_ = latentIdentity(fp->digest, backend->latentPool(), options_.stored_dtype);
    auto l = engine::runForward(*backend, golden_.ids, {});
    ASSERT_TRUE(l.isOk());
    uncached_ = std::move(l).value();
    store_ = dir_.path() + "/kv";
    GoldenRun first = runWithCache(kFixture, store_, golden_.ids, options_);
    ASSERT_TRUE(first.ok);
    ASSERT_EQ(first.stats.write_back_written_blocks, static_cast<uint64_t>(n_ / kBt));
  }
  // Runs the golden ids over a store and checks every computed row.
  GoldenRun check(const std::string& store) {
    GoldenRun r = runWithCache(kFixture, store, golden_.ids, options_);
    EXPECT_TRUE(r.ok);
    EXPECT_LE(maxDiff(r.logits, uncached_, golden_.vocab, r.cached, n_), 1e-5);
    EXPECT_LE(maxDiff(r.logits, golden_.logits, golden_.vocab, r.cached, n_), 1e-3);
    return r;
  }
  std::string copyStore(const std::string& name) {
    const std::string to = dir_.path() + "/" + name;
    fs::copy(store_, to, fs::copy_options::recursive);
    return to;
  }

  ScopedTempDir dir_;
  GoldenRunOptions options_;
  Golden golden_;
  int64_t n_ = 0;
  engine::LatentLayout layout_;
  Digest identity_;
  std::vector<float> uncached_;
  std::string store_;
};

TEST_P(CacheFaultTest, IntactStoreIsReusedWhole) {
  GoldenRun r = check(copyStore("intact"));
  EXPECT_EQ(r.cached, (n_ - 1) / kBt * kBt);
  EXPECT_EQ(faultSignals(r.stats), 0u);
}

TEST_P(CacheFaultTest, FlippedBytesInStoredValuesAreRejected) {
  const std::string store = copyStore("values");
  const auto keys = chainBlockKeys(team("team").key(), identity_, golden_.ids, kBt);
  {
    DiskTierOptions o;
    o.path = store;
    auto disk = DiskTier::open(o);
    ASSERT_TRUE(disk.isOk());
    auto values = (*disk)->multiGet(keys);
    std::vector<std::pair<Digest, std::string>> bad;
    for (size_t b : {size_t{4}, size_t{9}, size_t{15}}) {
      ASSERT_TRUE(values[b].has_value());
      std::string v = *values[b];
      v[v.size() / 2 + b] ^= 0x04;  // a payload byte
      bad.emplace_back(keys[b], std::move(v));
    }
    ASSERT_TRUE((*disk)->putBatch(bad).isOk());
  }
  GoldenRun r = check(store);
  EXPECT_EQ(r.cached, 4 * kBt);  // blocks 0..3; block 4 rejected, the rest recomputed
  EXPECT_EQ(r.stats.rejected_blocks[static_cast<size_t>(RejectReason::kChecksum)], 1u);
  std::printf("values: cached %d, rejected %llu\n", r.cached, static_cast<unsigned long long>(r.stats.rejectedTotal()));
}

TEST_P(CacheFaultTest, FlippedBytesInBlobFilesAreCaught) {
  const std::string store = copyStore("blob");
  ASSERT_GT(flipFiles(store, ".blob", 8), 0);
  GoldenRun r = check(store);
  EXPECT_GT(faultSignals(r.stats), 0u);
  EXPECT_LT(r.cached, (n_ - 1) / kBt * kBt);
  std::printf("blob files: cached %d, read errors %llu, rejected %llu, set aside %d\n", r.cached,
              static_cast<unsigned long long>(r.stats.disk_read_errors),
              static_cast<unsigned long long>(r.stats.rejectedTotal()), r.stats.disk_recovered_from_corruption);
  // The damaged blocks were dropped and recomputed: the next run is clean again.
  GoldenRun again = check(store);
  EXPECT_EQ(faultSignals(again.stats), 0u);
  EXPECT_EQ(again.cached, (n_ - 1) / kBt * kBt);
}

TEST_P(CacheFaultTest, FlippedBytesInSstFilesAreCaught) {
  const std::string store = copyStore("sst");
  ASSERT_GT(flipFiles(store, ".sst", 8), 0);
  GoldenRun r = check(store);
  EXPECT_GT(faultSignals(r.stats), 0u);
  std::printf("sst files: cached %d, read errors %llu, rejected %llu, set aside %d\n", r.cached,
              static_cast<unsigned long long>(r.stats.disk_read_errors),
              static_cast<unsigned long long>(r.stats.rejectedTotal()), r.stats.disk_recovered_from_corruption);
}

// Bytes flipped only in the data blocks at the start of each SST (keys and
// blob references), which RocksDB does not check at open: without its read
// checksums it parses them as they are, and whatever it makes of them (a
// Corruption, a missing key, a reference to the wrong bytes) must end in a
// miss or a rejected block, never in wrong latents or a crash.
TEST_P(CacheFaultTest, FlippedBytesInSstDataBlocksNeverServeWrongLatents) {
  // Debian's librocksdb is built with its assertions on: parsing a corrupted
  // key it did not checksum can abort the process (seen: dbformat.h
  // ParseInternalKey). That is why cache.disk_verify_checksums is on by
  // default; with it off, a damaged SST is outside what we can promise.
  if (!GetParam()) GTEST_SKIP() << "SST damage needs RocksDB's read checksums (cache.disk_verify_checksums)";
  const std::string store = copyStore("sst-data");
  // The block column family's tables: their properties name the family
  // ("...name" then "blocks" in the property block). Their first data block
  // starts at offset 0 and holds the first keys and blob references.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(store)) {
    if (entry.path().extension() != ".sst") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.find("nameblocks") == std::string::npos || bytes.size() < 64) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    for (std::streamoff off : {10, 30, 50}) {
      f.seekp(off);
      f.put(static_cast<char>(bytes[static_cast<size_t>(off)] ^ 0x5a));
    }
    ++files;
  }
  ASSERT_GT(files, 0);
  GoldenRun r = check(store);
  EXPECT_GT(faultSignals(r.stats), 0u);
  std::printf("sst data blocks: cached %d, read errors %llu, rejected %llu, set aside %d\n", r.cached,
              static_cast<unsigned long long>(r.stats.disk_read_errors),
              static_cast<unsigned long long>(r.stats.rejectedTotal()), r.stats.disk_recovered_from_corruption);
}

INSTANTIATE_TEST_SUITE_P(StoreChecksums, CacheFaultTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? std::string("RocksDbVerifies") : std::string("CodecOnly");
                         });

// --- SIGKILL during heavy write-back -----------------------------------------

std::vector<int32_t> crashIds(const Golden& g, int i) {
  std::vector<int32_t> ids(g.ids.begin(), g.ids.begin() + 5 * kBt);  // shared by all sequences
  return concat(std::move(ids), tokens(12 * kBt + 3, i));
}

// The child holds its writer back for the last sequences before this one, so
// a backlog builds up, releases it and kills itself with SIGKILL while the
// writer is working through it.
constexpr int kKillAfter = 30;
constexpr int kBacklogSequences = 5;

// The child: writes sequences through a small tier 0 (every block written
// through on publish and more written back on eviction), then dies by SIGKILL
// in the middle of writing back.
TEST(CacheCrashTest, ChildWritesUntilKilled) {
  const char* dir = std::getenv("LG_CACHE_CRASH_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "helper process of KillDuringWriteBackThenRestart";
  const Golden g = loadGolden(kFixture);
  auto backend = engine::testing::makeBackend(kFixture, engine::LatentDType::kF32, kBt, 1);
  ASSERT_NE(backend, nullptr);
  auto fp = fingerprintModel(engine::testing::fixtureDir(kFixture));
  ASSERT_TRUE(fp.isOk());
  DiskTierOptions disk_options;
  disk_options.path = dir;
  auto disk = DiskTier::open(disk_options);
  ASSERT_TRUE(disk.isOk());
  PrefixCacheOptions o;
  o.write_through_hits = 0;
  o.tier0_budget_bytes = 24 * backend->latentLayout().blockBytes();
  o.write_back_queue_blocks = 512;
  o.write_back_batch_blocks = 4;
  o.secret = testSecret();
  auto cache = PrefixCache::create(backend->latentPool(), disk->get(),
                                   latentIdentity(fp->digest, backend->latentPool(), o.stored_dtype), o);
  ASSERT_TRUE(cache.isOk());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // never outlive a dead parent long
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    const auto ids = crashIds(g, i);
    PrefixLease lease = (*cache)->acquire(team("team"), ids);
    engine::SequenceBlocks seq(*backend);
    seq.adopt(lease.takeBlocks(), lease.cachedTokens());
    ASSERT_TRUE(engine::runForwardFrom(*backend, seq, ids, {}).isOk());
    ASSERT_TRUE(lease.publish(seq.blocks(), seq.length()).isOk());
    std::printf("done %d\n", i);
    WriteBack& writer = *(*cache)->writerForTest();
    if (i == kKillAfter - kBacklogSequences) writer.setPausedForTest(true);
    if (i == kKillAfter) {
      const uint64_t before = writer.stats().written_blocks;
      writer.setPausedForTest(false);
      while (writer.stats().written_blocks == before) std::this_thread::yield();  // writing has resumed
    }
    const WriteBackStats w = writer.stats();
    const uint64_t pending = w.queued_blocks - w.written_blocks - w.write_errors;
    if (i >= kKillAfter && pending > 0) {
      std::printf("killing with %llu blocks not yet written (%llu written)\n",
                  static_cast<unsigned long long>(pending), static_cast<unsigned long long>(w.written_blocks));
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    std::fflush(stdout);
  }
}

TEST(CacheCrashTest, KillDuringWriteBackThenRestart) {
  ScopedTempDir dir;
  const std::string store = dir.path() + "/kv";
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=CacheCrashTest.ChildWritesUntilKilled";
  std::vector<char*> argv = {self.data(), filter.data(), nullptr};
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("LG_CACHE_CRASH_CHILD_DIR=" + store);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);

  // The child kills itself while its write-back holds unwritten blocks; read
  // its progress until then (and kill it ourselves if it never gets there).
  int last_done = -1;
  long long pending_at_kill = -1;
  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    const ssize_t got = read(out[0], buf, sizeof buf);
    if (got <= 0) break;  // the child is gone
    buffer.append(buf, static_cast<size_t>(got));
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
      if (buffer.rfind("done ", 0) == 0) last_done = std::atoi(buffer.c_str() + 5);
      if (buffer.rfind("killing with ", 0) == 0) pending_at_kill = std::atoll(buffer.c_str() + 13);
    }
  }
  kill(pid, SIGKILL);  // no-op when it is already dead
  int status = 0;
  waitpid(pid, &status, 0);
  close(out[0]);
  ASSERT_GE(last_done, kKillAfter) << "the child did not make progress";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_GT(pending_at_kill, 0) << "the child was not killed in the middle of writing back";

  // The store opens as it is (not set aside) and holds blocks.
  {
    DiskTierOptions o;
    o.path = store;
    auto disk = DiskTier::open(o);
    ASSERT_TRUE(disk.isOk()) << disk.status().toString();
    EXPECT_FALSE((*disk)->stats().recovered_from_corruption);
    EXPECT_GT((*disk)->stats().blocks, 0u);
    std::printf("after SIGKILL at sequence %d with %lld blocks not yet written: %llu blocks in the store\n",
                last_done, pending_at_kill, static_cast<unsigned long long>((*disk)->stats().blocks));
  }
  // Every sequence the child finished: what survived is reused, nothing
  // corrupt is served (logits equal an uncached run), nothing is rejected.
  const Golden g = loadGolden(kFixture);
  auto backend = engine::testing::makeBackend(kFixture, engine::LatentDType::kF32, kBt, 2);
  ASSERT_NE(backend, nullptr);
  int64_t reused = 0;
  uint64_t faults = 0;
  GoldenRunOptions o;
  o.persist = false;
  for (int i = 0; i <= last_done; i += 3) {
    const auto ids = crashIds(g, i);
    auto reference = engine::runForward(*backend, ids, {});
    ASSERT_TRUE(reference.isOk());
    GoldenRun r = runWithCache(kFixture, store, ids, o);
    ASSERT_TRUE(r.ok);
    EXPECT_LE(maxDiff(r.logits, *reference, g.vocab, r.cached, static_cast<int64_t>(ids.size())), 1e-5) << i;
    reused += r.cached;
    faults += faultSignals(r.stats);
  }
  EXPECT_GT(reused, 0);
  EXPECT_EQ(faults, 0u);
  std::printf("reused %lld tokens over %d sequences after the restart\n", static_cast<long long>(reused),
              last_done / 3 + 1);
}

}  // namespace
}  // namespace lg::cache::testing

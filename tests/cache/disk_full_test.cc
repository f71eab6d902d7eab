// The disk tier on a real file system that fills up (no mocks, no injected
// errors): a small tmpfs mounted for the test (as root; CI runs as root), or,
// where mounting is not permitted, a file size limit (RLIMIT_FSIZE, SIGXFSZ
// ignored); skipped, saying why, if neither works. Each scenario runs in a
// child process of this binary (the DiskFullChild tests) with a mount
// namespace of its own, so that its tmpfs disappears with it even if it
// crashes.
//
// What must hold: the writer keeps running, the failure is counted and logged
// once, requests are served from tier 0, blocks that failed are not taken for
// stored (a later persistAll writes them), eviction forgets nothing it could
// not delete, and when space returns writing resumes: new blocks land on disk
// and a reopened store serves every block intact, nothing rejected.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "cache/cache_log.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/subprocess.h"

namespace lg::cache::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kBt = 8;
constexpr int kBlocksPerRequest = 4;
constexpr const char* kChildEnv = "LG_DISK_FULL_CHILD_DIR";

// 64 KiB blocks (4 layers x 8 tokens x 512 f32), so that a few MB fill up.
engine::LatentLayout bigLayout() {
  engine::LatentLayout l;
  l.layers = 4;
  l.block_tokens = kBt;
  l.kv_lora_rank = 448;
  l.latent_dim = 512;
  l.dtype = engine::LatentDType::kF32;
  return l;
}

// A tmpfs of `size` mounted on `dir` for the life of the object.
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    const std::string options = "size=" + size + ",mode=0700";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// Fills what is left of the file system with `path`, up to `max_bytes`.
void writeFiller(const std::string& path, uint64_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::setvbuf(f, nullptr, _IONBF, 0);
  const std::string chunk(4096, 'f');
  uint64_t written = 0;
  while (written < max_bytes && std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) written += chunk.size();
  // The last page, byte by byte, when filling up completely.
  while (written < max_bytes && std::fwrite("f", 1, 1, f) == 1) ++written;
  std::fclose(f);
}

// Collects what the cache logs, to count messages.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096)) {
    cacheLog()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = cacheLog()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  int count(std::string_view text) const {
    int n = 0;
    for (const std::string& line : sink_->last_formatted()) n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

DiskTierOptions smallStoreOptions(const std::string& path) {
  DiskTierOptions o;
  o.path = path;
  o.write_buffer_bytes = 256 << 10;  // a full disk must have room for one memtable to resume
  o.write_retry_interval = 200ms;
  return o;
}

std::vector<int32_t> requestIds(int i) { return tokens(kBlocksPerRequest * kBt + 1, 1000 + i); }

// How the file system is made to fill up and to free space again.
struct Filler {
  std::function<void()> fill;  // called once the store is open
  std::function<void()> free;
};

// The scenario, on a store at `store` whose file system `filler` controls.
void writerSurvivesAFullDiskAndRecovers(const std::string& store, const Filler& filler) {
  LogCapture log;
  int requests = 0;
  {
    auto disk = DiskTier::open(smallStoreOptions(store));
    ASSERT_TRUE(disk.isOk()) << disk.status().toString();
    FakeLatentPool pool(bigLayout(), 256);  // tier 0 holds everything: failed blocks stay indexed
    PrefixCacheOptions o;
    o.write_through_hits = 0;  // every published block is written
    o.write_back_queue_blocks = 256;
    o.write_back_batch_blocks = 4;
    o.secret = testSecret();
    o.secret = testSecret();
  auto created = PrefixCache::create(pool, disk->get(), sha256("model"), o);
    ASSERT_TRUE(created.isOk());
    PrefixCache& cache = **created;
    WriteBack& writer = *cache.writerForTest();
    auto publishNext = [&] {
      const RequestResult r = runRequest(cache, pool, "team", requestIds(requests++));
      EXPECT_TRUE(r.served_right_blocks);
      writer.drain();  // the writer keeps running: this returns, failed or not
    };
    filler.fill();

    // 1. Write until the file system is full.
    while (cache.snapshot().write_back_errors == 0) {
      ASSERT_LT(requests, 400) << "the file system never filled up";
      publishNext();
    }
    const int first_failed = requests - 1;
    const CacheStats full = cache.snapshot();
    EXPECT_EQ(full.disk_state, DiskState::kUnwritable);
    EXPECT_FALSE(full.disk_error.empty());
    std::printf("full after %d requests: %llu blocks written, %llu failed; %s\n", requests,
                static_cast<unsigned long long>(full.write_back_written_blocks),
                static_cast<unsigned long long>(full.write_back_errors), full.disk_error.c_str());

    // 2. While full: requests are served from tier 0 without blocking, the
    // writer refuses or fails writes, counting them.
    for (int k = 0; k < 3; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      publishNext();
      const RequestResult again = runRequest(cache, pool, "team", requestIds(k));
      EXPECT_TRUE(again.served_right_blocks);
      EXPECT_EQ(again.tier0_blocks, kBlocksPerRequest);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    }
    const CacheStats still = cache.snapshot();
    EXPECT_GT(still.write_back_errors, full.write_back_errors);
    EXPECT_EQ(still.disk_unwritable_episodes, 1u);
    EXPECT_EQ(still.disk_state, DiskState::kUnwritable);
    EXPECT_EQ(log.count("cannot be written"), 1) << "a full disk is logged once, not per block";
    // A persistAll now fails (its own blocks fail) and leaks no reference.
    EXPECT_FALSE(cache.persistAll().isOk());

    // 3. Free space: writing resumes (within the retry interval, when the
    // writer next has something to write).
    filler.free();
    const auto freed = std::chrono::steady_clock::now();
    const auto deadline = freed + 20s;
    while (cache.snapshot().disk_state != DiskState::kOk && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(250ms);
      publishNext();
    }
    const CacheStats back = cache.snapshot();
    ASSERT_EQ(back.disk_state, DiskState::kOk) << back.disk_error;
    std::printf("writable again %.0f ms after space returned (retry interval %lld ms); %llu writes refused, %llu failed "
                "meanwhile\n",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - freed).count(),
                static_cast<long long>(smallStoreOptions("").write_retry_interval.count()),
                static_cast<unsigned long long>(back.disk_refused_writes),
                static_cast<unsigned long long>(back.disk_write_failures));
    EXPECT_EQ(back.disk_write_recoveries, 1u);
    EXPECT_EQ(log.count("is writable again"), 1);
    EXPECT_EQ(log.count("cannot be written"), 1);
    const uint64_t written_before = back.write_back_written_blocks;
    for (int k = 0; k < 2; ++k) publishNext();
    EXPECT_EQ(cache.snapshot().write_back_written_blocks, written_before + 2 * kBlocksPerRequest)
        << "new blocks land on disk";

    // 4. The blocks that failed were not taken for stored: persistAll writes
    // them now, and reports only its own failures (none), not the old ones.
    const uint64_t through_before = cache.snapshot().write_through_blocks;
    const Status persisted = cache.persistAll();
    EXPECT_TRUE(persisted.isOk()) << persisted.toString();
    EXPECT_GT(cache.snapshot().write_through_blocks, through_before) << "the failed blocks were written again";
    EXPECT_GE(first_failed, 0);
  }
  EXPECT_EQ(log.count("cannot be written"), 1);

  // 5. A reopened store serves every request's blocks intact: none torn,
  // none rejected, the store was not set aside.
  auto disk = DiskTier::open(smallStoreOptions(store));
  ASSERT_TRUE(disk.isOk()) << disk.status().toString();
  EXPECT_FALSE((*disk)->stats().recovered_from_corruption);
  FakeLatentPool pool(bigLayout(), 256);
  PrefixCacheOptions o;
  o.restore_policy = RestorePolicy::kAlways;
  o.secret = testSecret();
  auto created = PrefixCache::create(pool, disk->get(), sha256("model"), o);
  ASSERT_TRUE(created.isOk());
  int served = 0;
  for (int i = 0; i < requests; ++i) {
    const RequestResult r = runRequest(**created, pool, "team", requestIds(i));
    EXPECT_TRUE(r.served_right_blocks) << i;
    EXPECT_EQ(r.disk_blocks, kBlocksPerRequest) << "request " << i << " is not all on disk";
    served += r.disk_blocks;
  }
  const CacheStats s = (*created)->snapshot();
  EXPECT_EQ(s.rejectedTotal(), 0u);
  EXPECT_EQ(s.disk_read_errors, 0u);
  std::printf("after recovery and reopen: %d requests, %d blocks restored intact\n", requests, served);
}

// --- the child processes --------------------------------------------------------

// In a child: mounts made from here on are private to this process and
// vanish with it.
bool privateMountNamespace(std::string* why) {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *why = std::strerror(errno);
    return false;
  }
  return true;
}

const char* childDir() { return std::getenv(kChildEnv); }

TEST(DiskFullChild, OnASmallTmpfs) {
  if (childDir() == nullptr) GTEST_SKIP() << "helper process of DiskFullTest";
  std::string why;
  if (!privateMountNamespace(&why)) GTEST_SKIP() << "no mount namespace of its own: " << why;
  const std::string mnt = std::string(childDir()) + "/mnt";
  Tmpfs tmpfs(mnt, "8m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << tmpfs.error();
  // 5 MiB of filler leaves ~3 MiB for the store; freeing it makes room for
  // everything the test writes.
  const std::string filler = mnt + "/filler";
  Filler f{[&] { writeFiller(filler, uint64_t{5} << 20); }, [&] { fs::remove(filler); }};
  writerSurvivesAFullDiskAndRecovers(mnt + "/kv", f);
}

// The fallback: files may grow to 128 KiB, so the WAL and the blob files fail
// with EFBIG ("File too large") once a memtable's worth is written; lifting
// the limit is "freeing space".
TEST(DiskFullChild, UnderAFileSizeLimit) {
  if (childDir() == nullptr) GTEST_SKIP() << "helper process of DiskFullTest";
  if (::signal(SIGXFSZ, SIG_IGN) == SIG_ERR) GTEST_SKIP() << "cannot ignore SIGXFSZ";
  rlimit original{};
  if (::getrlimit(RLIMIT_FSIZE, &original) != 0) GTEST_SKIP() << "getrlimit: " << std::strerror(errno);
  auto limit = [&](rlim_t soft) {
    rlimit l = original;
    l.rlim_cur = soft;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &l), 0) << std::strerror(errno);
  };
  Filler f{[&] { limit(128 << 10); }, [&] { limit(original.rlim_cur); }};
  writerSurvivesAFullDiskAndRecovers(std::string(childDir()) + "/kv", f);
}

// Eviction forgets a block only once its delete is written: with the file
// system full, expired blocks whose deletes fail stay known (and on disk),
// and are deleted once space returns.
TEST(DiskFullChild, ExpiryOnAFullTmpfs) {
  if (childDir() == nullptr) GTEST_SKIP() << "helper process of DiskFullTest";
  std::string why;
  if (!privateMountNamespace(&why)) GTEST_SKIP() << "no mount namespace of its own: " << why;
  const std::string mnt = std::string(childDir()) + "/mnt";
  Tmpfs tmpfs(mnt, "4m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << tmpfs.error();
  DiskTierOptions o = smallStoreOptions(mnt + "/kv");
  o.ttl = 1s;
  auto opened = DiskTier::open(o);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  DiskTier& tier = **opened;
  std::vector<Digest> keys;
  for (int b = 0; b < 10; ++b) {
    std::vector<std::pair<Digest, std::string>> batch;
    for (int i = 0; i < 10; ++i) {
      keys.push_back(sha256("expiring " + std::to_string(b * 10 + i)));
      batch.emplace_back(keys.back(), std::string(2000, 'e'));
    }
    ASSERT_TRUE(tier.putBatch(batch).isOk());
  }
  tier.enforceLimits();
  std::this_thread::sleep_for(1100ms);  // all expired
  const std::string filler = mnt + "/filler";
  writeFiller(filler, uint64_t{1} << 30);  // every last byte

  tier.enforceLimits();  // 200 deletes do not fit in what is left of the WAL's page
  DiskTierStats s = tier.stats();
  EXPECT_FALSE(s.writable);
  EXPECT_GT(s.write_failures, 0u);
  EXPECT_EQ(s.blocks, keys.size()) << "blocks forgotten although their deletes failed";
  EXPECT_EQ(s.evicted_blocks, 0u);
  EXPECT_TRUE(tier.contains(keys.front()));
  tier.enforceLimits();  // unwritable: changes nothing
  EXPECT_EQ(tier.stats().blocks, keys.size());
  // Reads still work (and make the block recently used again).
  auto got = tier.multiGet(std::span(&keys.back(), 1));
  ASSERT_TRUE(got[0].has_value());
  EXPECT_EQ(*got[0], std::string(2000, 'e'));
  // Still full: a write is refused, nothing else changes.
  std::this_thread::sleep_for(o.write_retry_interval + 50ms);
  const Digest fresh = sha256("fresh");
  std::vector<std::pair<Digest, std::string>> batch = {{fresh, std::string(2000, 'f')}};
  EXPECT_FALSE(tier.putBatch(batch).isOk());
  EXPECT_GT(tier.stats().refused_writes, 0u);
  EXPECT_TRUE(tier.contains(keys.front()));

  fs::remove(filler);
  std::this_thread::sleep_for(o.write_retry_interval + 50ms);
  const Status put = tier.putBatch(batch);  // the retry: reopen, then the write
  ASSERT_TRUE(put.isOk()) << put.toString();
  EXPECT_TRUE(tier.stats().writable);
  tier.enforceLimits();
  s = tier.stats();
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.evicted_blocks, keys.size() - 1);
  EXPECT_FALSE(tier.contains(keys.front()));
  EXPECT_TRUE(tier.contains(keys.back()));
  EXPECT_TRUE(tier.contains(fresh));
  EXPECT_EQ(s.unwritable_episodes, 1u);
  EXPECT_EQ(s.write_recoveries, 1u);
}

// --- the tests ----------------------------------------------------------------------

struct ChildRun {
  bool skipped = false;
  test::ProcessResult result;
};

// Runs one DiskFullChild test in a child process of this binary, in `dir`.
ChildRun runChild(const std::string& name, const std::string& dir) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  ChildRun run;
  run.result = test::runProcess({self, "--gtest_filter=DiskFullChild." + name}, "", {std::string(kChildEnv) + "=" + dir});
  run.skipped = run.result.exit_code == 0 && run.result.out.find("[  SKIPPED ]") != std::string::npos;
  return run;
}

TEST(DiskFullTest, WriterSurvivesAFullDiskAndRecoversWhenSpaceReturns) {
  ScopedTempDir dir;
  ChildRun run;
  if (std::getenv("LG_DISK_FULL_FORCE_RLIMIT") == nullptr) {
    run = runChild("OnASmallTmpfs", dir.path());
    if (!run.skipped) {
      EXPECT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
      std::printf("%s", run.result.out.c_str());
      return;
    }
    std::printf("no tmpfs; limiting file sizes instead:\n%s", run.result.out.c_str());
  }
  const ChildRun limited = runChild("UnderAFileSizeLimit", dir.path());
  if (limited.skipped) {
    GTEST_SKIP() << "neither a tmpfs mount nor a file size limit works here:\n" << run.result.out << limited.result.out;
  }
  EXPECT_EQ(limited.result.exit_code, 0) << limited.result.out << limited.result.err;
  std::printf("%s", limited.result.out.c_str());
}

TEST(DiskFullTest, ExpiryForgetsNothingWhileDeletesCannotBeWritten) {
  ScopedTempDir dir;
  const ChildRun run = runChild("ExpiryOnAFullTmpfs", dir.path());
  if (run.skipped) GTEST_SKIP() << "needs a tmpfs mount (root):\n" << run.result.out;
  EXPECT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  std::printf("%s", run.result.out.c_str());
}

}  // namespace
}  // namespace lg::cache::testing

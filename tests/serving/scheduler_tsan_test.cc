// A cancellation storm under ThreadSanitizer: client threads submit hundreds
// of requests with shared prefixes and cancel most of them at random points
// (before admission, during the cache lookup while another request computes
// the shared blocks, mid-prefill, mid-decode), over a small pool with a real
// RocksDB tier behind the cache, so evictions, write-backs, restores and
// preemptions all happen. Every request must end with exactly one final
// event and leave no pinned block, claim or reference behind.
//
// The scheduler, the cache, the block allocator and SequenceBlocks are
// compiled from source with -fsanitize=thread (tests/serving/CMakeLists.txt);
// the CPU backend is not, and runs with one thread (all of its work on the
// engine thread), so the sanitizer sees every cross-thread access the
// serving core makes. RocksDB reports are suppressed as in cache_tsan_test.
#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/tsan_check.h"

#include "cache/disk_tier.h"
#include "tests/serving/serving_test_util.h"

extern "C" const char* __tsan_default_options() { return "halt_on_error=1:exitcode=66:second_deadlock_stack=1"; }
extern "C" const char* __tsan_default_suppressions() { return "race:rocksdb::\n"; }

namespace lg::serving::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kClients = 4;
constexpr int kRequestsPerClient = 75;
constexpr int kBt = 16;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/lg_serving_tsan_XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

TEST(SchedulerTsanTest, CancellationStormLeavesNothingBehind) {
  TempDir dir;
  auto backend = fixtureBackend("tiny-v3", kBt, /*num_blocks=*/24, /*threads=*/1);
  ASSERT_NE(backend, nullptr);
  cache::DiskTierOptions disk_options;
  disk_options.path = dir.path + "/kv";
  auto disk = cache::DiskTier::open(disk_options);
  ASSERT_TRUE(disk.isOk()) << disk.status().toString();
  cache::PrefixCacheOptions cache_options;
  cache_options.secret = std::make_shared<const cache::CacheSecret>(cache::CacheSecret::fromBytesForTest("tsan"));
  cache_options.tier0_budget_bytes = 12 * backend->latentLayout().blockBytes();
  cache_options.write_through_hits = 0;
  cache_options.restore_policy = cache::RestorePolicy::kAlways;
  auto cache = cache::PrefixCache::create(backend->latentPool(), disk->get(), cache::sha256("tsan model"), cache_options);
  ASSERT_TRUE(cache.isOk()) << cache.status().toString();
  SchedulerOptions options;
  options.step_tokens = 48;
  options.max_running = 8;
  options.max_queued = 1000;
  options.output_reservation_tokens = 8;
  auto created = Scheduler::create(*backend, cache->get(), tokenizer(), options);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  std::unique_ptr<Scheduler> scheduler = std::move(created).value();

  const int32_t vocab = backend->config().vocab_size;
  std::atomic<int> finals{0}, cancelled{0}, completed{0}, duplicate_finals{0};
  auto client = [&](int c) {
    std::mt19937 rng(static_cast<uint32_t>(c) * 7919u + 1);
    for (int i = 0; i < kRequestsPerClient; ++i) {
      // Three shared system prompts, each with growing conversations.
      std::vector<int32_t> prompt = randomIds(static_cast<size_t>(2 * kBt + 5), 1000 + rng() % 3, vocab);
      const std::vector<int32_t> turn = randomIds(static_cast<size_t>(5 + rng() % 40), rng(), vocab);
      prompt.insert(prompt.end(), turn.begin(), turn.end());
      GenerationRequest r = greedy(prompt, static_cast<int32_t>(4 + rng() % 40));
      if (rng() % 2 == 0) {
        r.sampling.temperature = 0.7f;
        r.sampling.seed = rng();
      }
      auto seen_final = std::make_shared<std::atomic<int>>(0);
      auto events = std::make_shared<std::atomic<int>>(0);
      Submission s = scheduler->submit(std::move(r), [&, seen_final, events](StreamEvent&& e) {
        events->fetch_add(1);
        if (!e.final) return;
        if (seen_final->fetch_add(1) != 0) duplicate_finals.fetch_add(1);
        finals.fetch_add(1);
        if (e.finish_reason == FinishReason::kCancelled) cancelled.fetch_add(1);
        if (e.finish_reason == FinishReason::kLength) completed.fetch_add(1);
      });
      ASSERT_TRUE(s) << s.refused.message;
      const unsigned how = rng() % 5;
      switch (how) {
        case 0: break;                                    // runs to the end
        case 1: s.handle.cancel(); break;                 // most likely before admission
        case 2: std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000)); s.handle.cancel(); break;
        case 3:                                           // after some tokens streamed
          while (events->load() < 1 + static_cast<int>(rng() % 3) && seen_final->load() == 0) {
            std::this_thread::sleep_for(100us);
          }
          s.handle.cancel();
          break;
        default: std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000)); s.handle.cancel(); break;
      }
      if (how != 0) s.handle.cancel();  // twice: idempotent
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) clients.emplace_back(client, c);
  for (std::thread& t : clients) t.join();
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (finals.load() < kClients * kRequestsPerClient && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(finals.load(), kClients * kRequestsPerClient);
  EXPECT_EQ(duplicate_finals.load(), 0);
  EXPECT_GT(cancelled.load(), kClients * kRequestsPerClient / 3);
  EXPECT_GT(completed.load(), 0);
  const SchedulerStats stats = scheduler->schedulerStats();
  EXPECT_EQ(stats.running_blocks, 0);
  EXPECT_EQ(stats.queued + stats.looking_up + stats.prefilling + stats.decoding, 0);
  std::printf("[ storm ] %d requests: %d cancelled, %d completed, %llu preemptions, %llu steps\n", finals.load(),
              cancelled.load(), completed.load(), static_cast<unsigned long long>(stats.preemptions),
              static_cast<unsigned long long>(stats.steps));
  scheduler.reset();
  const cache::CacheStats cs = (*cache)->snapshot();
  EXPECT_EQ(cs.tier0_pinned_blocks, 0u);
  EXPECT_EQ(cs.in_flight_blocks, 0u);
  EXPECT_EQ(backend->blocks().numUsed(), static_cast<int32_t>(cs.tier0.blocks));
  cache->reset();
  EXPECT_EQ(backend->blocks().numUsed(), 0);
}

// The sanitizer is live in this binary: a plain data race ends the process
// with the exit code a race in the storm would.
TEST(SchedulerTsanTest, DeliberateRaceIsReported) { lg::testing::expectDeliberateRaceIsReported(); }

}  // namespace
}  // namespace lg::serving::testing

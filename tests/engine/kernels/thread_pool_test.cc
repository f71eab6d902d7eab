// ThreadPool: every task runs exactly once per job, across thousands of
// back-to-back jobs, including jobs during which a worker is busy elsewhere.
#include "engine/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace lg::engine {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.numThreads(), threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t n = 1 + job % 37;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallelFor(n, [&](int64_t t, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, threads);
        hits[static_cast<size_t>(t)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPoolTest, SlowTasksAndIdleGapsAreHandled) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20; ++job) {
    pool.parallelFor(8, [&](int64_t t, int) {
      if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      sum.fetch_add(t);
    });
    if (job % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers fall asleep
  }
  EXPECT_EQ(sum.load(), 20 * 28);
}

}  // namespace
}  // namespace lg::engine

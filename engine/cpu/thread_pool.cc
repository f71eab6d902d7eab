#include "engine/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace lg::engine {
namespace {

// About 50 microseconds of polling before sleeping: long enough to bridge the
// gap between two kernels of a decode step, short enough not to steal a core
// from other processes when the engine is idle.
constexpr int kSpinIterations = 20000;

uint32_t generationOf(uint64_t state) { return static_cast<uint32_t>(state >> 32); }

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_acq_rel);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::runTasks(uint32_t generation, int thread) {
  const Job& job = jobs_[generation & 1];
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    if (generationOf(s) != generation) return;
    // Read the slot before claiming; the claim succeeds only if the job is
    // still `generation`, in which case the slot was stable.
    const TaskFn fn = job.fn.load(std::memory_order_relaxed);
    void* ctx = job.ctx.load(std::memory_order_relaxed);
    const int64_t n = job.num_tasks.load(std::memory_order_relaxed);
    const int64_t task = static_cast<int64_t>(s & 0xffffffffu);
    if (task >= n) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    fn(ctx, task, thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* ctx) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  const uint32_t generation = generationOf(state_.load(std::memory_order_relaxed)) + 1;
  Job& job = jobs_[generation & 1];
  job.fn.store(fn, std::memory_order_relaxed);
  job.ctx.store(ctx, std::memory_order_relaxed);
  job.num_tasks.store(num_tasks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  state_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);  // publishes the job
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  runTasks(generation, 0);
  // Only tasks that a worker claimed can still be running.
  while (done_.load(std::memory_order_acquire) != num_tasks) _mm_pause();
}

void ThreadPool::workerLoop(int thread) {
  uint32_t seen_wake = 0;
  uint32_t last_generation = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations; ++i) {
      if (generationOf(state_.load(std::memory_order_acquire)) != last_generation) break;
      if (stop_.load(std::memory_order_relaxed)) return;
      _mm_pause();
    }
    const uint32_t generation = generationOf(state_.load(std::memory_order_acquire));
    if (generation == last_generation) {
      wake_.wait(seen_wake, std::memory_order_acquire);
      seen_wake = wake_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      continue;
    }
    seen_wake = wake_.load(std::memory_order_acquire);
    last_generation = generation;
    runTasks(generation, thread);
  }
}

}  // namespace lg::engine

// ThreadPool: a small fork-join pool for the CPU backend's kernels.
//
// parallelFor(n, fn) runs fn(task, thread) for every task in [0, n) on the
// calling thread plus the pool's workers and returns when all are done. Tasks
// are claimed one at a time, and the caller waits only for tasks a worker has
// actually started: a worker that is asleep or descheduled (a busy machine)
// simply misses the job instead of stalling it. Workers spin briefly after a
// job (decode issues many short jobs back to back) and then sleep on a futex,
// so an idle pool costs no CPU.
//
// Thread-safety: one caller at a time (the engine thread); parallelFor is not
// reentrant (fn must not call parallelFor on the same pool).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace lg::engine {

class ThreadPool {
 public:
  // num_threads <= 0: one per hardware thread. The caller counts as thread 0.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

  template <typename F>
  void parallelFor(int64_t num_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(num_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  // Jobs alternate between two slots, so a late worker never reads a slot that
  // is being rewritten for a job it could still claim tasks from.
  struct Job {
    std::atomic<TaskFn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> num_tasks{0};
  };

  void run(int64_t num_tasks, TaskFn fn, void* ctx);
  void workerLoop(int thread);
  // Claims and runs tasks of job `generation` until none is left.
  void runTasks(uint32_t generation, int thread);

  std::vector<std::thread> workers_;
  Job jobs_[2];
  // (generation << 32) | next task index: claiming a task and checking that
  // the job is still current is one compare-and-swap.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};       // tasks finished in the current job
  std::atomic<uint32_t> wake_{0};      // futex word workers sleep on
  std::atomic<bool> stop_{false};
};

}  // namespace lg::engine

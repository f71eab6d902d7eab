// IoPool: the prefix cache's own worker threads. Disk restores (read, verify,
// import) and the continuations of lookups that waited for another request's
// blocks run here, so that no thread that calls into the cache ever blocks in
// it: a scheduler that serves many requests from one engine thread gets a
// pending lease back and carries on.
//
// Tasks run in the order they were posted, on up to threads() threads at
// once; timers post their task when due. One pool per cache, shared by all
// of its leases (restores of concurrent requests share its threads rather
// than each starting their own).
//
// Thread-safety: post and postAt may be called from any thread, tasks
// included. shutdown() (also run by the destructor) runs every task already
// posted and any they post in turn, drops timers that are not due yet and
// joins the threads; posting after shutdown began from outside the pool is a
// caller bug (the task may never run).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace lg::cache {

class IoPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;

  // Starts `threads` threads (at least one). ResourceExhausted if the system
  // refuses a thread.
  static Result<std::unique_ptr<IoPool>> create(int threads);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  void post(Task task);
  // Posts `task` once `when` has passed.
  void postAt(Clock::time_point when, Task task);
  void shutdown();

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  IoPool() = default;
  void run();

  std::mutex mu_;
  std::condition_variable cv_;                   // a task or a timer arrived, or stopping
  std::deque<Task> tasks_;                       // guarded by mu_
  std::multimap<Clock::time_point, Task> timers_;  // guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  std::vector<std::thread> threads_;             // started by create(), joined by shutdown()
};

}  // namespace lg::cache

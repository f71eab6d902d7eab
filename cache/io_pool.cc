#include "cache/io_pool.h"

#include <algorithm>
#include <string>
#include <system_error>
#include <utility>

namespace lg::cache {

Result<std::unique_ptr<IoPool>> IoPool::create(int threads) {
  std::unique_ptr<IoPool> pool(new IoPool());
  for (int i = 0; i < std::max(1, threads); ++i) {
    try {
      pool->threads_.emplace_back([p = pool.get()] { p->run(); });
    } catch (const std::system_error& e) {
      pool->shutdown();
      return resourceExhausted(std::string("cache I/O pool: cannot start a thread: ") + e.what());
    }
  }
  return pool;
}

IoPool::~IoPool() { shutdown(); }

void IoPool::post(Task task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void IoPool::postAt(Clock::time_point when, Task task) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;  // shutting down: timers are dropped
    timers_.emplace(when, std::move(task));
  }
  // Every thread re-evaluates its wait: the new timer may be the earliest.
  cv_.notify_all();
}

void IoPool::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    timers_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void IoPool::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      tasks_.push_back(std::move(timers_.begin()->second));
      timers_.erase(timers_.begin());
    }
    if (!tasks_.empty()) {
      Task task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // destroy what it captured before taking the lock again
      lock.lock();
      continue;
    }
    if (stop_) return;
    if (timers_.empty()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, timers_.begin()->first);
    }
  }
}

}  // namespace lg::cache

// BlockingPool: the threads on which the routes that wait on the disk run,
// so that no I/O thread ever waits for an fsync or a long scan.
//
// The I/O threads (http_server.h) must never block: every connection on a
// thread stalls while one handler waits, streams included. Most routes only
// look up memory or hand their work to the engine thread, but some wait on
// the billing store: the admin API's synced writes (keys, prices, budgets,
// DELETE of a stored response: an fsync, hundreds of milliseconds on a busy
// disk) and its scans (usage, the ledger, its verification, the dashboard).
// The router runs those routes here (Router::add with Runs::kBlocking).
//
// The queue is bounded: at `max_queued` jobs waiting or running, a new one is
// refused and its request answered 503 server_overloaded (Retry-After: 1), so
// a flood of admin queries cannot pile up without limit. Jobs run in no
// particular order, on `threads` threads (boost::asio::thread_pool).
//
// Thread-safety: run() may be called from any thread. The destructor runs
// what is queued and joins; destroy the pool after the server stopped (so
// nothing more is queued) and before what the routes' handlers use.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "proxy/http/exchange.h"

namespace boost::asio {
class thread_pool;
}

namespace lg::proxy {

struct BlockingPoolOptions {
  int threads = 2;
  size_t max_queued = 256;
};

class BlockingPool {
 public:
  explicit BlockingPool(BlockingPoolOptions options = {});
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Calls handler(exchange->request(), exchange) on a pool thread, or
  // answers 503 at once when `max_queued` jobs are already queued.
  void run(const Handler& handler, std::shared_ptr<Exchange> exchange);

  size_t queued() const { return queued_.load(); }  // waiting or running

 private:
  const BlockingPoolOptions options_;
  std::unique_ptr<boost::asio::thread_pool> pool_;
  std::atomic<size_t> queued_{0};
};

}  // namespace lg::proxy

// BlockingPool: the threads on which the routes that wait on the disk run,
// so that no I/O thread ever waits for an fsync or a long scan.
//
// The I/O threads (http_server.h) must never block: every connection on a
// thread stalls while one handler waits, streams included. Most routes only
// look up memory or hand their work to the engine thread, but some wait on
// the billing store: the admin API's synced writes (keys, prices, budgets,
// DELETE of a stored response: an fsync, hundreds of milliseconds on a busy
// disk), its scans (usage, the ledger, its verification, the dashboard) and
// the reads of stored responses. The router runs those routes here
// (Router::add with Runs::kBlocking); a handler may also submit() the rest
// of its work here (POST /v1/responses reading a previous_response_id chain).
//
// Two lanes (issue 21, item 8), so that no tenant can starve the admin plane:
//   - the admin lane: `admin_threads` threads of its own and a queue of
//     `admin_max_queued` jobs that only the admin key's requests use, so an
//     operator can create and revoke keys while tenants flood the API;
//   - the tenants' lane: `threads` threads and `max_queued` jobs for all
//     tenants together, of which one tenant (a team; every unauthenticated
//     caller counts as one tenant "") may hold at most
//     `max_queued_per_tenant`, so one team's flood leaves room for the others.
// A job over its lane's bound is answered 503 server_overloaded, one over its
// tenant's share 429 rate_limit_exceeded (both with Retry-After: 1). Who a
// routed job belongs to is the classifier's answer (set by the composition
// root: the caller's credentials, looked up in memory), decided before the
// job is queued. Jobs run in no particular order (boost::asio::thread_pool).
//
// Thread-safety: run() and submit() may be called from any thread;
// setClassifier() before the server starts. The destructor runs what is
// queued and joins; destroy the pool after the server stopped (so nothing
// more is queued) and before what the routes' handlers use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/metrics.h"
#include "proxy/http/exchange.h"

namespace boost::asio {
class thread_pool;
}

namespace lg::proxy {

struct BlockingPoolOptions {
  int threads = 2;                    // the tenants' lane
  size_t max_queued = 256;            // the tenants' lane, waiting or running, all tenants together
  size_t max_queued_per_tenant = 32;  // one tenant's share of max_queued
  int admin_threads = 1;              // the admin lane: never used by tenants
  size_t admin_max_queued = 64;
};

// Whose a job is: the admin's, or a tenant's (a team; "" for a caller
// without credentials).
struct JobOwner {
  bool admin = false;
  std::string tenant;
};

class BlockingPool {
 public:
  explicit BlockingPool(BlockingPoolOptions options = {});
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  static JobOwner admin() { return JobOwner{true, ""}; }
  static JobOwner tenant(std::string team) { return JobOwner{false, std::move(team)}; }

  // Whose a routed request's job is; without one, every job is tenant "".
  using Classifier = std::function<JobOwner(const HttpRequest& request)>;
  void setClassifier(Classifier classifier) { classifier_ = std::move(classifier); }

  // Calls handler(exchange->request(), exchange) on a pool thread of the
  // request's lane, or answers 503 / 429 at once (above).
  void run(const Handler& handler, std::shared_ptr<Exchange> exchange);
  // Runs `job` on a pool thread of `owner`'s lane, or answers the exchange
  // 503 / 429 at once; the job must answer the exchange itself.
  void submit(const JobOwner& owner, std::shared_ptr<Exchange> exchange, std::function<void()> job);

  size_t queued() const { return queued_.load() + admin_queued_.load(); }  // waiting or running, both lanes
  size_t adminQueued() const { return admin_queued_.load(); }
  size_t tenantQueued(const std::string& tenant) const;

  // latentgate_blocking_pool_queued{lane}, latentgate_blocking_pool_refusals_total{lane, reason}.
  void collect(metrics::ExpositionWriter& w) const;

 private:
  // Takes a place for the job, or answers the refusal; true when taken.
  bool admit(const JobOwner& owner, Exchange& exchange);
  void release(const JobOwner& owner);

  const BlockingPoolOptions options_;
  std::unique_ptr<boost::asio::thread_pool> pool_;
  std::unique_ptr<boost::asio::thread_pool> admin_pool_;
  Classifier classifier_;
  std::atomic<size_t> queued_{0};
  std::atomic<size_t> admin_queued_{0};
  mutable std::mutex mu_;
  std::unordered_map<std::string, size_t> per_tenant_;  // guarded by mu_; entries at 0 are erased
  std::atomic<uint64_t> refused_admin_full_{0}, refused_lane_full_{0}, refused_tenant_share_{0};
};

}  // namespace lg::proxy

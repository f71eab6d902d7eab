#include "proxy/http/blocking_pool.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/check.h"
#include "proxy/http/http_errors.h"

namespace lg::proxy {

BlockingPool::BlockingPool(BlockingPoolOptions options)
    : options_(options),
      pool_(std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(std::max(options.threads, 1)))),
      admin_pool_(std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(std::max(options.admin_threads, 1)))) {}

BlockingPool::~BlockingPool() {
  pool_->join();
  admin_pool_->join();
}

size_t BlockingPool::tenantQueued(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : it->second;
}

bool BlockingPool::admit(const JobOwner& owner, Exchange& exchange) {
  if (owner.admin) {
    if (admin_queued_.fetch_add(1) >= std::max<size_t>(options_.admin_max_queued, 1)) {
      admin_queued_.fetch_sub(1);
      refused_admin_full_.fetch_add(1);
      respondWithApiError(exchange, overloadedError(1));
      return false;
    }
    return true;
  }
  {
    // The tenant's share first: a team at its share is told so (429), and
    // takes no place in the lane that other teams could use.
    std::lock_guard lock(mu_);
    size_t& mine = per_tenant_[owner.tenant];
    if (mine >= std::max<size_t>(options_.max_queued_per_tenant, 1)) {
      if (mine == 0) per_tenant_.erase(owner.tenant);
      refused_tenant_share_.fetch_add(1);
      ApiError e;
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      e.message = "Too many of this team's requests are waiting for the server's disk-bound work (at most " +
                  std::to_string(options_.max_queued_per_tenant) + " at once); retry after a second.";
      e.retry_after_s = 1;
      respondWithApiError(exchange, e);
      return false;
    }
    if (queued_.fetch_add(1) >= std::max<size_t>(options_.max_queued, 1)) {
      queued_.fetch_sub(1);
      if (mine == 0) per_tenant_.erase(owner.tenant);
      refused_lane_full_.fetch_add(1);
      respondWithApiError(exchange, overloadedError(1));
      return false;
    }
    ++mine;
  }
  return true;
}

void BlockingPool::release(const JobOwner& owner) {
  if (owner.admin) {
    admin_queued_.fetch_sub(1);
    return;
  }
  std::lock_guard lock(mu_);
  auto it = per_tenant_.find(owner.tenant);
  LG_CHECK(it != per_tenant_.end() && it->second > 0, "blocking pool: a job released twice");
  if (--it->second == 0) per_tenant_.erase(it);
  queued_.fetch_sub(1);
}

void BlockingPool::submit(const JobOwner& owner, std::shared_ptr<Exchange> exchange, std::function<void()> job) {
  if (!admit(owner, *exchange)) return;
  boost::asio::post(owner.admin ? *admin_pool_ : *pool_, [this, owner, exchange, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      // As a route's throw on an I/O thread: a 500 (ignored if the job
      // already answered), and the pool goes on.
      respondWithApiError(*exchange, internalServerError());
    }
    release(owner);
  });
}

void BlockingPool::run(const Handler& handler, std::shared_ptr<Exchange> exchange) {
  JobOwner owner = classifier_ ? classifier_(exchange->request()) : JobOwner{};
  // A copy of the handler: a job may still run after the router is gone
  // (the destructor runs what is queued), never after what it points to.
  submit(owner, exchange, [handler, exchange] {
    callHandler(handler, exchange);  // as on an I/O thread: a throw answers 500
  });
}

void BlockingPool::collect(metrics::ExpositionWriter& w) const {
  if (w.family("latentgate_blocking_pool_queued", "Jobs of the blocking pool waiting or running, by lane.",
               metrics::MetricType::kGauge)) {
    w.sample({{"lane", "admin"}}, static_cast<uint64_t>(admin_queued_.load()));
    w.sample({{"lane", "tenant"}}, static_cast<uint64_t>(queued_.load()));
  }
  if (w.family("latentgate_blocking_pool_refusals_total",
               "Requests the blocking pool refused: its lane was full (503) or the tenant held its share (429).",
               metrics::MetricType::kCounter)) {
    w.sample({{"lane", "admin"}, {"reason", "lane_full"}}, refused_admin_full_.load());
    w.sample({{"lane", "tenant"}, {"reason", "lane_full"}}, refused_lane_full_.load());
    w.sample({{"lane", "tenant"}, {"reason", "tenant_share"}}, refused_tenant_share_.load());
  }
}

}  // namespace lg::proxy

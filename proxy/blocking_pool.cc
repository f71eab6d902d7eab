#include "proxy/blocking_pool.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "proxy/openai_error.h"
#include "proxy/proxy_log.h"

namespace lg::proxy {

BlockingPool::BlockingPool(BlockingPoolOptions options)
    : options_(options),
      pool_(std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(std::max(options.threads, 1)))) {}

BlockingPool::~BlockingPool() { pool_->join(); }

void BlockingPool::run(const Handler& handler, std::shared_ptr<Exchange> exchange) {
  if (queued_.fetch_add(1) >= std::max<size_t>(options_.max_queued, 1)) {
    queued_.fetch_sub(1);
    return respondWithApiError(*exchange, overloadedError(1));
  }
  // A copy of the handler: a job may still run after the router is gone
  // (the destructor runs what is queued), never after what it points to.
  boost::asio::post(*pool_, [this, handler, exchange = std::move(exchange)]() mutable {
    // As on an I/O thread (connection.cc): a handler that throws answers 500
    // and takes nothing else down.
    try {
      handler(exchange->request(), exchange);
    } catch (const std::exception& e) {
      proxyLog()->error("{}: the handler threw: {}", exchange->request().id, e.what());
      respondWithApiError(*exchange, internalServerError());
    } catch (...) {
      proxyLog()->error("{}: the handler threw", exchange->request().id);
      respondWithApiError(*exchange, internalServerError());
    }
    queued_.fetch_sub(1);
  });
}

}  // namespace lg::proxy

#include "proxy/http/blocking_pool.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "proxy/http/http_errors.h"

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
  boost::asio::post(*pool_, [this, handler, exchange = std::move(exchange)] {
    callHandler(handler, exchange);  // as on an I/O thread: a throw answers 500
    queued_.fetch_sub(1);
  });
}

}  // namespace lg::proxy

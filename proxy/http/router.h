// Router: a Handler that picks a route by method and path.
//
// Routes are exact paths ("/v1/chat/completions") or prefixes ("/admin/keys/"
// for /admin/keys/{id}); an exact route wins over a prefix, a longer prefix
// over a shorter one. A path no route knows gets OpenAI's 404 ("Invalid URL
// (GET /x)"); a known path with another method gets 405 with an Allow header.
// Paths are matched as sent (no percent-decoding, no dot-segment removal):
// a route matches only the canonical spelling of its path.
//
// A route that waits on the disk (a synced write, a scan) is added with
// Runs::kBlocking: handle() passes it to the BlockingPool
// (blocking_pool.h) instead of calling it on the I/O thread. Without a pool
// (setBlockingPool not called: unit tests of routes, tools) it runs inline.
//
// Thread-safety: add routes (and set the pool) before the server starts;
// handle() is then read-only and may run on every I/O thread at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/http/exchange.h"

namespace lg::proxy {

class BlockingPool;

// Where a route's handler runs.
enum class Runs : uint8_t {
  kOnIoThread,  // at once, on the connection's I/O thread: must not block
  kBlocking,    // on the BlockingPool: may wait for the disk
};

class Router {
 public:
  void add(std::string method, std::string path, Handler handler, Runs runs = Runs::kOnIoThread);
  void addPrefix(std::string method, std::string prefix, Handler handler, Runs runs = Runs::kOnIoThread);
  // The pool for Runs::kBlocking routes; it must outlive the server.
  void setBlockingPool(BlockingPool* pool) { blocking_pool_ = pool; }

  void handle(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  // A route as added: for labels (metrics), never for dispatch.
  struct RouteInfo {
    std::string method;
    std::string path;  // the exact path, or the prefix
    bool prefix = false;
  };
  std::vector<RouteInfo> routes() const;
  // The index in routes() of the route handle() would call for this method
  // and path, or -1 when it would answer 404 or 405 itself.
  int find(std::string_view method, std::string_view path) const;
  // A Handler for HttpServer::start that calls handle(); the router must
  // outlive the server.
  Handler handler() const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
    Runs runs = Runs::kOnIoThread;
  };
  // The route whose path matches best (exact, else the longest prefix),
  // whatever its method; null: none.
  const Route* bestPath(std::string_view path) const;

  std::vector<Route> routes_;
  BlockingPool* blocking_pool_ = nullptr;
};

}  // namespace lg::proxy

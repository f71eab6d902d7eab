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
// Each route has a body size class (BodySize): generation routes take large
// bodies (server.max_body_bytes), every other route small ones
// (server.max_control_body_bytes), and a route added with a GuardedHandler
// (Admission's guards) has its credentials checked when the request's header
// is complete: preflight() (preflight.h) answers 404, 405 and 401 before the
// body is read.
//
// Thread-safety: add routes (and set the pool) before the server starts;
// handle() is then read-only and may run on every I/O thread at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/http/exchange.h"
#include "proxy/http/preflight.h"

namespace lg::proxy {

class BlockingPool;

// Where a route's handler runs.
enum class Runs : uint8_t {
  kOnIoThread,  // at once, on the connection's I/O thread: must not block
  kBlocking,    // on the BlockingPool: may wait for the disk
};

// How large a route's request body may be (setBodyLimits).
enum class BodySize : uint8_t {
  kSmall,  // admin, usage, dashboard, metrics, health: kilobytes
  kLarge,  // prompts: generation routes, published prefixes
};

class Router {
 public:
  void add(std::string method, std::string path, Handler handler, Runs runs = Runs::kOnIoThread,
           BodySize body = BodySize::kSmall);
  void addPrefix(std::string method, std::string prefix, Handler handler, Runs runs = Runs::kOnIoThread,
                 BodySize body = BodySize::kSmall);
  // A guarded route: its HeaderGuard also runs at header time (preflight).
  void add(std::string method, std::string path, GuardedHandler handler, Runs runs = Runs::kOnIoThread,
           BodySize body = BodySize::kSmall);
  void addPrefix(std::string method, std::string prefix, GuardedHandler handler, Runs runs = Runs::kOnIoThread,
                 BodySize body = BodySize::kSmall);
  // Body limits by size class, for preflight(); unset: the server's limit for both.
  void setBodyLimits(uint64_t large, uint64_t small) {
    large_body_bytes_ = large;
    small_body_bytes_ = small;
  }
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

  // At header time: 404 or 405 as handle() would answer them, 401 when the
  // route's guard refuses the credentials; else the route's body limit and
  // whether its guard accepted the caller.
  HeadDecision preflight(const HttpRequest& head) const;
  // preflight() as a Preflight for HttpServer::start; the router must outlive
  // the server.
  Preflight preflighter() const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
    Runs runs = Runs::kOnIoThread;
    BodySize body = BodySize::kSmall;
    HeaderGuard guard;  // null: no credentials are checked at header time
  };
  // The route whose path matches best (exact, else the longest prefix),
  // whatever its method; null: none.
  const Route* bestPath(std::string_view path) const;
  // The route for this method among those of `best`'s path, or null (and
  // `allow` lists the methods there are).
  const Route* forMethod(const Route& best, std::string_view method, std::string* allow) const;

  std::vector<Route> routes_;
  BlockingPool* blocking_pool_ = nullptr;
  uint64_t large_body_bytes_ = 0;  // 0: the server's limit
  uint64_t small_body_bytes_ = 0;
};

}  // namespace lg::proxy

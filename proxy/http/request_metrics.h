// RequestMetrics: requests by endpoint, method and status code, for
// /metrics (docs/metrics.md), counted by a Handler that wraps the router;
// and the HTTP server's own counters as metric families.
//
//   latentgate_http_requests_total{endpoint="/v1/chat/completions",method="POST",code="200"}
//
// Every request the server hands to the router, or that the router's
// preflight refuses at header time (preflight.h), is counted once: when its
// handler answers (respond() or startStream(), with the status it sent, on
// whatever thread answers), or, when the exchange ends without an answer
// or answers after it disconnected (the client left first, or the server's
// own 504 cut it), with code 499 as nginx counts a client that closed the
// request. A stream that started is counted with its status even if the
// client leaves halfway. `endpoint` is the route as
// added (a prefix route as its prefix and `*`: `/v1/responses/*`), `method`
// the route's; a request no route takes for its method and path (404, 405)
// is counted as endpoint="other", method="other", so that clients cannot
// create series with paths or methods of their own.
//
// Cost per request: one small allocation (the counting Exchange, which
// forwards every call to the server's) and one relaxed atomic add; the
// counters are a fixed array per route, no lock anywhere.
//
// Thread-safety: handler() may run on every I/O thread at once; collect()
// from any thread. The router must outlive the handler; the counters live as
// long as the last exchange counted into them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "proxy/http/exchange.h"
#include "proxy/http/http_server.h"
#include "proxy/http/router.h"

namespace lg::proxy {

class RequestMetrics {
 public:
  struct Counters;  // the counts (request_metrics.cc), shared with the exchanges counted into them

  // Takes the router's routes as they are now: add every route first.
  explicit RequestMetrics(const Router& router);

  // A Handler for HttpServer::start: router.handle() behind an Exchange that
  // counts its status.
  Handler handler() const;
  // A Preflight for HttpServer::start: router.preflight(), counting each
  // request it refuses at header time (401, 404, 405) as if its route had
  // answered, so that a request is counted once whichever step answers it.
  Preflight preflighter() const;

  // Counts one request of route `route` (an index of Router::routes(), or
  // -1: none) answered with `status`.
  void count(int route, int status) const;
  // The count so far (tests).
  uint64_t value(int route, int status) const;

  // latentgate_http_requests_total, with a series for every (route, code)
  // counted at least once.
  void collect(metrics::ExpositionWriter& w) const;

 private:
  const Router& router_;
  std::vector<std::pair<std::string, std::string>> labels_;  // (endpoint, method) per route; the last is "other"
  std::shared_ptr<Counters> counters_;
};

// The server's counters (HttpServer::stats()): connections accepted,
// refused and open, TLS handshake failures, requests the server answered
// itself (400, 408, 413, 431, 505), timeouts by kind, disconnects.
void collectHttpServerStats(metrics::ExpositionWriter& w, const HttpServerStats& s);

}  // namespace lg::proxy

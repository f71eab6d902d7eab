#include "proxy/http/request_metrics.h"

namespace lg::proxy {

namespace {

// Status codes are counted in an array indexed by code; anything outside
// 100..599 (a handler bug) is counted as 500.
constexpr int kCodes = 600;
constexpr int kClientClosed = 499;

int codeIndex(int status) { return status >= 100 && status < kCodes ? status : 500; }

}  // namespace

struct RequestMetrics::Counters {
  explicit Counters(size_t routes) : slots(routes + 1), counts(new std::atomic<uint64_t>[slots * kCodes]) {
    for (size_t i = 0; i < slots * kCodes; ++i) counts[i].store(0, std::memory_order_relaxed);
  }
  // Slot 0: no route; slot r + 1: route r.
  std::atomic<uint64_t>& at(int route, int status) {
    return counts[static_cast<size_t>(route + 1) * kCodes + static_cast<size_t>(codeIndex(status))];
  }
  const size_t slots;
  std::unique_ptr<std::atomic<uint64_t>[]> counts;
};

namespace {

// Forwards everything to the server's exchange and counts the first status
// its handler answers with, or 499 when it is destroyed unanswered.
class CountingExchange final : public Exchange {
 public:
  CountingExchange(std::shared_ptr<Exchange> inner, std::shared_ptr<RequestMetrics::Counters> counters, int route)
      : inner_(std::move(inner)), counters_(std::move(counters)), route_(route) {}
  ~CountingExchange() override {
    if (!counted_.load(std::memory_order_relaxed)) counters_->at(route_, kClientClosed).fetch_add(1, std::memory_order_relaxed);
  }

  const HttpRequest& request() const override { return inner_->request(); }
  void respond(int status, HttpHeaders headers, std::string body) override {
    countOnce(status);
    inner_->respond(status, std::move(headers), std::move(body));
  }
  void startStream(int status, HttpHeaders headers) override {
    countOnce(status);
    inner_->startStream(status, std::move(headers));
  }
  void send(std::string data) override { inner_->send(std::move(data)); }
  void end() override { inner_->end(); }
  void onDisconnect(std::function<void(DisconnectCause)> callback) override { inner_->onDisconnect(std::move(callback)); }
  bool disconnected() const override { return inner_->disconnected(); }

 private:
  // An answer made after the client left (a cancelled generation's error)
  // never reached it: 499 too.
  void countOnce(int status) {
    if (!counted_.exchange(true, std::memory_order_relaxed)) {
      if (inner_->disconnected()) status = kClientClosed;
      counters_->at(route_, status).fetch_add(1, std::memory_order_relaxed);
    }
  }

  const std::shared_ptr<Exchange> inner_;
  const std::shared_ptr<RequestMetrics::Counters> counters_;
  const int route_;
  std::atomic<bool> counted_{false};
};

}  // namespace

RequestMetrics::RequestMetrics(const Router& router) : router_(router) {
  for (const Router::RouteInfo& r : router.routes()) labels_.emplace_back(r.prefix ? r.path + "*" : r.path, r.method);
  counters_ = std::make_shared<Counters>(labels_.size());
}

Handler RequestMetrics::handler() const {
  return [this](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    int route = router_.find(request.method, request.path);
    // A route added after this was built is counted as no route.
    if (route >= static_cast<int>(labels_.size())) route = -1;
    router_.handle(request, std::make_shared<CountingExchange>(std::move(exchange), counters_, route));
  };
}

Preflight RequestMetrics::preflighter() const {
  return [this](const HttpRequest& head) {
    HeadDecision d = router_.preflight(head);
    if (d.refusal) {
      int route = router_.find(head.method, head.path);
      if (route >= static_cast<int>(labels_.size())) route = -1;
      count(route, d.refusal->http_status);
    }
    return d;
  };
}

void RequestMetrics::count(int route, int status) const {
  counters_->at(route, status).fetch_add(1, std::memory_order_relaxed);
}

uint64_t RequestMetrics::value(int route, int status) const {
  return counters_->at(route, status).load(std::memory_order_relaxed);
}

void RequestMetrics::collect(metrics::ExpositionWriter& w) const {
  if (!w.family("latentgate_http_requests_total",
                "Requests handed to the router, by route, method and the status its handler answered with "
                "(499: the exchange ended unanswered; endpoint=\"other\": no route).",
                metrics::MetricType::kCounter)) {
    return;
  }
  for (int route = -1; route < static_cast<int>(labels_.size()); ++route) {
    const auto& [endpoint, method] =
        route < 0 ? std::pair<std::string, std::string>("other", "other") : labels_[static_cast<size_t>(route)];
    for (int code = 100; code < kCodes; ++code) {
      const uint64_t n = value(route, code);
      if (n != 0) w.sample({{"endpoint", endpoint}, {"method", method}, {"code", std::to_string(code)}}, n);
    }
  }
}

void collectHttpServerStats(metrics::ExpositionWriter& w, const HttpServerStats& s) {
  using metrics::MetricType;
  w.counter("latentgate_http_connections_accepted_total", "Connections accepted.", s.connections_accepted);
  w.counter("latentgate_http_connections_refused_total",
            "Connections closed at accept: over server.max_connections or server.max_connections_per_address, or "
            "stopping.", s.connections_refused);
  if (w.family("latentgate_http_connections_shed_total",
               "Connections ended to keep room (issue 21 item 5): closed at accept over "
               "server.max_connections_per_address (per_address) or over server.max_connections or stopping "
               "(max_connections); 503 in a reserved slot without valid credentials (reserve); idle, never "
               "authenticated, cut by server.pressure_idle_timeout_ms (pressure).",
               MetricType::kCounter)) {
    w.sample({{"reason", "per_address"}}, s.connections_refused_per_address);
    w.sample({{"reason", "max_connections"}}, s.connections_refused - s.connections_refused_per_address);
    w.sample({{"reason", "reserve"}}, s.connections_refused_reserve);
    w.sample({{"reason", "pressure"}}, s.connections_closed_under_pressure);
  }
  if (w.family("latentgate_http_refused_before_body_total",
               "Requests answered when their header was complete, before the body was read (issue 21 item 4): "
               "401 unauthenticated, 404 or 405 no_route, 413 body_too_large (the route's limit), 503 "
               "body_budget (server.max_inflight_body_bytes).",
               MetricType::kCounter)) {
    w.sample({{"reason", "unauthenticated"}}, s.preflight_unauthenticated);
    w.sample({{"reason", "no_route"}}, s.preflight_no_route);
    w.sample({{"reason", "body_too_large"}}, s.bodies_too_large);
    w.sample({{"reason", "body_budget"}}, s.bodies_over_budget);
  }
  w.gauge("latentgate_http_inflight_body_bytes",
          "Request body bytes reserved now against server.max_inflight_body_bytes.",
          static_cast<int64_t>(s.inflight_body_bytes));
  w.gauge("latentgate_http_connections_open", "Connections open now.", static_cast<int64_t>(s.connections_open));
  w.counter("latentgate_http_tls_handshake_failures_total", "TLS handshakes that failed.", s.tls_handshake_failures);
  w.counter("latentgate_http_server_rejected_requests_total",
            "Requests the server answered itself before any route (400, 408, 413, 431, 501, 505; and at header time 401, 404, 405, 503).", s.rejected_requests);
  if (w.family("latentgate_http_timeouts_total",
               "Connections cut by a timeout: header (handshake or header too slow), request (504), write (a "
               "client not reading).",
               MetricType::kCounter)) {
    w.sample({{"kind", "header"}}, s.header_timeouts);
    w.sample({{"kind", "request"}}, s.request_timeouts);
    w.sample({{"kind", "write"}}, s.write_timeouts);
  }
  w.counter("latentgate_http_disconnects_total", "Exchanges whose connection went away before their response was "
            "complete.", s.disconnects);
}

}  // namespace lg::proxy

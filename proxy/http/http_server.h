// HttpServer: the HTTPS (or, behind a trusted load balancer, plain HTTP)
// listener. HTTP/1.1 with keep-alive over Boost.Beast and Asio, TLS 1.2 and
// 1.3 through OpenSSL; every complete request goes to one Handler
// (exchange.h), usually a Router (router.h). docs/gateway.md describes it.
//
// Threads: `io_threads` threads run one io_context; each connection runs on
// its own strand, so its reads, writes, timers and the Exchange calls posted
// to it never run concurrently, and no lock is held on the I/O path. Nothing
// on these threads blocks: handlers hand slow work elsewhere (generation to
// the engine thread, disk waits to the blocking pool: blocking_pool.h) and
// answer through the Exchange from any thread.
//
// Limits and timeouts (HttpServerOptions): header bytes (431), body bytes
// (413), open connections (more are closed at accept), the TLS handshake and
// request header together (slow clients are cut off: 408 once they sent
// part of a request), the body, keep-alive idleness, a total time for
// non-streamed responses (504) and progress on every write. The server's own
// errors are OpenAI error objects (http_errors.h), each with an
// x-request-id; internals go to the log, never to the client.
//
// The edge before authentication (issue 21, docs/security.md): when a
// request's header is complete the server asks the Preflight (preflight.h,
// the Router's) before it reads the body or sends 100 Continue: unknown
// routes (404, 405) and missing or invalid credentials (401) are answered at
// once and the connection closed; otherwise the route's body limit applies
// (413 beyond it). Bodies being read and handled count against one budget of
// in-flight body bytes (a declared length is reserved whole when the header
// arrives, a chunked body as it comes); a request beyond it gets 503 with
// Retry-After. Connections are capped per client address; the last
// `reserved_connections` slots take only a connection whose first request
// carries valid credentials (else 503); and once open connections pass 3/4
// of max_connections, connections that never authenticated and wait idle
// get pressure_idle_timeout instead of their usual wait, so the oldest idle
// ones close first.
//
// While a request is being handled the connection keeps a read pending, so a
// client that goes away is noticed at once (its exchange's onDisconnect runs),
// also in the middle of a stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "proxy/http/exchange.h"
#include "proxy/http/preflight.h"
#include "proxy/http/request_parser.h"

namespace lg::proxy {

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IP address or a name to resolve; "0.0.0.0" / "::" for all
  uint16_t port = 8443;            // 0: a free port (port() tells which)
  bool plain_http = false;         // no TLS: only behind a trusted load balancer that terminates it
  std::string cert_chain_pem;      // TLS: the server certificate (+ intermediates) and its key
  std::string key_pem;
  int io_threads = 2;
  int max_connections = 1024;      // open connections; more are closed as soon as accepted
  ParserLimits limits;             // header bytes (431) and body bytes (413)
  // A new connection must finish its TLS handshake and send its first request
  // header within this; on a kept-alive connection, a request's header must be
  // complete this long after its first byte.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};       // header done -> body complete
  std::chrono::milliseconds idle_timeout{60000};       // keep-alive wait for the next request
  std::chrono::milliseconds request_timeout{600000};   // request read -> non-streamed response written
  std::chrono::milliseconds write_timeout{30000};      // one write without completing (a client not reading)
  // How long the server spends on a connection it ends after an error:
  // writing the error response, then reading and dropping what the client
  // still sends (the rest of a refused body), so that closing does not reset
  // the connection before the client read the response.
  std::chrono::milliseconds linger_timeout{2000};
  size_t max_stream_buffer_bytes = size_t{8} << 20;   // stream bytes queued for a slow client; more: closed
  // Request bodies being read or handled, all connections together; a
  // request that would pass it gets 503 (Retry-After: 1) and its connection
  // closes.
  uint64_t max_inflight_body_bytes = uint64_t{256} << 20;
  int max_connections_per_address = 64;  // open connections from one client IP; more are closed at accept; 0: no cap
  // Slots at the top of max_connections (at most a quarter of it) that only
  // a connection whose first request carries valid credentials may keep:
  // room for the operator (/admin, /metrics) and API keys during a flood.
  // Needs a Preflight (without one nobody authenticates and it is 0).
  int reserved_connections = 64;
  // Under pressure (open connections at 3/4 of max_connections or more):
  // how long a connection that never authenticated may wait idle.
  std::chrono::milliseconds pressure_idle_timeout{2000};
};

// Counters since start (and one gauge), for tests and /metrics.
struct HttpServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // closed at accept: every reason below together
  uint64_t connections_refused_per_address = 0;  // closed at accept: over max_connections_per_address
  uint64_t connections_refused_reserve = 0;      // 503: in a reserved slot without valid credentials
  uint64_t connections_closed_under_pressure = 0;  // idle, never authenticated, cut by pressure_idle_timeout
  uint64_t connections_open = 0;     // gauge
  uint64_t tls_handshake_failures = 0;
  uint64_t requests = 0;             // handed to the handler
  uint64_t rejected_requests = 0;    // answered by the server itself: 400, 408, 413, 431, 505
  uint64_t header_timeouts = 0;      // handshake or header too slow
  uint64_t request_timeouts = 0;     // 504: no response within request_timeout
  uint64_t write_timeouts = 0;
  uint64_t disconnects = 0;          // exchanges that disconnected before their response completed
  // Refused when the header was complete, before the body was read.
  uint64_t preflight_unauthenticated = 0;  // 401
  uint64_t preflight_no_route = 0;         // 404, 405
  uint64_t bodies_too_large = 0;           // 413 (a route's limit)
  uint64_t bodies_over_budget = 0;         // 503 (max_inflight_body_bytes)
  uint64_t inflight_body_bytes = 0;        // gauge: reserved now
};

class HttpServer {
 public:
  // Binds HOST:PORT, listens and starts the I/O threads. Errors: a host that
  // does not resolve, a port in use, TLS material OpenSSL refuses.
  // `preflight` (may be null: every request goes on with the server's body
  // limit, unauthenticated) decides about each request at header time.
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, Handler handler,
                                                    Preflight preflight = nullptr);
  // Stops at once (stop(now)) if still running.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  uint16_t port() const { return port_; }

  // Graceful stop: stops accepting, closes idle connections, lets requests
  // in flight finish (their responses end their connections) until
  // `deadline`, then closes what is left (those exchanges disconnect). Returns
  // when the I/O threads have exited; later Exchange calls are ignored.
  // Idempotent. Must not be called from an I/O thread (a handler).
  void stop(std::chrono::steady_clock::time_point deadline);

  HttpServerStats stats() const;

  struct State;  // the implementation (http_server.cc)

 private:
  HttpServer(std::unique_ptr<State> state, uint16_t port);
  std::unique_ptr<State> state_;
  uint16_t port_;
};

}  // namespace lg::proxy

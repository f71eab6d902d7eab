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
};

// Counters since start (and one gauge), for tests and /metrics.
struct HttpServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // closed at accept: over max_connections or stopping
  uint64_t connections_open = 0;     // gauge
  uint64_t tls_handshake_failures = 0;
  uint64_t requests = 0;             // handed to the handler
  uint64_t rejected_requests = 0;    // answered by the server itself: 400, 408, 413, 431, 505
  uint64_t header_timeouts = 0;      // handshake or header too slow
  uint64_t request_timeouts = 0;     // 504: no response within request_timeout
  uint64_t write_timeouts = 0;
  uint64_t disconnects = 0;          // exchanges that disconnected before their response completed
};

class HttpServer {
 public:
  // Binds HOST:PORT, listens and starts the I/O threads. Errors: a host that
  // does not resolve, a port in use, TLS material OpenSSL refuses.
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, Handler handler);
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

#include "proxy/http/http_server.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/check.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/http/server_internal.h"

namespace lg::proxy {

using namespace detail;  // NOLINT: the server's own internals (server_internal.h)

namespace {

// TLS 1.2 suites: ECDHE key exchange with AEAD ciphers only (Mozilla's
// "intermediate" list without finite-field DHE). TLS 1.3 keeps OpenSSL's
// defaults, which are all AEAD.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

int selectHttp11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                 void*) {
  // ALPN: only HTTP/1.1 is spoken; a client offering h2 as well gets
  // http/1.1, one offering nothing we speak gets no ALPN (and may give up).
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 8 && std::memcmp(in + i + 1, "http/1.1", 8) == 0) {
      *out = in + i + 1;
      *outlen = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

void HttpServer::State::doAccept() {
  acceptor.async_accept(net::make_strand(io), [this](const ErrorCode& ec, tcp::socket socket) {
    onAccept(ec, std::move(socket));
  });
}

void HttpServer::State::onAccept(const ErrorCode& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    // Out of descriptors or memory: wait a little instead of spinning, so the
    // connections that hold them can finish.
    proxyLog()->warn("accept failed: {}", ec.message());
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](const ErrorCode& wait_ec) {
      if (!wait_ec) doAccept();
    });
    return;
  }
  {
    ErrorCode ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // stream chunks leave at once
  }
  ErrorCode peer_ec;
  const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
  const std::string address = peer_ec ? std::string("?") : peer.address().to_string();
  std::shared_ptr<ConnectionBase> connection;
  bool per_address_cap = false;
  {
    std::lock_guard lock(mu);
    const int n = static_cast<int>(open.load());
    auto from = per_address.find(address);
    const int from_address = from == per_address.end() ? 0 : from->second;
    per_address_cap = options.max_connections_per_address > 0 && from_address >= options.max_connections_per_address;
    if (!stopping.load() && !per_address_cap && n < options.max_connections) {
      const uint64_t id = next_id++;
      open.fetch_add(1);
      ++per_address[address];
      // The last `reserve` slots: its first request must authenticate.
      connection = makeConnection(*this, std::move(socket), id, n >= options.max_connections - reserve);
      connections.emplace(id, Entry{connection, address});
    }
  }
  if (!connection) {
    // Over a cap: close at once. A TLS handshake to send a polite 503 would
    // spend the CPU the cap protects; plain HTTP gets one, best effort.
    counters.refused.fetch_add(1);
    if (per_address_cap) counters.refused_per_address.fetch_add(1);
    if (options.plain_http) {
      static const std::string kBody = apiErrorBody(overloadedError(1));
      const std::string busy =
          "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\n"
          "retry-after: 1\r\nx-request-id: " + newRequestId() + "\r\nconnection: close\r\ncontent-length: " +
          std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
      ErrorCode ignored;
      socket.non_blocking(true, ignored);
      socket.write_some(net::buffer(busy), ignored);  // never waits: the socket's buffer is empty
    }
    ErrorCode ignored;
    socket.close(ignored);
    return doAccept();
  }
  counters.accepted.fetch_add(1);
  net::post(connection->strand(), [connection] { connection->start(); });
  if (underPressure()) sweepUnderPressure();
  doAccept();
}

void HttpServer::State::sweepUnderPressure() {
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  if (now_ms - last_pressure_sweep.load() < 250) return;
  last_pressure_sweep.store(now_ms);
  std::vector<std::shared_ptr<ConnectionBase>> idle;
  {
    std::lock_guard lock(mu);
    for (auto& [id, entry] : connections) {
      auto c = entry.connection.lock();
      if (c && c->idle.load() && !c->authenticated.load()) idle.push_back(std::move(c));
    }
  }
  for (auto& c : idle) net::post(c->strand(), [c] { c->onPressure(); });
}

namespace {

Status configureTls(ssl::context& context, const HttpServerOptions& options) {
  SSL_CTX* ctx = context.native_handle();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1 || SSL_CTX_set1_groups_list(ctx, "X25519:P-256:P-384") != 1) {
    return internalError("TLS: OpenSSL refused the protocol settings");
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Idle keep-alive connections hold no TLS buffers.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(ctx, selectHttp11, nullptr);
  ErrorCode ec;
  context.use_certificate_chain(net::buffer(options.cert_chain_pem), ec);
  if (ec) return invalidArgument("TLS: the certificate chain was refused: " + ec.message());
  context.use_private_key(net::buffer(options.key_pem), ssl::context::pem, ec);
  if (ec) return invalidArgument("TLS: the private key was refused: " + ec.message());
  if (SSL_CTX_check_private_key(ctx) != 1) return invalidArgument("TLS: the private key does not match the certificate");
  return Status::ok();
}

Result<tcp::endpoint> resolve(net::io_context& io, const HttpServerOptions& options) {
  std::string host = options.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  ErrorCode ec;
  const auto address = net::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, options.port);
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, std::to_string(options.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return invalidArgument("server.listen: cannot resolve host '" + host + "': " + (ec ? ec.message() : "no address"));
  }
  return results.begin()->endpoint();
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, Handler handler,
                                                      Preflight preflight) {
  if (options.io_threads < 1) return invalidArgument("io_threads must be at least 1");
  if (options.max_connections < 1) return invalidArgument("max_connections must be at least 1");
  if (options.max_connections_per_address < 0) return invalidArgument("max_connections_per_address must be >= 0");
  if (options.reserved_connections < 0) return invalidArgument("reserved_connections must be >= 0");
  if (options.max_inflight_body_bytes < options.limits.max_body_bytes) {
    return invalidArgument("max_inflight_body_bytes must hold at least one body of max_body_bytes");
  }
  if (!handler) return invalidArgument("no handler");
  auto state = std::make_unique<State>(options, std::move(handler), std::move(preflight));
  if (!options.plain_http) {
    try {
      state->tls.emplace(ssl::context::tls_server);
    } catch (const std::exception& e) {
      return internalError(std::string("TLS: cannot create a context: ") + e.what());
    }
    LG_RETURN_IF_ERROR(configureTls(*state->tls, options));
  }
  LG_ASSIGN_OR_RETURN(tcp::endpoint endpoint, resolve(state->io, options));
  const std::string where = endpointText(endpoint);
  ErrorCode ec;
  state->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) state->acceptor.bind(endpoint, ec);
  if (!ec) state->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  const uint16_t port = state->acceptor.local_endpoint(ec).port();
  if (ec) return unavailable("cannot read the bound port of " + where + ": " + ec.message());

  state->work.emplace(state->io.get_executor());
  net::post(state->accept_strand, [s = state.get()] { s->doAccept(); });
  for (int i = 0; i < options.io_threads; ++i) {
    state->threads.emplace_back([s = state.get()] {
      // Handlers and callbacks run here; none may throw out of Asio.
      for (;;) {
        try {
          s->io.run();
          return;
        } catch (const std::exception& e) {
          proxyLog()->error("an I/O thread caught: {}", e.what());
        }
      }
    });
  }
  proxyLog()->info("listening on {}://{}:{} ({} I/O threads, at most {} connections, {} per address, {} reserved)",
                   options.plain_http ? "http" : "https", endpoint.address().to_string(), port, options.io_threads,
                   options.max_connections, options.max_connections_per_address, state->reserve);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(state), port));
}

HttpServer::HttpServer(std::unique_ptr<State> state, uint16_t port) : state_(std::move(state)), port_(port) {}

HttpServer::~HttpServer() { stop(Clock::now()); }

void HttpServer::stop(std::chrono::steady_clock::time_point deadline) {
  State& s = *state_;
  LG_CHECK(!s.io.get_executor().running_in_this_thread(), "HttpServer::stop() called from an I/O thread");
  std::call_once(s.stop_once, [&] {
    s.stopping.store(true);
    net::post(s.accept_strand, [&s] {
      ErrorCode ignored;
      s.acceptor.close(ignored);
      s.accept_retry.cancel();
    });
    auto each = [&s](auto action) {
      std::vector<std::shared_ptr<ConnectionBase>> live;
      {
        std::lock_guard lock(s.mu);
        for (auto& [id, entry] : s.connections) {
          if (auto c = entry.connection.lock()) live.push_back(std::move(c));
        }
      }
      for (auto& c : live) net::post(c->strand(), [c, action] { action(*c); });
    };
    each([](ConnectionBase& c) { c.drain(); });
    {
      std::unique_lock lock(s.mu);
      s.all_closed.wait_until(lock, deadline, [&s] { return s.connections.empty(); });
    }
    each([](ConnectionBase& c) { c.close(DisconnectCause::kShutdown); });
    {
      std::unique_lock lock(s.mu);
      s.all_closed.wait_for(lock, std::chrono::seconds(5), [&s] { return s.connections.empty(); });
    }
    {
      std::unique_lock lock(s.guard->mu);  // no Exchange posts from here on
      s.guard->open = false;
    }
    s.work.reset();
    s.io.stop();
    for (std::thread& t : s.threads) t.join();
    s.threads.clear();
    // A connection still open here had its I/O thread blocked by a handler
    // past the waits above; no thread runs the io_context now, so closing it
    // directly is safe.
    std::vector<std::shared_ptr<ConnectionBase>> left;
    {
      std::lock_guard lock(s.mu);
      for (auto& [id, entry] : s.connections) {
        if (auto c = entry.connection.lock()) left.push_back(std::move(c));
      }
    }
    for (auto& c : left) c->close(DisconnectCause::kShutdown);
    const HttpServerStats st = stats();
    proxyLog()->info("stopped: {} connections, {} requests, {} disconnects", st.connections_accepted, st.requests,
                     st.disconnects);
  });
}

HttpServerStats HttpServer::stats() const {
  const Counters& c = state_->counters;
  HttpServerStats s;
  s.connections_accepted = c.accepted.load();
  s.connections_refused = c.refused.load();
  s.connections_open = static_cast<uint64_t>(std::max<int64_t>(0, state_->open.load()));
  s.tls_handshake_failures = c.tls_failures.load();
  s.requests = c.requests.load();
  s.rejected_requests = c.rejected.load();
  s.header_timeouts = c.header_timeouts.load();
  s.request_timeouts = c.request_timeouts.load();
  s.write_timeouts = c.write_timeouts.load();
  s.disconnects = c.disconnects.load();
  s.connections_refused_per_address = c.refused_per_address.load();
  s.connections_refused_reserve = c.refused_reserve.load();
  s.connections_closed_under_pressure = c.closed_under_pressure.load();
  s.preflight_unauthenticated = c.preflight_unauthenticated.load();
  s.preflight_no_route = c.preflight_no_route.load();
  s.bodies_too_large = c.bodies_too_large.load();
  s.bodies_over_budget = c.bodies_over_budget.load();
  s.inflight_body_bytes = state_->inflight_body.load();
  return s;
}

}  // namespace lg::proxy


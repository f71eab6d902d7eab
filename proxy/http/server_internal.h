// Internals of the HTTP server shared by http_server.cc (listener, start,
// stop) and connection.cc (one connection and its exchanges). Not part of the
// module's interface: it includes Asio, which no other header does.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "common/check.h"
#include "proxy/http/http_server.h"

namespace lg::proxy {
namespace detail {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;
using Strand = net::strand<net::io_context::executor_type>;

struct Counters {
  std::atomic<uint64_t> accepted{0}, refused{0}, tls_failures{0}, requests{0}, rejected{0}, header_timeouts{0},
      request_timeouts{0}, write_timeouts{0}, disconnects{0};
  std::atomic<uint64_t> refused_per_address{0}, refused_reserve{0}, closed_under_pressure{0}, preflight_unauthenticated{0},
      preflight_no_route{0}, bodies_too_large{0}, bodies_over_budget{0};
};

// Lets Exchanges post to their connection only while the io_context exists:
// producers (the engine thread) may hold an Exchange past the server's life.
struct PostGuard {
  std::shared_mutex mu;
  bool open = true;
};

class ExchangeImpl;

// What an Exchange and the server need of a connection, whatever its stream.
class ConnectionBase : public std::enable_shared_from_this<ConnectionBase> {
 public:
  explicit ConnectionBase(Strand strand) : strand_(std::move(strand)) {}
  virtual ~ConnectionBase() = default;
  // Immutable: safe to read from any thread.
  const Strand& strand() const { return strand_; }

  // Read from the accept strand (choosing whom to shed), written on the
  // connection's: waiting for a request (or a handshake) now; a request of
  // this connection carried credentials its route accepted.
  std::atomic<bool> idle{false};
  std::atomic<bool> authenticated{false};

  // All on the strand.
  virtual void start() = 0;
  // The server is under pressure: an idle connection that never
  // authenticated shortens its wait to pressure_idle_timeout (since it
  // began waiting).
  virtual void onPressure() = 0;
  virtual void drain() = 0;
  virtual void close(DisconnectCause cause) = 0;
  virtual void onRespond(ExchangeImpl& exchange, int status, HttpHeaders headers, std::string body) = 0;
  virtual void onStartStream(ExchangeImpl& exchange, int status, HttpHeaders headers) = 0;
  virtual void onSend(ExchangeImpl& exchange, std::string data) = 0;
  virtual void onEnd(ExchangeImpl& exchange) = 0;

 protected:
  Strand strand_;
};

// A connection for a socket accepted onto its own strand (TLS unless
// options.plain_http); start() is to be posted to its strand.
// `in_reserve`: accepted into a reserved slot (its first request must
// authenticate).
std::shared_ptr<ConnectionBase> makeConnection(HttpServer::State& server, tcp::socket socket, uint64_t id,
                                               bool in_reserve);

// "req_" and 24 hex digits.
std::string newRequestId();
// "IP:port", "[v6]:port".
std::string endpointText(const tcp::endpoint& e);

}  // namespace detail

struct HttpServer::State {
  State(const HttpServerOptions& o, Handler h, Preflight p)
      : options(o),
        handler(std::move(h)),
        preflight(std::move(p)),
        // Without a preflight nobody can authenticate: no reserve.
        reserve(preflight ? std::clamp(o.reserved_connections, 0, o.max_connections / 4) : 0),
        high_water(std::max(1, o.max_connections - o.max_connections / 4)) {}

  // Declared before the io_context, so destroyed after it: connections that
  // die with the io_context's pending handlers still count themselves out.
  const HttpServerOptions options;
  const Handler handler;
  const Preflight preflight;  // may be null
  const int reserve;          // reserved slots in effect
  const int high_water;       // open connections from which the server is under pressure
  detail::Counters counters;
  std::atomic<uint64_t> inflight_body{0};  // body bytes reserved (reserveBody)
  std::atomic<int64_t> last_pressure_sweep{0};  // steady-clock ms of the last sweep (accept strand)
  std::shared_ptr<detail::PostGuard> guard = std::make_shared<detail::PostGuard>();
  std::mutex mu;  // guards connections, per_address, next_id
  std::condition_variable all_closed;
  struct Entry {
    std::weak_ptr<detail::ConnectionBase> connection;
    std::string address;  // the client's IP, the key of per_address
  };
  std::unordered_map<uint64_t, Entry> connections;
  std::unordered_map<std::string, int> per_address;  // open connections by client IP
  uint64_t next_id = 0;
  std::atomic<int64_t> open{0};
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;
  std::optional<detail::ssl::context> tls;

  detail::net::io_context io;
  std::optional<detail::net::executor_work_guard<detail::net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  // Declared after the io_context: I/O objects go before it.
  detail::Strand accept_strand{detail::net::make_strand(io)};
  detail::tcp::acceptor acceptor{accept_strand};
  detail::net::steady_timer accept_retry{accept_strand};

  void connectionClosed(uint64_t id) {
    std::lock_guard lock(mu);
    auto it = connections.find(id);
    if (it == connections.end()) return;  // counted out already
    auto a = per_address.find(it->second.address);
    if (a != per_address.end() && --a->second <= 0) per_address.erase(a);
    connections.erase(it);
    open.fetch_sub(1);
    if (connections.empty()) all_closed.notify_all();
  }
  bool underPressure() const { return open.load() >= high_water; }
  // The in-flight body budget: reserves `n` bytes, or refuses when they
  // would pass max_inflight_body_bytes.
  bool reserveBody(uint64_t n) {
    uint64_t now = inflight_body.load();
    do {
      if (n > options.max_inflight_body_bytes || now > options.max_inflight_body_bytes - n) return false;
    } while (!inflight_body.compare_exchange_weak(now, now + n));
    return true;
  }
  void releaseBody(uint64_t n) {
    const uint64_t before = inflight_body.fetch_sub(n);
    LG_CHECK(before >= n, "released ", n, " body bytes of ", before, " reserved");
  }
  // Tells every connection that the server is under pressure (onPressure),
  // at most every 250 ms. On the accept strand.
  void sweepUnderPressure();
  void doAccept();
  void onAccept(const detail::ErrorCode& ec, detail::tcp::socket socket);
};

}  // namespace lg::proxy

// Internals of the HTTP server shared by http_server.cc (listener, start,
// stop) and connection.cc (one connection and its exchanges). Not part of the
// module's interface: it includes Asio, which no other header does.
#pragma once

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

  // All on the strand.
  virtual void start() = 0;
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
std::shared_ptr<ConnectionBase> makeConnection(HttpServer::State& server, tcp::socket socket, uint64_t id);

// "req_" and 24 hex digits.
std::string newRequestId();
// "IP:port", "[v6]:port".
std::string endpointText(const tcp::endpoint& e);

}  // namespace detail

struct HttpServer::State {
  State(const HttpServerOptions& o, Handler h) : options(o), handler(std::move(h)) {}

  // Declared before the io_context, so destroyed after it: connections that
  // die with the io_context's pending handlers still count themselves out.
  const HttpServerOptions options;
  const Handler handler;
  detail::Counters counters;
  std::shared_ptr<detail::PostGuard> guard = std::make_shared<detail::PostGuard>();
  std::mutex mu;  // guards connections, next_id
  std::condition_variable all_closed;
  std::unordered_map<uint64_t, std::weak_ptr<detail::ConnectionBase>> connections;
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
    connections.erase(id);
    open.fetch_sub(1);
    if (connections.empty()) all_closed.notify_all();
  }
  void doAccept();
  void onAccept(const detail::ErrorCode& ec, detail::tcp::socket socket);
};

}  // namespace lg::proxy

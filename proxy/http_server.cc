#include "proxy/http_server.h"

#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>

#include "common/check.h"
#include "proxy/openai_error.h"
#include "proxy/proxy_log.h"

namespace lg::proxy {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;
using Strand = net::strand<net::io_context::executor_type>;

constexpr size_t kReadChunk = 16 * 1024;

// TLS 1.2 suites: ECDHE key exchange with AEAD ciphers only (Mozilla's
// "intermediate" list without finite-field DHE). TLS 1.3 keeps OpenSSL's
// defaults, which are all AEAD.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::string newRequestId() {
  unsigned char bytes[12];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // Ids only need to be unique, not secret: fall back to a counter mixed
    // with the clock rather than failing the request.
    static std::atomic<uint64_t> counter{0};
    const uint64_t a = counter.fetch_add(1) ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    std::memcpy(bytes, &a, 8);
    std::memset(bytes + 8, 0, 4);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "req_";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

std::string httpDate() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

bool isTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A header a handler may set: a token name, a value without control bytes
// (CR or LF would let a value that echoes client input split the response).
bool validHeader(const std::string& name, const std::string& value) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), isTokenChar)) return false;
  return std::none_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

// Headers the server owns: a handler's copies are dropped.
bool serverManaged(std::string_view name) {
  for (std::string_view m : {"content-length", "transfer-encoding", "connection", "keep-alive", "x-request-id", "date"}) {
    if (equalsIgnoreCase(name, m)) return true;
  }
  return false;
}

bool hasNoBody(int status) { return status < 200 || status == 204 || status == 304; }

std::string endpointText(const tcp::endpoint& e) {
  const auto a = e.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(e.port());
}

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
  virtual void close() = 0;
  virtual void onRespond(ExchangeImpl& exchange, int status, HttpHeaders headers, std::string body) = 0;
  virtual void onStartStream(ExchangeImpl& exchange, int status, HttpHeaders headers) = 0;
  virtual void onSend(ExchangeImpl& exchange, std::string data) = 0;
  virtual void onEnd(ExchangeImpl& exchange) = 0;

 protected:
  Strand strand_;
};

class ExchangeImpl final : public Exchange, public std::enable_shared_from_this<ExchangeImpl> {
 public:
  ExchangeImpl(std::weak_ptr<ConnectionBase> connection, std::shared_ptr<PostGuard> guard, HttpRequest request)
      : connection_(std::move(connection)), guard_(std::move(guard)), request_(std::move(request)) {}

  const HttpRequest& request() const override { return request_; }

  void respond(int status, HttpHeaders headers, std::string body) override {
    post([self = shared_from_this(), status, headers = std::move(headers), body = std::move(body)](
             ConnectionBase& c) mutable { c.onRespond(*self, status, std::move(headers), std::move(body)); });
  }
  void startStream(int status, HttpHeaders headers) override {
    post([self = shared_from_this(), status, headers = std::move(headers)](ConnectionBase& c) mutable {
      c.onStartStream(*self, status, std::move(headers));
    });
  }
  void send(std::string data) override {
    if (data.empty()) return;
    post([self = shared_from_this(), data = std::move(data)](ConnectionBase& c) mutable {
      c.onSend(*self, std::move(data));
    });
  }
  void end() override {
    post([self = shared_from_this()](ConnectionBase& c) { c.onEnd(*self); });
  }

  void onDisconnect(std::function<void()> callback) override {
    std::unique_lock lock(mu_);
    if (!disconnected_.load()) {
      callback_ = std::move(callback);
      return;
    }
    if (fired_) return;
    fired_ = true;
    lock.unlock();
    if (callback) callback();
  }
  bool disconnected() const override { return disconnected_.load(); }

  // On the strand: the connection went away before the response completed.
  void markDisconnected() {
    std::function<void()> callback;
    {
      std::lock_guard lock(mu_);
      if (disconnected_.exchange(true)) return;
      if (callback_) {
        fired_ = true;
        callback = std::move(callback_);
      }
    }
    if (callback) callback();
  }

 private:
  // On the connection's own strand (the handler, an onDisconnect callback)
  // the call takes effect at once, so it is ordered before anything another
  // thread posts meanwhile; from any other thread it is posted.
  template <typename F>
  void post(F&& f) {
    std::shared_lock lock(guard_->mu);
    if (!guard_->open) return;
    std::shared_ptr<ConnectionBase> c = connection_.lock();
    if (!c) return;  // closed: the exchange completed or disconnected
    if (c->strand().running_in_this_thread()) {
      // The io_context runs this very thread, so it cannot go away; unlock
      // first, as what runs inline may call back into an Exchange.
      lock.unlock();
      f(*c);
      return;
    }
    const Strand strand = c->strand();
    net::post(strand, [c = std::move(c), f = std::forward<F>(f)]() mutable { f(*c); });
  }

  const std::weak_ptr<ConnectionBase> connection_;
  const std::shared_ptr<PostGuard> guard_;
  const HttpRequest request_;
  std::atomic<bool> disconnected_{false};
  std::mutex mu_;  // guards callback_ and fired_
  std::function<void()> callback_;
  bool fired_ = false;
};

}  // namespace

struct HttpServer::State {
  State(const HttpServerOptions& o, Handler h) : options(o), handler(std::move(h)) {}

  // Declared before the io_context, so destroyed after it: connections that
  // die with the io_context's pending handlers still count themselves out.
  const HttpServerOptions options;
  const Handler handler;
  Counters counters;
  std::shared_ptr<PostGuard> guard = std::make_shared<PostGuard>();
  std::mutex mu;  // guards connections, next_id
  std::condition_variable all_closed;
  std::unordered_map<uint64_t, std::weak_ptr<ConnectionBase>> connections;
  uint64_t next_id = 0;
  std::atomic<int64_t> open{0};
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;
  std::optional<ssl::context> tls;

  net::io_context io;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  // Declared after the io_context: I/O objects go before it.
  Strand accept_strand{net::make_strand(io)};
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_retry{accept_strand};

  void connectionClosed(uint64_t id) {
    std::lock_guard lock(mu);
    connections.erase(id);
    open.fetch_sub(1);
    if (connections.empty()) all_closed.notify_all();
  }
  void doAccept();
  void onAccept(const ErrorCode& ec, tcp::socket socket);
};

namespace {

template <bool kTls>
class Connection final : public ConnectionBase {
  using Stream = std::conditional_t<kTls, ssl::stream<tcp::socket>, tcp::socket>;

  enum class Phase { kHandshake, kRequest, kHandling, kResponding, kStreaming, kLingering, kClosed };
  enum class Deadline { kNone, kHandshake, kFirstByte, kHeader, kBody, kHandling, kWrite, kLinger };

 public:
  Connection(HttpServer::State& server, tcp::socket socket, uint64_t id)
      : ConnectionBase(strandOf(socket)),
        server_(server),
        stream_(makeStream(server, std::move(socket))),
        timer_(strand_),
        id_(id),
        parser_(std::make_unique<RequestParser>(server.options.limits)) {
    ErrorCode ec;
    const tcp::endpoint peer = lowest().remote_endpoint(ec);
    remote_ = ec ? std::string("?") : endpointText(peer);
  }

  ~Connection() override {
    if (phase_ != Phase::kClosed) server_.connectionClosed(id_);
  }

  void start() override {
    accepted_at_ = Clock::now();
    setDeadline(Deadline::kHandshake, accepted_at_ + server_.options.header_timeout);
    if constexpr (kTls) {
      phase_ = Phase::kHandshake;
      stream_.async_handshake(ssl::stream_base::server,
                              [self = self()](const ErrorCode& ec) { self->onHandshake(ec); });
    } else {
      startReading();
    }
  }

  // Stopping: idle and lingering connections close now; one with a request
  // in progress closes after its response.
  void drain() override {
    draining_ = true;
    if (phase_ == Phase::kHandshake || phase_ == Phase::kLingering ||
        (phase_ == Phase::kRequest && !request_started_)) {
      close();
    }
  }

  void close() override {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    timer_.cancel();
    ErrorCode ignored;
    lowest().close(ignored);  // pending reads and writes complete with errors
    out_.clear();
    if (exchange_) {
      server_.counters.disconnects.fetch_add(1);
      proxyLog()->debug("{} disconnected before its response completed", exchange_->request().id);
      std::shared_ptr<ExchangeImpl> exchange = std::move(exchange_);
      exchange->markDisconnected();  // the handler's callback runs here, on the strand
    }
    server_.connectionClosed(id_);
    pin_.reset();  // every caller runs in a handler that holds its own reference
  }

  void onRespond(ExchangeImpl& exchange, int status, HttpHeaders headers, std::string body) override {
    if (exchange_.get() != &exchange) return;  // completed or disconnected: ignored
    if (phase_ != Phase::kHandling) return misuse("respond() after the response started");
    phase_ = Phase::kResponding;
    setDeadline(Deadline::kWrite, Clock::now() + server_.options.write_timeout);
    close_after_ = !keep_alive_ || draining_;
    writeHead(status, headers, hasNoBody(status) ? std::optional<size_t>() : body.size());
    if (!head_request_ && !hasNoBody(status) && !body.empty()) queue(std::move(body));
    flush();
  }

  void onStartStream(ExchangeImpl& exchange, int status, HttpHeaders headers) override {
    if (exchange_.get() != &exchange) return;
    if (phase_ != Phase::kHandling) return misuse("startStream() after the response started");
    phase_ = Phase::kStreaming;
    // HTTP/1.0 has no chunked encoding: the body ends when the connection does.
    chunked_ = version_ >= 11;
    close_after_ = !keep_alive_ || draining_ || !chunked_;
    // A stream has no total time; each write has its own.
    setDeadline(Deadline::kWrite, Clock::now() + server_.options.write_timeout);
    writeHead(status, headers, std::nullopt);
    flush();
  }

  void onSend(ExchangeImpl& exchange, std::string data) override {
    if (exchange_.get() != &exchange) return;
    if (phase_ != Phase::kStreaming || stream_ended_) return misuse("send() outside a stream");
    if (head_request_) return;
    if (chunked_) {
      char size[24];
      const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      queue(std::string(size, static_cast<size_t>(n)));
      queue(std::move(data));
      queue("\r\n");
    } else {
      queue(std::move(data));
    }
    if (queued_bytes_ > server_.options.max_stream_buffer_bytes) {
      proxyLog()->warn("{}: the client reads the stream too slowly ({} bytes queued); closing", exchange_->request().id,
                       queued_bytes_);
      return close();
    }
    flush();
  }

  void onEnd(ExchangeImpl& exchange) override {
    if (exchange_.get() != &exchange) return;
    if (phase_ != Phase::kStreaming || stream_ended_) return misuse("end() outside a stream");
    stream_ended_ = true;
    if (chunked_ && !head_request_) queue("0\r\n\r\n");
    if (!writing_ && out_.empty()) return finishResponse();
    flush();
  }

 private:
  // The strand the socket was accepted on: every handler of this connection
  // runs on it.
  static Strand strandOf(tcp::socket& socket) {
    const Strand* strand = socket.get_executor().template target<Strand>();
    LG_CHECK(strand != nullptr, "a connection's socket was not accepted on a strand");
    return *strand;
  }

  static Stream makeStream(HttpServer::State& server, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *server.tls);
    } else {
      (void)server;
      return socket;
    }
  }

  std::shared_ptr<Connection> self() { return std::static_pointer_cast<Connection>(shared_from_this()); }

  tcp::socket& lowest() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // --- deadlines: one timer, re-armed per phase ---------------------------------

  void setDeadline(Deadline kind, Clock::time_point at) {
    deadline_ = kind;
    ++deadline_generation_;
    if (kind == Deadline::kNone) {
      timer_.cancel();
      return;
    }
    timer_.expires_at(at);
    timer_.async_wait([self = self(), generation = deadline_generation_](const ErrorCode& ec) {
      if (ec != net::error::operation_aborted) self->onDeadline(generation);
    });
  }

  void onDeadline(uint64_t generation) {
    if (generation != deadline_generation_ || phase_ == Phase::kClosed) return;
    switch (deadline_) {
      case Deadline::kNone:
        return;
      case Deadline::kHandshake:
      case Deadline::kFirstByte:
        if (phase_ != Phase::kHandshake && phase_ != Phase::kRequest) return;
        // Nothing of a request arrived: nobody to answer. On a fresh
        // connection this is a client too slow to start; on a kept-alive one,
        // plain idleness.
        if (deadline_ == Deadline::kHandshake || first_request_) server_.counters.header_timeouts.fetch_add(1);
        return close();
      case Deadline::kHeader:
      case Deadline::kBody:
        if (phase_ != Phase::kRequest) return;
        server_.counters.header_timeouts.fetch_add(1);
        proxyLog()->debug("connection {} from {}: request not received in time; 408", id_, remote_);
        return rejectRequest(requestTimeoutError());
      case Deadline::kHandling: {
        if (phase_ != Phase::kHandling) return;
        server_.counters.request_timeouts.fetch_add(1);
        proxyLog()->warn("{}: no response within {} ms; 504", exchange_->request().id,
                         server_.options.request_timeout.count());
        // The exchange is over for its producer: tell it to stop.
        server_.counters.disconnects.fetch_add(1);
        std::shared_ptr<ExchangeImpl> exchange = std::move(exchange_);
        exchange->markDisconnected();
        if (phase_ == Phase::kClosed) return;
        phase_ = Phase::kResponding;
        setDeadline(Deadline::kWrite, Clock::now() + server_.options.write_timeout);
        close_after_ = true;
        const OpenAiError e = responseTimeoutError();
        const std::string body = openAiErrorBody(e);
        writeHead(e.status, openAiErrorHeaders(e), body.size());
        if (!head_request_) queue(body);
        return flush();
      }
      case Deadline::kWrite:
        server_.counters.write_timeouts.fetch_add(1);
        proxyLog()->debug("connection {} from {}: a write made no progress in {} ms; closing", id_, remote_,
                          server_.options.write_timeout.count());
        return close();
      case Deadline::kLinger:
        return close();
    }
  }

  // --- reading ------------------------------------------------------------------

  void onHandshake(const ErrorCode& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      server_.counters.tls_failures.fetch_add(1);
      proxyLog()->debug("connection {} from {}: TLS handshake failed: {}", id_, remote_, ec.message());
      return close();
    }
    startReading();
  }

  void startReading() {
    phase_ = Phase::kRequest;
    // The first request's header is due header_timeout after accept, the
    // handshake included.
    setDeadline(Deadline::kFirstByte, accepted_at_ + server_.options.header_timeout);
    maybeRead();
  }

  // How many unparsed bytes the connection holds before it stops reading.
  size_t bufferCap() const {
    switch (phase_) {
      case Phase::kRequest:
        // The parser fails a header beyond the limit, and consumes bodies as
        // they come, so this bounds only a header being assembled.
        return server_.options.limits.max_header_bytes + kReadChunk;
      case Phase::kLingering:
        return kReadChunk;  // dropped as read
      default:
        // Handling a request: keep reading to notice a disconnect, buffering
        // at most one pipelined header meanwhile.
        return server_.options.limits.max_header_bytes;
    }
  }

  void maybeRead() {
    if (reading_ || phase_ == Phase::kClosed || phase_ == Phase::kHandshake) return;
    const size_t cap = bufferCap();
    if (buffer_.size() >= cap) return;  // resumes once the buffer is consumed
    reading_ = true;
    stream_.async_read_some(buffer_.prepare(std::min(kReadChunk, cap - buffer_.size())),
                            [self = self()](const ErrorCode& ec, size_t n) { self->onRead(ec, n); });
  }

  void onRead(const ErrorCode& ec, size_t n) {
    reading_ = false;
    if (phase_ == Phase::kClosed) return;
    if (ec) return onReadError(ec);
    buffer_.commit(n);
    if (phase_ == Phase::kLingering) {
      buffer_.consume(buffer_.size());
    } else if (phase_ == Phase::kRequest) {
      parseRequest();
      if (phase_ == Phase::kClosed) return;
    }
    maybeRead();
  }

  void onReadError(const ErrorCode& ec) {
    if (phase_ == Phase::kRequest && request_started_) {
      proxyLog()->debug("connection {} from {}: closed inside a request ({})", id_, remote_, ec.message());
    } else if (exchange_) {
      proxyLog()->debug("{}: the client went away ({})", exchange_->request().id, ec.message());
    }
    // Whatever the phase, the peer is gone or broken: an exchange in flight
    // disconnects (close() tells it).
    close();
  }

  void parseRequest() {
    if (buffer_.size() == 0) return;
    if (!request_started_) {
      request_started_ = true;
      const Clock::time_point due =
          first_request_ ? accepted_at_ + server_.options.header_timeout : Clock::now() + server_.options.header_timeout;
      setDeadline(Deadline::kHeader, due);
    }
    const auto data = buffer_.data();
    const size_t used = parser_->feed(std::string_view(static_cast<const char*>(data.data()), data.size()));
    buffer_.consume(used);
    switch (parser_->state()) {
      case RequestParser::State::kHeader:
        return;
      case RequestParser::State::kBody:
        if (deadline_ == Deadline::kHeader) {
          setDeadline(Deadline::kBody, Clock::now() + server_.options.body_timeout);
        }
        if (!continue_sent_ && parser_->expectsContinue()) {
          continue_sent_ = true;
          queue("HTTP/1.1 100 Continue\r\n\r\n");
          flush();
        }
        return;
      case RequestParser::State::kComplete:
        return dispatch();
      case RequestParser::State::kFailed: {
        const ParseFailure& f = parser_->failure();
        proxyLog()->debug("connection {} from {}: bad request ({}): {}", id_, remote_, f.status, f.reason);
        switch (f.status) {
          case 413: return rejectRequest(bodyTooLargeError(static_cast<int64_t>(server_.options.limits.max_body_bytes)));
          case 431: return rejectRequest(headersTooLargeError(static_cast<int64_t>(server_.options.limits.max_header_bytes)));
          case 505: {
            OpenAiError e = badRequestError("Only HTTP/1.0 and HTTP/1.1 are supported");
            e.status = 505;
            e.code = "http_version_not_supported";
            return rejectRequest(e);
          }
          default: return rejectRequest(badRequestError("The request is not valid HTTP/1.1 (" + f.reason + ")"));
        }
      }
    }
  }

  // The server's own answer to a request it will not hand over (bad, too
  // large, too slow); the connection ends after it.
  void rejectRequest(const OpenAiError& error) {
    server_.counters.rejected.fetch_add(1);
    phase_ = Phase::kResponding;
    // A connection being ended gets little time: these clients are the
    // suspicious ones (slow, malformed, oversized).
    setDeadline(Deadline::kWrite, Clock::now() + std::min(server_.options.write_timeout, server_.options.linger_timeout));
    close_after_ = true;
    request_id_ = newRequestId();
    const std::string body = openAiErrorBody(error);
    writeHead(error.status, openAiErrorHeaders(error), body.size());
    queue(body);
    flush();
  }

  void dispatch() {
    keep_alive_ = parser_->keepAlive();
    version_ = parser_->version();
    HttpRequest request = parser_->take();
    request.remote = remote_;
    request.id = newRequestId();
    request.received = Clock::now();
    head_request_ = request.method == "HEAD";
    request_id_ = request.id;
    phase_ = Phase::kHandling;
    first_request_ = false;
    exchange_ = std::make_shared<ExchangeImpl>(weak_from_this(), server_.guard, std::move(request));
    pin_ = shared_from_this();  // the exchange's producer may be the only one left to drive it
    setDeadline(Deadline::kHandling, Clock::now() + server_.options.request_timeout);
    server_.counters.requests.fetch_add(1);
    std::shared_ptr<ExchangeImpl> exchange = exchange_;
    try {
      server_.handler(exchange->request(), exchange);
    } catch (const std::exception& e) {
      proxyLog()->error("{}: the handler threw: {}", exchange->request().id, e.what());
      respondWithError(*exchange, internalServerError());
    } catch (...) {
      proxyLog()->error("{}: the handler threw", exchange->request().id);
      respondWithError(*exchange, internalServerError());
    }
  }

  // --- writing ------------------------------------------------------------------

  void queue(std::string data) {
    queued_bytes_ += data.size();
    out_.push_back(std::move(data));
  }

  // The status line and header; `content_length` absent for a stream (or a
  // status without a body).
  void writeHead(int status, const HttpHeaders& headers, std::optional<size_t> content_length) {
    response_status_ = status;
    std::string head = "HTTP/1.1 " + std::to_string(status) + " ";
    const auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    head.append(reason.data(), reason.size());
    head += "\r\n";
    for (const auto& [name, value] : headers.fields()) {
      if (serverManaged(name)) continue;
      if (!validHeader(name, value)) {
        proxyLog()->error("{}: dropped an invalid response header field '{}'", request_id_,
                          name.substr(0, std::min<size_t>(name.size(), 64)));
        continue;
      }
      head += name + ": " + value + "\r\n";
    }
    head += "x-request-id: " + request_id_ + "\r\n";
    head += "date: " + httpDate() + "\r\n";
    if (content_length) {
      head += "content-length: " + std::to_string(*content_length) + "\r\n";
    } else if (phase_ == Phase::kStreaming && chunked_ && !hasNoBody(status)) {
      head += "transfer-encoding: chunked\r\n";
    }
    if (close_after_) {
      head += "connection: close\r\n";
    } else if (version_ == 10) {
      head += "connection: keep-alive\r\n";
    }
    head += "\r\n";
    queue(std::move(head));
  }

  void flush() {
    if (writing_ || out_.empty() || phase_ == Phase::kClosed) return;
    writing_ = true;
    in_flight_ = std::move(out_);
    out_.clear();
    buffers_.clear();
    for (const std::string& s : in_flight_) buffers_.emplace_back(s.data(), s.size());
    if (phase_ == Phase::kResponding || phase_ == Phase::kStreaming) {
      setDeadline(Deadline::kWrite, Clock::now() + server_.options.write_timeout);
    }
    net::async_write(stream_, buffers_, [self = self()](const ErrorCode& ec, size_t) { self->onWrite(ec); });
  }

  void onWrite(const ErrorCode& ec) {
    writing_ = false;
    for (const std::string& s : in_flight_) queued_bytes_ -= s.size();
    in_flight_.clear();
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      if (exchange_) proxyLog()->debug("{}: write failed: {}", exchange_->request().id, ec.message());
      return close();
    }
    if (!out_.empty()) return flush();
    if (phase_ == Phase::kResponding || (phase_ == Phase::kStreaming && stream_ended_)) return finishResponse();
    if (phase_ == Phase::kStreaming) setDeadline(Deadline::kNone, {});
  }

  void finishResponse() {
    if (exchange_) {
      const HttpRequest& r = exchange_->request();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - r.received).count();
      // Path only: a query string may carry what a client did not mean to log.
      proxyLog()->info("{} {} {} {} {} ms", r.id, r.method, r.path.substr(0, std::min<size_t>(r.path.size(), 200)),
                       response_status_, ms);
    }
    exchange_.reset();
    if (close_after_ || draining_) return beginLinger();
    // Next request on this connection.
    phase_ = Phase::kRequest;
    parser_ = std::make_unique<RequestParser>(server_.options.limits);
    request_started_ = false;
    continue_sent_ = false;
    stream_ended_ = false;
    chunked_ = false;
    head_request_ = false;
    setDeadline(Deadline::kFirstByte, Clock::now() + server_.options.idle_timeout);
    std::shared_ptr<ConnectionBase> keep = std::move(pin_);  // alive until this call returns
    parseRequest();  // a pipelined request may be buffered already
    if (phase_ != Phase::kClosed) maybeRead();
  }

  // Ends the connection after a response that said "connection: close":
  // half-close, then read and drop what the client still sends until it
  // closes or linger_timeout passes. Closing at once with unread bytes would
  // make the kernel reset the connection, and a client still uploading a
  // refused body could lose the response. (No TLS close_notify: the response
  // is delimited by its length, and the shutdown exchange would need the read
  // side this drains.)
  void beginLinger() {
    phase_ = Phase::kLingering;
    std::shared_ptr<ConnectionBase> keep = std::move(pin_);
    ErrorCode ignored;
    lowest().shutdown(tcp::socket::shutdown_send, ignored);
    buffer_.consume(buffer_.size());
    if (draining_) return close();  // stopping: the FIN follows the response; nothing more to wait for
    setDeadline(Deadline::kLinger, Clock::now() + server_.options.linger_timeout);
    maybeRead();
  }

  // A handler called the Exchange out of order: a bug. Closing is the one
  // answer that cannot send a malformed response.
  void misuse(const char* what) {
    proxyLog()->error("{}: {}; closing the connection", request_id_, what);
    close();
  }

  HttpServer::State& server_;
  Stream stream_;
  net::steady_timer timer_;
  const uint64_t id_;
  std::string remote_;

  Phase phase_ = Phase::kRequest;
  Deadline deadline_ = Deadline::kNone;
  uint64_t deadline_generation_ = 0;
  Clock::time_point accepted_at_;

  boost::beast::flat_buffer buffer_;
  bool reading_ = false;
  std::unique_ptr<RequestParser> parser_;
  bool request_started_ = false;  // a byte of the current request arrived
  bool first_request_ = true;
  bool continue_sent_ = false;

  std::shared_ptr<ExchangeImpl> exchange_;  // the request being handled
  std::shared_ptr<ConnectionBase> pin_;     // self, while a handler holds the exchange
  std::string request_id_;
  bool keep_alive_ = false;
  int version_ = 11;
  bool head_request_ = false;
  int response_status_ = 0;
  bool close_after_ = false;
  bool chunked_ = false;
  bool stream_ended_ = false;
  bool draining_ = false;

  std::vector<std::string> out_;        // queued, not yet written
  std::vector<std::string> in_flight_;  // being written (buffers_ point into it)
  std::vector<net::const_buffer> buffers_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
};

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
  if (stopping.load() || open.load() >= options.max_connections) {
    // Over the cap: close at once. A TLS handshake to send a polite 503 would
    // spend the CPU the cap protects; plain HTTP gets one, best effort.
    counters.refused.fetch_add(1);
    if (options.plain_http) {
      static const std::string kBody = openAiErrorBody(overloadedError(1));
      const std::string busy =
          "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
          "x-request-id: " + newRequestId() + "\r\nconnection: close\r\ncontent-length: " +
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
  ErrorCode ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // stream chunks leave at once
  std::shared_ptr<ConnectionBase> connection;
  uint64_t id = 0;
  {
    std::lock_guard lock(mu);
    id = next_id++;
    open.fetch_add(1);
    if (options.plain_http) {
      connection = std::make_shared<Connection<false>>(*this, std::move(socket), id);
    } else {
      connection = std::make_shared<Connection<true>>(*this, std::move(socket), id);
    }
    connections.emplace(id, connection);
  }
  net::post(connection->strand(), [connection] { connection->start(); });
  doAccept();
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

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, Handler handler) {
  if (options.io_threads < 1) return invalidArgument("io_threads must be at least 1");
  if (options.max_connections < 1) return invalidArgument("max_connections must be at least 1");
  if (!handler) return invalidArgument("no handler");
  auto state = std::make_unique<State>(options, std::move(handler));
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
  proxyLog()->info("listening on {}://{}:{} ({} I/O threads, at most {} connections)",
                   options.plain_http ? "http" : "https", endpoint.address().to_string(), port, options.io_threads,
                   options.max_connections);
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
        for (auto& [id, weak] : s.connections) {
          if (auto c = weak.lock()) live.push_back(std::move(c));
        }
      }
      for (auto& c : live) net::post(c->strand(), [c, action] { action(*c); });
    };
    each([](ConnectionBase& c) { c.drain(); });
    {
      std::unique_lock lock(s.mu);
      s.all_closed.wait_until(lock, deadline, [&s] { return s.connections.empty(); });
    }
    each([](ConnectionBase& c) { c.close(); });
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
      for (auto& [id, weak] : s.connections) {
        if (auto c = weak.lock()) left.push_back(std::move(c));
      }
    }
    for (auto& c : left) c->close();
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
  return s;
}

}  // namespace lg::proxy

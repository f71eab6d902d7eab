// One connection: TLS handshake, reading and parsing requests, handing them
// to the handler as Exchanges, writing responses and streams, deadlines,
// disconnects and the lingering close. Everything here runs on the
// connection's strand, except the Exchange calls made from other threads,
// which post to it.
#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <type_traits>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>

#include "common/check.h"
#include "common/hex.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/http/server_internal.h"

namespace lg::proxy {
namespace detail {
namespace {

constexpr size_t kReadChunk = 16 * 1024;
// A chunked body is reserved against the in-flight budget in steps of this
// much, as it arrives (a declared length is reserved whole at once).
constexpr uint64_t kChunkedReserveStep = 256 * 1024;

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
  for (std::string_view m : {"content-length", "transfer-encoding", "connection", "keep-alive", "x-request-id", "date",
                             "x-content-type-options"}) {
    if (equalsIgnoreCase(name, m)) return true;
  }
  return false;
}

bool hasNoBody(int status) { return status < 200 || status == 204 || status == 304; }

}  // namespace

// (In detail, not in the anonymous namespace: ConnectionBase names it.)
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

  void onDisconnect(std::function<void(DisconnectCause)> callback) override {
    std::unique_lock lock(mu_);
    if (!disconnected_.load()) {
      callback_ = std::move(callback);
      return;
    }
    if (fired_) return;
    fired_ = true;
    const DisconnectCause cause = cause_;
    lock.unlock();
    if (callback) callback(cause);
  }
  bool disconnected() const override { return disconnected_.load(); }

  // On the strand: the connection went away before the response completed.
  void markDisconnected(DisconnectCause cause) {
    std::function<void(DisconnectCause)> callback;
    {
      std::lock_guard lock(mu_);
      if (disconnected_.load()) return;
      cause_ = cause;
      disconnected_.store(true);
      if (callback_) {
        fired_ = true;
        callback = std::move(callback_);
      }
    }
    if (callback) callback(cause);
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
  std::mutex mu_;  // guards callback_, fired_ and cause_
  std::function<void(DisconnectCause)> callback_;
  DisconnectCause cause_ = DisconnectCause::kClientClosed;
  bool fired_ = false;
};

namespace {

template <bool kTls>
class Connection final : public ConnectionBase {
  using Stream = std::conditional_t<kTls, ssl::stream<tcp::socket>, tcp::socket>;

  enum class Phase { kHandshake, kRequest, kHandling, kResponding, kStreaming, kLingering, kClosed };
  enum class Deadline { kNone, kHandshake, kFirstByte, kHeader, kBody, kHandling, kWrite, kLinger };

 public:
  Connection(HttpServer::State& server, tcp::socket socket, uint64_t id, bool in_reserve)
      : ConnectionBase(strandOf(socket)),
        server_(server),
        stream_(makeStream(server, std::move(socket))),
        timer_(strand_),
        id_(id),
        in_reserve_(in_reserve),
        parser_(std::make_unique<RequestParser>(server.options.limits, /*hold_body=*/true)) {
    ErrorCode ec;
    const tcp::endpoint peer = lowest().remote_endpoint(ec);
    remote_ = ec ? std::string("?") : endpointText(peer);
    body_limit_ = server_.options.limits.max_body_bytes;
  }

  ~Connection() override {
    if (phase_ != Phase::kClosed) server_.connectionClosed(id_);
    releaseBody();
  }

  void start() override {
    accepted_at_ = Clock::now();
    idle_since_ = accepted_at_;
    idle.store(true);
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
      close(DisconnectCause::kShutdown);
    }
  }

  void onPressure() override {
    if (phase_ == Phase::kClosed || !idle.load() || authenticated.load()) return;
    if (deadline_ != Deadline::kHandshake && deadline_ != Deadline::kFirstByte) return;
    const Clock::time_point at = idle_since_ + server_.options.pressure_idle_timeout;
    if (at >= deadline_at_) return;
    pressured_ = true;
    setDeadline(deadline_, at);
  }

  void close(DisconnectCause cause) override {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    idle.store(false);
    releaseBody();
    timer_.cancel();
    ErrorCode ignored;
    lowest().close(ignored);  // pending reads and writes complete with errors
    out_.clear();
    if (exchange_) {
      server_.counters.disconnects.fetch_add(1);
      proxyLog()->debug("{} disconnected before its response completed", exchange_->request().id);
      std::shared_ptr<ExchangeImpl> exchange = std::move(exchange_);
      exchange->markDisconnected(cause);  // the handler's callback runs here, on the strand
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
      return close(DisconnectCause::kSlowReader);
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
    deadline_at_ = at;
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
        if (pressured_) {
          server_.counters.closed_under_pressure.fetch_add(1);
        } else if (deadline_ == Deadline::kHandshake || first_request_) {
          server_.counters.header_timeouts.fetch_add(1);
        }
        return close(DisconnectCause::kClientClosed);
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
        exchange->markDisconnected(DisconnectCause::kRequestTimeout);
        if (phase_ == Phase::kClosed) return;
        phase_ = Phase::kResponding;
        setDeadline(Deadline::kWrite, Clock::now() + server_.options.write_timeout);
        close_after_ = true;
        const ApiError e = responseTimeoutError();
        const std::string body = apiErrorBody(e);
        writeHead(e.http_status, apiErrorHeaders(e), body.size());
        if (!head_request_) queue(body);
        return flush();
      }
      case Deadline::kWrite:
        server_.counters.write_timeouts.fetch_add(1);
        proxyLog()->debug("connection {} from {}: a write made no progress in {} ms; closing", id_, remote_,
                          server_.options.write_timeout.count());
        return close(DisconnectCause::kWriteTimeout);
      case Deadline::kLinger:
        return close(DisconnectCause::kClientClosed);
    }
  }

  // --- reading ------------------------------------------------------------------

  void onHandshake(const ErrorCode& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      server_.counters.tls_failures.fetch_add(1);
      proxyLog()->debug("connection {} from {}: TLS handshake failed: {}", id_, remote_, ec.message());
      return close(DisconnectCause::kClientClosed);
    }
    startReading();
  }

  void startReading() {
    phase_ = Phase::kRequest;
    // The first request's header is due header_timeout after accept, the
    // handshake included (sooner when pressure cut the wait already).
    Clock::time_point due = accepted_at_ + server_.options.header_timeout;
    if (pressured_) due = std::min(due, idle_since_ + server_.options.pressure_idle_timeout);
    setDeadline(Deadline::kFirstByte, due);
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
    // Into a buffer of its own, not into buffer_.prepare(): the read stays
    // pending while a request is handled, and a pipelined request parsed
    // meanwhile (finishResponse) consumes buffer_, which invalidates a
    // prepared region: the bytes would land where buffer_ no longer reads,
    // and the next request would be parsed from stale bytes.
    if (!read_chunk_) read_chunk_ = std::make_unique<char[]>(kReadChunk);
    stream_.async_read_some(net::buffer(read_chunk_.get(), std::min(kReadChunk, cap - buffer_.size())),
                            [self = self()](const ErrorCode& ec, size_t n) { self->onRead(ec, n); });
  }

  void onRead(const ErrorCode& ec, size_t n) {
    reading_ = false;
    if (phase_ == Phase::kClosed) return;
    if (ec) return onReadError(ec);
    std::memcpy(buffer_.prepare(n).data(), read_chunk_.get(), n);
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
    close(DisconnectCause::kClientClosed);
  }

  void parseRequest() {
    if (buffer_.size() == 0) return;
    if (!request_started_) {
      request_started_ = true;
      idle.store(false);
      pressured_ = false;
      const Clock::time_point due =
          first_request_ ? accepted_at_ + server_.options.header_timeout : Clock::now() + server_.options.header_timeout;
      setDeadline(Deadline::kHeader, due);
    }
    for (;;) {
      const auto data = buffer_.data();
      const size_t used = parser_->feed(std::string_view(static_cast<const char*>(data.data()), data.size()));
      buffer_.consume(used);
      const RequestParser::State state = parser_->state();
      if (head_checked_ || (state != RequestParser::State::kBody && state != RequestParser::State::kComplete)) break;
      // The header is complete and no byte of the body was read (the parser
      // holds it): decide now, before reading it or sending 100 Continue.
      head_checked_ = true;
      if (!checkHead()) return;  // refused and answered
      if (parser_->state() != RequestParser::State::kBody || buffer_.size() == 0) break;
      // Admitted: parse the body bytes that came with the header.
    }
    switch (parser_->state()) {
      case RequestParser::State::kHeader:
        return;
      case RequestParser::State::kBody:
        if (!reserveChunked()) return;
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
        if (!reserveChunked()) return;
        return dispatch();
      case RequestParser::State::kFailed: {
        const ParseFailure& f = parser_->failure();
        proxyLog()->debug("connection {} from {}: bad request ({}): {}", id_, remote_, f.status, f.reason);
        switch (f.status) {
          case 413:
            server_.counters.bodies_too_large.fetch_add(1);
            return rejectRequest(bodyTooLargeError(static_cast<int64_t>(body_limit_)));
          case 431: return rejectRequest(headersTooLargeError(static_cast<int64_t>(server_.options.limits.max_header_bytes)));
          case 501: {
            ApiError e = badRequestError("Only the chunked transfer coding is supported");
            e.http_status = 501;
            e.code = "unsupported_transfer_coding";
            return rejectRequest(e);
          }
          case 505: {
            ApiError e = badRequestError("Only HTTP/1.0 and HTTP/1.1 are supported");
            e.http_status = 505;
            e.code = "http_version_not_supported";
            return rejectRequest(e);
          }
          default: return rejectRequest(badRequestError("The request is not valid HTTP/1.1 (" + f.reason + ")"));
        }
      }
    }
  }

  // The header is complete, the body unread: the preflight's decision (the
  // route, the caller's credentials, the route's body limit), the reserve's
  // rule and the body budget. False when the request was refused (answered,
  // the connection ending); a body over the route's limit fails the parser
  // instead (413, answered by the caller).
  bool checkHead() {
    HeadDecision d;
    if (server_.preflight) {
      HttpRequest head = parser_->head();
      head.remote = remote_;
      try {
        d = server_.preflight(head);
      } catch (const std::exception& e) {
        // As callHandler does for a handler: logged, answered 500, nothing else taken down.
        proxyLog()->error("connection {} from {}: the preflight threw: {}", id_, remote_, e.what());
        rejectRequest(internalServerError());
        return false;
      }
    }
    if (d.refusal) {
      if (d.refusal->http_status == 401) {
        server_.counters.preflight_unauthenticated.fetch_add(1);
      } else if (d.refusal->http_status == 404 || d.refusal->http_status == 405) {
        server_.counters.preflight_no_route.fetch_add(1);
      }
      proxyLog()->debug("connection {} from {}: refused at its header ({})", id_, remote_, d.refusal->http_status);
      rejectRequest(*d.refusal, d.refusal_headers);
      return false;
    }
    if (d.authenticated) authenticated.store(true);
    if (in_reserve_ && !authenticated.load()) {
      // A reserved slot is for callers with credentials: anyone else would
      // take the room the operator needs during a flood.
      server_.counters.refused_reserve.fetch_add(1);
      proxyLog()->debug("connection {} from {}: reserved slot without credentials; 503", id_, remote_);
      rejectRequest(overloadedError(1));
      return false;
    }
    const uint64_t server_limit = server_.options.limits.max_body_bytes;
    body_limit_ = d.max_body_bytes == 0 ? server_limit : std::min<uint64_t>(d.max_body_bytes, server_limit);
    parser_->admitBody(body_limit_);
    if (parser_->state() == RequestParser::State::kFailed) return true;
    if (const auto declared = parser_->declaredLength(); declared && *declared > 0) return reserveBody(*declared);
    return true;
  }

  // Reserves `n` more body bytes against the server's in-flight budget, or
  // refuses the request (503).
  bool reserveBody(uint64_t n) {
    if (!server_.reserveBody(n)) {
      server_.counters.bodies_over_budget.fetch_add(1);
      proxyLog()->warn("connection {} from {}: the in-flight body budget ({} bytes) is spent; 503", id_, remote_,
                       server_.options.max_inflight_body_bytes);
      rejectRequest(overloadedError(1));
      return false;
    }
    body_reserved_ += n;
    return true;
  }

  // A chunked body has no length up front: it is reserved as it arrives.
  bool reserveChunked() {
    if (!parser_->chunked()) return true;
    const uint64_t have = parser_->bodyBytes();
    if (have <= body_reserved_) return true;
    return reserveBody(std::max(have - body_reserved_, kChunkedReserveStep));
  }

  void releaseBody() {
    if (body_reserved_ == 0) return;
    server_.releaseBody(body_reserved_);
    body_reserved_ = 0;
  }

  // The server's own answer to a request it will not hand over (bad, too
  // large, too slow); the connection ends after it.
  void rejectRequest(const ApiError& error, const HttpHeaders& extra = {}) {
    server_.counters.rejected.fetch_add(1);
    releaseBody();  // the body will not be read
    phase_ = Phase::kResponding;
    // A connection being ended gets little time: these clients are the
    // suspicious ones (slow, malformed, oversized).
    setDeadline(Deadline::kWrite, Clock::now() + std::min(server_.options.write_timeout, server_.options.linger_timeout));
    close_after_ = true;
    request_id_ = newRequestId();
    const std::string body = apiErrorBody(error);
    HttpHeaders headers = apiErrorHeaders(error);
    for (const auto& [name, value] : extra.fields()) headers.add(name, value);
    writeHead(error.http_status, headers, body.size());
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
    // A copy: a handler that responds at once may reset exchange_ under it.
    std::shared_ptr<Exchange> exchange = exchange_;
    callHandler(server_.handler, exchange);
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
    // Every response: a browser must not read JSON (or an error echoing a
    // client's path) as HTML.
    head += "x-content-type-options: nosniff\r\n";
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
      return close(DisconnectCause::kClientClosed);
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
    releaseBody();  // the exchange, which held the body, is done with
    if (close_after_ || draining_) return beginLinger();
    // Next request on this connection.
    phase_ = Phase::kRequest;
    parser_ = std::make_unique<RequestParser>(server_.options.limits, /*hold_body=*/true);
    request_started_ = false;
    head_checked_ = false;
    body_limit_ = server_.options.limits.max_body_bytes;
    continue_sent_ = false;
    stream_ended_ = false;
    chunked_ = false;
    head_request_ = false;
    // Under pressure a connection that never authenticated waits less (and
    // onPressure shortens the waits that began before).
    idle_since_ = Clock::now();
    idle.store(true);
    const auto wait = !authenticated.load() && server_.underPressure()
                          ? std::min(server_.options.idle_timeout, server_.options.pressure_idle_timeout)
                          : server_.options.idle_timeout;
    pressured_ = wait < server_.options.idle_timeout;
    setDeadline(Deadline::kFirstByte, idle_since_ + wait);
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
    if (draining_) return close(DisconnectCause::kShutdown);  // stopping: the FIN follows the response; nothing more to wait for
    setDeadline(Deadline::kLinger, Clock::now() + server_.options.linger_timeout);
    maybeRead();
  }

  // A handler called the Exchange out of order: a bug. Closing is the one
  // answer that cannot send a malformed response.
  void misuse(const char* what) {
    proxyLog()->error("{}: {}; closing the connection", request_id_, what);
    close(DisconnectCause::kServerError);
  }

  HttpServer::State& server_;
  Stream stream_;
  net::steady_timer timer_;
  const uint64_t id_;
  const bool in_reserve_;  // accepted into a reserved slot: its first request must authenticate
  std::string remote_;

  Phase phase_ = Phase::kRequest;
  Deadline deadline_ = Deadline::kNone;
  uint64_t deadline_generation_ = 0;
  Clock::time_point accepted_at_;
  Clock::time_point deadline_at_;
  Clock::time_point idle_since_;  // when the current idle wait (or the handshake) began
  bool pressured_ = false;        // the idle wait was shortened because of pressure

  boost::beast::flat_buffer buffer_;    // received, not parsed yet
  std::unique_ptr<char[]> read_chunk_;  // what the pending read writes into (see maybeRead)
  bool reading_ = false;
  std::unique_ptr<RequestParser> parser_;
  bool request_started_ = false;  // a byte of the current request arrived
  bool first_request_ = true;
  bool continue_sent_ = false;
  bool head_checked_ = false;  // checkHead() ran for the current request
  uint64_t body_limit_ = 0;    // the current request's (its route's)
  uint64_t body_reserved_ = 0; // against the server's in-flight body budget

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
  return "req_" + hexLower(bytes, sizeof bytes);
}

std::string endpointText(const tcp::endpoint& e) {
  const auto a = e.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(e.port());
}

std::shared_ptr<ConnectionBase> makeConnection(HttpServer::State& server, tcp::socket socket, uint64_t id,
                                               bool in_reserve) {
  if (server.options.plain_http) return std::make_shared<Connection<false>>(server, std::move(socket), id, in_reserve);
  return std::make_shared<Connection<true>>(server, std::move(socket), id, in_reserve);
}

}  // namespace detail
}  // namespace lg::proxy

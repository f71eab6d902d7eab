// RequestParser: bytes from the connection -> one HttpRequest, under the
// server's limits. The server feeds it everything it reads, and the fuzz
// target (tests/fuzz/http_request_fuzz.cc) feeds it arbitrary bytes, so both
// run the same parser configuration and the same conversion.
//
// Beast's parser does the HTTP/1.x parsing (strict: bad tokens, bad
// Content-Length, bad chunks are errors); this class fixes its limits, turns
// its errors into the status the client gets, and converts the message into
// an HttpRequest, keeping Beast out of every other header.
//
// Framing is strict where a lenient reading would let a request be read two
// ways (request smuggling, RFC 9112 6.1 and 6.3, issue 21 item 6): a
// Transfer-Encoding whose final coding is not chunked, one together with a
// Content-Length, one on an HTTP/1.0 request, and obs-fold header lines are
// 400 and end the connection; a coding other than chunked before it is 501.
//
// Held bodies: the server decides about a request when its header is
// complete (the route, the caller's credentials, the route's body limit, the
// body budget: preflight.h) before it reads a byte of the body or sends
// 100 Continue. A parser made with `hold_body` stops after the header
// (state kBody, or kComplete for a request without a body) and consumes no
// body byte until admitBody() says how large the body may be.
//
// One parser per request (Beast's parsers are single-use). Not thread-safe:
// the connection's strand owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/http/http_message.h"

namespace lg::proxy {

struct ParserLimits {
  size_t max_header_bytes = size_t{16} << 10;    // request line + header fields + the blank line; more: 431
  uint64_t max_body_bytes = uint64_t{32} << 20;  // declared or chunked body; more: 413
};

// Why a request was refused: the status the client gets and a reason for the
// log (Beast's error text; client bytes are never copied into it).
struct ParseFailure {
  int status = 400;  // 400 malformed, 413 body, 431 header, 501 transfer coding, 505 not HTTP/1.0 or 1.1
  std::string reason;
};

class RequestParser {
 public:
  enum class State {
    kHeader,    // the header is incomplete
    kBody,      // the header is complete, the body is not
    kComplete,  // take() the request
    kFailed,    // failure() says why; the connection answers it and closes
  };

  // `hold_body`: stop after the header until admitBody() (above).
  explicit RequestParser(const ParserLimits& limits, bool hold_body = false);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses what it can of `bytes` and returns how many it consumed. A header
  // is consumed only once complete (and parsed whole, so that what is refused
  // never depends on how the reads fell), so the caller keeps the unconsumed
  // rest and feeds it again with the next bytes appended; bytes after a
  // complete request (a pipelined next one) are left unconsumed.
  size_t feed(std::string_view bytes);
  // The peer closed its side: a request in progress fails (400).
  void feedEof();

  State state() const { return state_; }
  bool headerDone() const { return state_ == State::kBody || state_ == State::kComplete; }
  // Once the header is done: the client waits for "100 Continue" before it
  // sends the body (Expect: 100-continue with a body to come).
  bool expectsContinue() const;
  // Once the header is done: whether the connection may serve another request
  // after this one (HTTP/1.1 without "Connection: close", or HTTP/1.0 with
  // keep-alive).
  bool keepAlive() const;
  // The version once the header is done (10 or 11), else 11.
  int version() const;
  const ParseFailure& failure() const { return failure_; }

  // Once the header is done: the request line and header fields, without the
  // body (what the server decides on before reading it).
  HttpRequest head() const;
  // Once the header is done: the declared Content-Length (nullopt: none, a
  // chunked body or no body), and whether the body is chunked.
  std::optional<uint64_t> declaredLength() const;
  bool chunked() const;
  // The body bytes received so far.
  uint64_t bodyBytes() const;
  // With hold_body, once, after the header is done: lets feed() read a body
  // of at most `max_body_bytes` (a declared length beyond it fails at once:
  // 413; a chunked body fails when it passes it).
  void admitBody(uint64_t max_body_bytes);
  bool bodyAdmitted() const { return body_admitted_; }

  // kComplete only: the request, moved out (remote, id and received are left
  // for the caller). The target's path and query are split; an absolute-form
  // target (http://host/path) keeps only its path and query.
  HttpRequest take();

 private:
  struct Impl;
  void fail(int status, std::string reason);
  void advance();

  std::unique_ptr<Impl> impl_;
  const size_t max_header_bytes_;
  size_t scanned_ = 0;  // bytes already searched for the end of the header
  bool body_admitted_ = true;  // false with hold_body until admitBody()
  State state_ = State::kHeader;
  ParseFailure failure_;
};

}  // namespace lg::proxy

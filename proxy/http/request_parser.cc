#include "proxy/http/request_parser.h"

#include <algorithm>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/check.h"

namespace lg::proxy {

namespace http = boost::beast::http;

namespace {

// Beast accepts only HTTP/1.0 and 1.1 and calls anything else, a mangled
// request line too, a bad version. A well-formed "HTTP/d.d" at the end of the
// request line is a version we do not speak (505); anything else is a
// malformed request (400).
bool otherHttpVersion(std::string_view header) {
  const size_t eol = header.find("\r\n");
  if (eol == std::string_view::npos) return false;
  const std::string_view line = header.substr(0, eol);
  // METHOD SP TARGET SP VERSION, nothing else.
  if (std::count(line.begin(), line.end(), ' ') != 2) return false;
  const std::string_view v = line.substr(line.rfind(' ') + 1);
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return v.size() == 8 && v.starts_with("HTTP/") && digit(v[5]) && v[6] == '.' && digit(v[7]) &&
         v != "HTTP/1.0" && v != "HTTP/1.1";
}

// Beast's errors as the client's status.
int statusOf(const boost::beast::error_code& ec, std::string_view header) {
  if (ec == http::error::header_limit) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::bad_version && otherHttpVersion(header)) return 505;
  return 400;
}

}  // namespace

struct RequestParser::Impl {
  http::request_parser<http::string_body> parser;
};

RequestParser::RequestParser(const ParserLimits& limits)
    : impl_(std::make_unique<Impl>()), max_header_bytes_(limits.max_header_bytes) {
  // Beast's own header limit stays as a backstop only: it bounds the request
  // line and the fields each on their own when the whole header arrives in
  // one piece, but the two together when it trickles in, so that what is
  // refused (and with which status) would depend on how the reads fell. The
  // fuzz target found it; feed() hands Beast only whole headers instead.
  impl_->parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  impl_->parser.body_limit(limits.max_body_bytes);
  impl_->parser.eager(true);  // the body as its bytes come
}

RequestParser::~RequestParser() = default;

void RequestParser::fail(int status, std::string reason) {
  state_ = State::kFailed;
  failure_ = ParseFailure{status, std::move(reason)};
}

void RequestParser::advance() {
  auto& p = impl_->parser;
  if (p.is_header_done() && state_ == State::kHeader) state_ = State::kBody;
  if (p.is_done() && state_ == State::kBody) state_ = State::kComplete;
}

size_t RequestParser::feed(std::string_view bytes) {
  size_t used = 0;
  if (state_ == State::kHeader) {
    // The header ends at the first empty line (CRLF CRLF, as Beast requires).
    // Resume the search where the last call stopped: the caller feeds the
    // same unconsumed bytes again, with more appended.
    const size_t end = bytes.find("\r\n\r\n", scanned_ > 3 ? scanned_ - 3 : 0);
    if (end == std::string_view::npos) {
      scanned_ = bytes.size();
      // Unfinished and already at the limit: it can only end beyond it.
      if (bytes.size() >= max_header_bytes_) fail(431, "header over " + std::to_string(max_header_bytes_) + " bytes");
      return 0;
    }
    const size_t header = end + 4;
    if (header > max_header_bytes_) {
      fail(431, "header of " + std::to_string(header) + " bytes");
      return 0;
    }
    boost::beast::error_code ec;
    const size_t n = impl_->parser.put(boost::asio::const_buffer(bytes.data(), header), ec);
    LG_CHECK(n <= header, "the parser consumed ", n, " of a ", header, "-byte header");
    if (ec) {
      fail(statusOf(ec, bytes.substr(0, header)), ec.message());
      return n;
    }
    LG_CHECK(impl_->parser.is_header_done() && n == header, "a whole header was not parsed whole (", n, " of ",
             header, " bytes)");
    used = n;
    advance();
  }
  while (state_ == State::kBody) {
    boost::beast::error_code ec;
    const size_t n = impl_->parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
    LG_CHECK(n <= bytes.size() - used, "the parser consumed ", n, " of ", bytes.size() - used, " bytes");
    used += n;
    if (ec == http::error::need_more) break;
    if (ec) {
      fail(statusOf(ec, {}), ec.message());
      break;
    }
    advance();
    if (n == 0) break;
  }
  return used;
}

void RequestParser::feedEof() {
  if (state_ != State::kHeader && state_ != State::kBody) return;
  boost::beast::error_code ec;
  impl_->parser.put_eof(ec);
  if (ec) return fail(400, ec.message());
  advance();
  if (state_ != State::kComplete) fail(400, "the connection closed inside a request");
}

bool RequestParser::expectsContinue() const {
  if (!headerDone() || state_ == State::kComplete) return false;
  const auto& m = impl_->parser.get();
  auto it = m.find(http::field::expect);
  return it != m.end() && equalsIgnoreCase(it->value(), "100-continue") && m.version() >= 11;
}

bool RequestParser::keepAlive() const { return headerDone() && impl_->parser.get().keep_alive(); }

int RequestParser::version() const { return headerDone() ? static_cast<int>(impl_->parser.get().version()) : 11; }

HttpRequest RequestParser::take() {
  LG_CHECK(state_ == State::kComplete, "take() of an incomplete request");
  http::request<http::string_body> m = impl_->parser.release();
  HttpRequest r;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.version = static_cast<int>(m.version());
  std::string_view t = r.target;
  // Absolute form (RFC 9112 3.2.2), which a server must accept: drop the
  // scheme and authority.
  if (t.starts_with("http://") || t.starts_with("https://")) {
    const size_t authority = t.find("://") + 3;
    const size_t slash = t.find_first_of("/?", authority);
    t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
    if (t.starts_with("?")) {
      r.path = "/";
      r.query = std::string(t.substr(1));
      t = {};
    }
  }
  if (!t.empty()) {
    const size_t q = t.find('?');
    r.path = std::string(t.substr(0, q));
    if (q != std::string_view::npos) r.query = std::string(t.substr(q + 1));
  }
  for (const auto& field : m) r.headers.add(std::string(field.name_string()), std::string(field.value()));
  r.body = std::move(m.body());
  state_ = State::kFailed;  // taken: the parser is spent
  failure_ = ParseFailure{500, "request already taken"};
  return r;
}

}  // namespace lg::proxy

#include "proxy/http/request_parser.h"

#include <algorithm>
#include <optional>
#include <vector>

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

// An obs-fold (a header line that starts with a space or a tab, continuing
// the previous one) anywhere in a complete header, the blank line included.
// RFC 9112 5.2 lets a server reject it; Beast would unfold it, and a proxy in
// front that reads it another way would see other fields.
bool hasObsFold(std::string_view header) {
  for (size_t at = header.find("\r\n"); at != std::string_view::npos; at = header.find("\r\n", at + 2)) {
    if (at + 2 < header.size() && (header[at + 2] == ' ' || header[at + 2] == '\t')) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The framing of a parsed header, checked where Beast is lenient (RFC 9112
// 6.1, 6.3): a request with Transfer-Encoding must be HTTP/1.1, carry no
// Content-Length, and end its codings with chunked, once; Beast would take a
// final coding other than chunked as "no body" and parse the body as the
// next request. Returns the failure, if any.
std::optional<ParseFailure> checkFraming(const http::request<http::string_body>& m) {
  std::vector<std::string_view> codings;
  bool any = false;
  for (const auto& field : m) {
    if (field.name() != http::field::transfer_encoding) continue;
    any = true;
    std::string_view v = field.value();
    for (;;) {
      const size_t comma = v.find(',');
      const std::string_view c = trim(v.substr(0, comma));
      if (!c.empty()) codings.push_back(c);
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  if (!any) return std::nullopt;
  if (m.version() < 11) return ParseFailure{400, "Transfer-Encoding on an HTTP/1.0 request"};
  if (m.find(http::field::content_length) != m.end()) {
    return ParseFailure{400, "Transfer-Encoding together with Content-Length"};
  }
  if (codings.empty() || !equalsIgnoreCase(codings.back(), "chunked")) {
    return ParseFailure{400, "the final transfer coding is not chunked"};
  }
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (equalsIgnoreCase(codings[i], "chunked")) return ParseFailure{400, "chunked applied more than once"};
  }
  // Codings under chunked (gzip, ...): the body would reach handlers still
  // encoded.
  if (codings.size() > 1) return ParseFailure{501, "a transfer coding other than chunked"};
  return std::nullopt;
}

void fillHead(const http::request<http::string_body>& m, HttpRequest& r) {
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
}

}  // namespace

struct RequestParser::Impl {
  http::request_parser<http::string_body> parser;
};

RequestParser::RequestParser(const ParserLimits& limits, bool hold_body)
    : impl_(std::make_unique<Impl>()), max_header_bytes_(limits.max_header_bytes), body_admitted_(!hold_body) {
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
    if (hasObsFold(bytes.substr(0, header))) {
      fail(400, "obs-fold (a header line starting with white space)");
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
    if (auto bad = checkFraming(impl_->parser.get())) {
      fail(bad->status, std::move(bad->reason));
      return used;
    }
    advance();
    if (!body_admitted_) return used;  // the caller decides first (admitBody)
  }
  while (state_ == State::kBody && body_admitted_) {
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

HttpRequest RequestParser::head() const {
  LG_CHECK(headerDone(), "head() before the header is complete");
  HttpRequest r;
  fillHead(impl_->parser.get(), r);
  return r;
}

std::optional<uint64_t> RequestParser::declaredLength() const {
  if (!headerDone()) return std::nullopt;
  const auto n = impl_->parser.content_length();
  return n ? std::optional<uint64_t>(*n) : std::nullopt;
}

bool RequestParser::chunked() const { return headerDone() && impl_->parser.chunked(); }

uint64_t RequestParser::bodyBytes() const {
  return state_ == State::kHeader ? 0 : impl_->parser.get().body().size();
}

void RequestParser::admitBody(uint64_t max_body_bytes) {
  if (state_ != State::kBody && state_ != State::kComplete) return;
  LG_CHECK(!body_admitted_, "admitBody() without hold_body, or twice");
  body_admitted_ = true;
  if (state_ != State::kBody) return;
  const auto declared = impl_->parser.content_length();
  if (declared && *declared > max_body_bytes) {
    return fail(413, "declared body of " + std::to_string(*declared) + " bytes over " + std::to_string(max_body_bytes));
  }
  // Beast counts its limit down as chunks arrive; nothing of the body was
  // read yet (held), so this bounds the whole chunked body.
  impl_->parser.body_limit(max_body_bytes);
}

HttpRequest RequestParser::take() {
  LG_CHECK(state_ == State::kComplete, "take() of an incomplete request");
  http::request<http::string_body> m = impl_->parser.release();
  HttpRequest r;
  fillHead(m, r);
  r.body = std::move(m.body());
  state_ = State::kFailed;  // taken: the parser is spent
  failure_ = ParseFailure{500, "request already taken"};
  return r;
}

}  // namespace lg::proxy

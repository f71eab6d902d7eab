// libFuzzer target for the server's request parsing path: the bytes a
// connection reads go through proxy::RequestParser (Beast's parser with the
// server's limits) and its conversion to HttpRequest, exactly as the server
// drives them (unconsumed bytes kept and fed again with more; a new parser
// for each pipelined request; EOF at the end).
//
// Input: byte 0 picks the piece sizes the stream is cut into (a TCP read can
// split anywhere) and byte 1 the limits (the server's defaults, or small
// ones so that 413 and 431 are reachable with short inputs); the rest is what
// the client sent.
//
// Checks: no crash or sanitizer report; every parser consumes no more than
// it was given; the outcome (the requests and the final failure status) does
// not depend on how the stream was cut; each request's fields are consistent
// (a token method, a path without '?', target = path + query for
// origin-form targets, a body within the limit, header values without CR or
// LF, case-insensitive lookup finding every field); an OpenAI error naming
// the method and path is valid JSON whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/http/http_message.h"
#include "proxy/http/http_server.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/request_parser.h"

namespace {

using lg::proxy::HttpRequest;
using lg::proxy::ParserLimits;
using lg::proxy::RequestParser;

void check(bool condition) {
  if (!condition) std::abort();
}

bool isToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

struct Outcome {
  std::vector<std::string> requests;  // a digest of each request parsed
  int failure = 0;                     // the status of the failure that ended the stream, 0 if none
  bool operator==(const Outcome&) const = default;
};

void checkRequest(const HttpRequest& r, const ParserLimits& limits) {
  check(isToken(r.method));
  check(!r.target.empty());
  check(r.path.find('?') == std::string::npos);
  if (r.target.starts_with("/")) {
    const bool has_query = r.target.find('?') != std::string::npos;
    check(r.target == r.path + (has_query ? "?" + r.query : std::string()));
  }
  check(r.version == 10 || r.version == 11);
  check(r.body.size() <= limits.max_body_bytes);
  for (const auto& [name, value] : r.headers.fields()) {
    check(isToken(name));
    check(value.find_first_of("\r\n") == std::string::npos);
    check(r.headers.get(name).has_value());
  }
  // What the server would answer for an unknown path: valid JSON, whatever the bytes.
  const std::string body = lg::proxy::apiErrorBody(lg::proxy::unknownUrlError(r.method, r.path));
  check(nlohmann::json::accept(body));
}

// Drives parsers over `stream` cut into pieces as the server's reads would be.
Outcome run(std::string_view stream, const std::vector<size_t>& cuts, const ParserLimits& limits) {
  Outcome out;
  auto parser = std::make_unique<RequestParser>(limits);
  std::string pending;
  size_t at = 0, cut = 0;
  auto drain = [&] {
    for (;;) {
      const size_t used = parser->feed(pending);
      check(used <= pending.size());
      pending.erase(0, used);
      switch (parser->state()) {
        case RequestParser::State::kHeader:
        case RequestParser::State::kBody:
          return true;
        case RequestParser::State::kComplete: {
          const HttpRequest r = parser->take();
          checkRequest(r, limits);
          std::string digest = r.method + ' ' + r.target + ' ' + std::to_string(r.version) + ' ' +
                               std::to_string(r.headers.fields().size()) + ' ' + r.body;
          out.requests.push_back(std::move(digest));
          parser = std::make_unique<RequestParser>(limits);  // the next pipelined request
          if (pending.empty()) return true;
          continue;
        }
        case RequestParser::State::kFailed:
          out.failure = parser->failure().status;
          check(out.failure == 400 || out.failure == 413 || out.failure == 431 || out.failure == 505);
          return false;
      }
    }
  };
  while (at < stream.size()) {
    const size_t n = std::min(stream.size() - at, cuts.empty() ? stream.size() : cuts[cut++ % cuts.size()]);
    pending.append(stream.substr(at, n));
    at += n;
    if (!drain()) return out;
  }
  // The client closed: a request in progress fails, an idle connection just ends.
  if (parser->state() == RequestParser::State::kBody ||
      (parser->state() == RequestParser::State::kHeader && !pending.empty())) {
    parser->feedEof();
    if (parser->state() == RequestParser::State::kFailed) out.failure = parser->failure().status;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ParserLimits limits = lg::proxy::HttpServerOptions{}.limits;  // the server's defaults
  if (data[1] & 1) {
    limits.max_header_bytes = 64 + (data[1] >> 1);
    limits.max_body_bytes = data[1] >> 2;
  }
  const std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  // Piece sizes 1..16 from the bits of byte 0, cycled; 0 means one piece.
  std::vector<size_t> cuts;
  for (int i = 0; i < 4 && data[0] != 0; ++i) cuts.push_back(1 + ((data[0] >> (2 * i)) & 3) * (1 + i));
  const Outcome whole = run(stream, {}, limits);
  const Outcome pieces = run(stream, cuts, limits);
  const Outcome bytes = run(stream, {1}, limits);
  check(whole == pieces);
  check(whole == bytes);
  return 0;
}

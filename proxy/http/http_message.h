// HttpHeaders and HttpRequest: what a handler sees of one HTTP request, in
// plain standard types, so that handlers (the OpenAI endpoints, the admin API)
// never include Beast.
//
// Thread-safety: plain values; a const HttpRequest may be read from any
// thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lg::proxy {

// Header fields in the order received (or to be sent). Names compare
// case-insensitively (RFC 9110); a repeated field keeps every occurrence.
class HttpHeaders {
 public:
  using Field = std::pair<std::string, std::string>;

  HttpHeaders() = default;
  HttpHeaders(std::initializer_list<Field> fields) : fields_(fields) {}

  // Appends a field (another occurrence if the name is already present).
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  // Replaces every occurrence of `name` with one field.
  void set(std::string_view name, std::string value);
  void remove(std::string_view name);

  // The first occurrence's value.
  std::optional<std::string_view> get(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }

  const std::vector<Field>& fields() const { return fields_; }
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<Field> fields_;
};

// ASCII case-insensitive equality, for header names and tokens.
bool equalsIgnoreCase(std::string_view a, std::string_view b);

// Percent-decoding (RFC 3986 2.1) of a path segment or, with
// `plus_is_space`, of a form-encoded query value. A '%' not followed by two
// hex digits is kept as it is.
std::string percentDecode(std::string_view text, bool plus_is_space = false);

// One complete request: header and body were read and checked against the
// server's limits before a handler sees it.
struct HttpRequest {
  std::string method;   // as sent, e.g. "GET", "POST"
  std::string target;   // the request target as sent: path and query
  std::string path;     // target up to '?', not percent-decoded
  std::string query;    // after '?', without it; empty when none
  int version = 11;     // 10 for HTTP/1.0, 11 for HTTP/1.1
  HttpHeaders headers;
  std::string body;
  std::string remote;   // the peer, "IP:port" ("[v6]:port")
  std::string id;       // the request id, also sent back as x-request-id
  std::chrono::steady_clock::time_point received;  // when the request was complete
};

}  // namespace lg::proxy

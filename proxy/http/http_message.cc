#include "proxy/http/http_message.h"

#include "proxy/http/exchange.h"

#include <algorithm>

namespace lg::proxy {

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string percentDecode(std::string_view s, bool plus_is_space) {
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (plus_is_space && s[i] == '+') {
      r += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && digit(s[i + 1]) >= 0 && digit(s[i + 2]) >= 0) {
      r += static_cast<char>(digit(s[i + 1]) * 16 + digit(s[i + 2]));
      i += 2;
    } else {
      r += s[i];
    }
  }
  return r;
}

void HttpHeaders::set(std::string_view name, std::string value) {
  remove(name);
  fields_.emplace_back(std::string(name), std::move(value));
}

void HttpHeaders::remove(std::string_view name) {
  std::erase_if(fields_, [&](const Field& f) { return equalsIgnoreCase(f.first, name); });
}

std::optional<std::string_view> HttpHeaders::get(std::string_view name) const {
  for (const Field& f : fields_) {
    if (equalsIgnoreCase(f.first, name)) return std::string_view(f.second);
  }
  return std::nullopt;
}

std::string_view disconnectCauseName(DisconnectCause cause) {
  switch (cause) {
    case DisconnectCause::kClientClosed: return "client_closed";
    case DisconnectCause::kSlowReader: return "slow_reader";
    case DisconnectCause::kWriteTimeout: return "write_timeout";
    case DisconnectCause::kRequestTimeout: return "request_timeout";
    case DisconnectCause::kShutdown: return "shutdown";
    case DisconnectCause::kServerError: return "server_error";
  }
  return "client_closed";
}

}  // namespace lg::proxy

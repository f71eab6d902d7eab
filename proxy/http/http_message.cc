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

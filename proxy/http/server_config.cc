#include "proxy/http/server_config.h"

#include <unistd.h>

#include <charconv>
#include <climits>

namespace lg::proxy {

Result<ListenAddress> parseListenAddress(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return invalidArgument("server.listen: expected HOST:PORT, got '" + listen + "'");
  }
  ListenAddress out;
  out.host = listen.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  const std::string port = listen.substr(colon + 1);
  int value = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < 0 || value > 65535) {
    return invalidArgument("server.listen: expected a port in 0..65535, got '" + port + "'");
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

TlsMaterialOptions tlsMaterialOptions(const Config& config) {
  TlsMaterialOptions o;
  o.dir = config.data_dir + "/tls";
  o.cert_file = config.server.tls_cert;
  o.key_file = config.server.tls_key;
  auto listen = parseListenAddress(config.server.listen);
  if (listen.isOk()) {
    const std::string& host = listen->host;
    if (host == "0.0.0.0" || host == "::" || host.empty()) {
      // Listening everywhere: clients elsewhere will use this machine's name.
      char name[HOST_NAME_MAX + 1] = {};
      if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') o.extra_names.emplace_back(name);
    } else if (host != "localhost" && host != "127.0.0.1" && host != "::1") {
      o.extra_names.push_back(host);
    }
  }
  return o;
}

Result<HttpServerOptions> httpServerOptions(const Config& config, const TlsMaterial* tls) {
  const ServerOptions& s = config.server;
  HttpServerOptions o;
  LG_ASSIGN_OR_RETURN(ListenAddress listen, parseListenAddress(s.listen));
  o.host = listen.host;
  o.port = listen.port;
  o.plain_http = s.plain_http;
  if (!s.plain_http) {
    if (tls == nullptr) return invalidArgument("server: TLS material is needed unless server.plain_http is set");
    o.cert_chain_pem = tls->cert_chain_pem;
    o.key_pem = tls->key_pem;
  }
  o.io_threads = s.io_threads;
  o.max_connections = s.max_connections;
  o.limits.max_body_bytes = static_cast<uint64_t>(s.max_body_bytes);
  o.header_timeout = std::chrono::milliseconds(s.header_timeout_ms);
  o.idle_timeout = std::chrono::milliseconds(s.idle_timeout_ms);
  o.body_timeout = std::chrono::milliseconds(s.body_timeout_ms);
  o.request_timeout = std::chrono::milliseconds(s.request_timeout_ms);
  o.max_inflight_body_bytes = static_cast<uint64_t>(s.max_inflight_body_bytes);
  o.max_connections_per_address = s.max_connections_per_address;
  o.reserved_connections = s.reserved_connections;
  o.pressure_idle_timeout = std::chrono::milliseconds(s.pressure_idle_timeout_ms);
  return o;
}

Result<HttpServerOptions> loadHttpServerOptions(const Config& config, TlsMaterial* material) {
  if (config.server.plain_http) return httpServerOptions(config, nullptr);
  LG_ASSIGN_OR_RETURN(TlsMaterial tls, loadOrCreateTlsMaterial(tlsMaterialOptions(config)));
  auto options = httpServerOptions(config, &tls);
  if (material != nullptr) *material = std::move(tls);
  return options;
}

}  // namespace lg::proxy

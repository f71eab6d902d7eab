// The network edge's options from the process configuration: the one place
// where server.* becomes HttpServerOptions and TlsMaterialOptions (as
// cache/cache_config.h does for the cache). The values were validated when
// the Config was loaded.
//
//   lg::proxy::TlsMaterial tls;
//   LG_ASSIGN_OR_RETURN(auto options, lg::proxy::loadHttpServerOptions(config, &tls));
//   LG_ASSIGN_OR_RETURN(auto server, lg::proxy::HttpServer::start(options, router.handler()));
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "config/options.h"
#include "proxy/http/http_server.h"
#include "proxy/http/tls_material.h"

namespace lg::proxy {

struct ListenAddress {
  std::string host;  // without brackets
  uint16_t port = 0;
};
// "HOST:PORT" or "[IPv6]:PORT".
Result<ListenAddress> parseListenAddress(const std::string& listen);

// The generated material lives in data_dir/tls; a configured tls_cert/tls_key
// pair replaces it. The certificate also names the listen host when it is a
// specific one, or this machine's host name when listening on all addresses.
TlsMaterialOptions tlsMaterialOptions(const Config& config);

// server.* as HttpServerOptions; `tls` supplies the certificate and key
// (ignored, and may be null, with server.plain_http).
Result<HttpServerOptions> httpServerOptions(const Config& config, const TlsMaterial* tls);

// Both at once: loads or creates the TLS material (unless plain_http), and
// reports it in `material` when given (its ca_cert_path is what clients
// trust).
Result<HttpServerOptions> loadHttpServerOptions(const Config& config, TlsMaterial* material = nullptr);

}  // namespace lg::proxy

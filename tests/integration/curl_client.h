// curl, the real client, as the server tests over TLS drive it: one request
// with the test's CA trusted, read back as status, head and body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lg::proxy::testing {

struct CurlReply {
  int status = 0;    // 0: curl itself failed (the test was told)
  std::string head;  // status line and header fields
  std::string body;

  // The first header field `name` (case-insensitive).
  std::optional<std::string> header(std::string_view name) const;
};

// `curl -i -X method` to https://127.0.0.1:port + path trusting `ca_file`,
// giving up after `max_time_s`. `extra` comes before the URL. Expect:
// 100-continue is off unless `extra` sets it; a 100 Continue head is skipped.
CurlReply curlOverTls(const std::string& ca_file, uint16_t port, const std::string& method, const std::string& path,
                      const std::vector<std::string>& extra, int max_time_s);

}  // namespace lg::proxy::testing

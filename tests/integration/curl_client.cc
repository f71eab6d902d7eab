#include "tests/integration/curl_client.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "proxy/http/http_message.h"
#include "tests/support/subprocess.h"

namespace lg::proxy::testing {

std::optional<std::string> CurlReply::header(std::string_view name) const {
  // Field lines start after a CRLF; the status line before the first is not one.
  for (size_t at = head.find("\r\n"); at != std::string::npos;) {
    const size_t from = at + 2;
    const size_t next = head.find("\r\n", from);
    const std::string_view line = std::string_view(head).substr(from, next == std::string::npos ? std::string::npos
                                                                                                : next - from);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && equalsIgnoreCase(line.substr(0, colon), name)) {
      std::string_view value = line.substr(colon + 1);
      if (value.starts_with(' ')) value.remove_prefix(1);
      return std::string(value);
    }
    at = next;
  }
  return std::nullopt;
}

CurlReply curlOverTls(const std::string& ca_file, uint16_t port, const std::string& method, const std::string& path,
                      const std::vector<std::string>& extra, int max_time_s) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time", std::to_string(max_time_s), "--cacert",
                                   ca_file,         "-i",  "-X",         method,   "-H",  "Expect:",   "-w",
                                   "\n%{http_code}"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("https://127.0.0.1:" + std::to_string(port) + path);
  const test::ProcessResult r = test::runProcess(argv, "");
  CurlReply reply;
  const size_t nl = r.out.rfind('\n');
  if (r.exit_code != 0 || nl == std::string::npos) {
    ADD_FAILURE() << "curl " << method << " " << path << ": exit " << r.exit_code << ": " << r.err;
    return reply;
  }
  reply.status = std::atoi(r.out.c_str() + nl + 1);
  std::string_view rest = std::string_view(r.out).substr(0, nl);
  while (rest.starts_with("HTTP/1.1 100")) rest.remove_prefix(rest.find("\r\n\r\n") + 4);
  const size_t end = rest.find("\r\n\r\n");
  reply.head = std::string(rest.substr(0, end));
  reply.body = end == std::string_view::npos ? "" : std::string(rest.substr(end + 4));
  return reply;
}

}  // namespace lg::proxy::testing

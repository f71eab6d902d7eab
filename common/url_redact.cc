#include "common/url_redact.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace lg {
namespace {

constexpr std::string_view kHidden = "***";

struct Span {
  size_t begin = 0;
  size_t end = 0;  // exclusive
};

// Where the password values are in `url`.
std::vector<Span> passwordSpans(std::string_view url) {
  std::vector<Span> spans;
  const size_t scheme = url.find("://");
  if (scheme != std::string_view::npos) {
    // scheme://[user[:password]@]host...: the userinfo ends at the last '@'
    // before the path, query or fragment.
    const size_t authority = scheme + 3;
    size_t authority_end = url.find_first_of("/?#", authority);
    if (authority_end == std::string_view::npos) authority_end = url.size();
    const size_t at = url.rfind('@', authority_end);
    if (at != std::string_view::npos && at >= authority) {
      const size_t colon = url.find(':', authority);
      if (colon != std::string_view::npos && colon < at) spans.push_back({colon + 1, at});
    }
    // ?...&password=...&...
    const size_t query = url.find('?', authority);
    if (query != std::string_view::npos) {
      size_t pos = query + 1;
      while (pos <= url.size()) {
        size_t amp = url.find('&', pos);
        if (amp == std::string_view::npos) amp = url.size();
        const std::string_view param = url.substr(pos, amp - pos);
        if (param.starts_with("password=")) spans.push_back({pos + 9, amp});
        pos = amp + 1;
      }
    }
    return spans;
  }
  // key=value pairs separated by spaces; a value may be single-quoted.
  size_t pos = 0;
  while (pos < url.size()) {
    while (pos < url.size() && url[pos] == ' ') ++pos;
    const size_t eq = url.find('=', pos);
    if (eq == std::string_view::npos) break;
    std::string_view key = url.substr(pos, eq - pos);
    while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
    size_t v = eq + 1;
    while (v < url.size() && url[v] == ' ') ++v;
    size_t end = v;
    Span value{v, v};
    if (v < url.size() && url[v] == '\'') {
      end = v + 1;
      while (end < url.size() && url[end] != '\'') end += url[end] == '\\' ? 2 : 1;
      end = std::min(end, url.size());
      value = {v + 1, end};
      if (end < url.size()) ++end;
    } else {
      while (end < url.size() && url[end] != ' ') ++end;
      value = {v, end};
    }
    if (key == "password") spans.push_back(value);
    pos = end;
  }
  return spans;
}

}  // namespace

std::string redactUrlPassword(std::string_view url) {
  std::string out;
  size_t done = 0;
  for (const Span& s : passwordSpans(url)) {
    out.append(url.substr(done, s.begin - done));
    out.append(kHidden);
    done = s.end;
  }
  out.append(url.substr(done));
  return out;
}

std::string redactPasswordIn(std::string_view text, std::string_view url) {
  std::string out(text);
  for (const Span& s : passwordSpans(url)) {
    const std::string_view secret = url.substr(s.begin, s.end - s.begin);
    if (secret.empty()) continue;
    for (size_t at = out.find(secret); at != std::string::npos; at = out.find(secret, at + kHidden.size())) {
      out.replace(at, secret.size(), kHidden);
    }
  }
  return out;
}

}  // namespace lg

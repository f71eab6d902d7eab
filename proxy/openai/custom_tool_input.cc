#include "proxy/openai/custom_tool_input.h"

#include <cstdint>
#include <optional>

namespace lg::proxy::openai {

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Where the string's content starts in `s` ({ "input" : "), 0 when `s` may
// still become that lead, npos when it cannot.
size_t leadEnd(std::string_view s) {
  static constexpr std::string_view kParts[] = {"{", "\"input\"", ":", "\""};
  size_t i = 0;
  for (std::string_view part : kParts) {
    while (i < s.size() && isSpace(s[i])) ++i;
    for (char c : part) {
      if (i == s.size()) return 0;
      if (s[i++] != c) return std::string_view::npos;
    }
  }
  return i;
}

std::optional<uint32_t> hex4(std::string_view s) {
  uint32_t v = 0;
  for (char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
    else return std::nullopt;
  }
  return v;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The escape at the front of `s` (which starts with a backslash): its bytes
// and what it decodes to; 0 bytes when more are needed; nullopt when it is
// not a JSON escape.
std::optional<std::pair<size_t, std::string>> escape(std::string_view s) {
  if (s.size() < 2) return std::pair<size_t, std::string>{0, {}};
  switch (s[1]) {
    case '"': return std::pair<size_t, std::string>{2, "\""};
    case '\\': return std::pair<size_t, std::string>{2, "\\"};
    case '/': return std::pair<size_t, std::string>{2, "/"};
    case 'b': return std::pair<size_t, std::string>{2, "\b"};
    case 'f': return std::pair<size_t, std::string>{2, "\f"};
    case 'n': return std::pair<size_t, std::string>{2, "\n"};
    case 'r': return std::pair<size_t, std::string>{2, "\r"};
    case 't': return std::pair<size_t, std::string>{2, "\t"};
    case 'u': break;
    default: return std::nullopt;
  }
  if (s.size() < 6) return std::pair<size_t, std::string>{0, {}};
  const std::optional<uint32_t> cp = hex4(s.substr(2, 4));
  if (!cp) return std::nullopt;
  std::string out;
  if (*cp >= 0xD800 && *cp < 0xDC00) {
    // A high surrogate: its low half follows as a second escape.
    if (s.size() < 12) return std::pair<size_t, std::string>{0, {}};
    const std::optional<uint32_t> low = s[6] == '\\' && s[7] == 'u' ? hex4(s.substr(8, 4)) : std::nullopt;
    if (!low || *low < 0xDC00 || *low >= 0xE000) return std::nullopt;
    appendUtf8(out, 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00));
    return std::pair<size_t, std::string>{12, std::move(out)};
  }
  if (*cp >= 0xDC00 && *cp < 0xE000) return std::nullopt;  // a lone low surrogate
  appendUtf8(out, *cp);
  return std::pair<size_t, std::string>{6, std::move(out)};
}

}  // namespace

void CustomToolInputDecoder::decode(std::string& out) {
  size_t i = 0;
  while (i < pending_.size()) {
    if (state_ == State::kLead) {
      const size_t end = leadEnd(pending_);
      if (end == 0) return;  // not yet decided
      if (end == std::string_view::npos) {
        state_ = State::kRaw;
        continue;
      }
      state_ = State::kString;
      i = end;
    } else if (state_ == State::kString) {
      const char c = pending_[i];
      if (c == '"') {
        state_ = State::kAfter;
        ++i;
      } else if (c == '\\') {
        const auto e = escape(std::string_view(pending_).substr(i));
        if (!e) {
          // Not JSON: the rest is passed through as it is.
          pending_.erase(0, i);
          i = 0;
          state_ = State::kRaw;
          continue;
        }
        if (e->first == 0) break;  // the escape continues in the next push
        out += e->second;
        i += e->first;
      } else {
        out += c;
        ++i;
      }
    } else if (state_ == State::kAfter) {
      i = pending_.size();  // the closing brace
    } else {
      out += pending_;
      i = pending_.size();
    }
  }
  pending_.erase(0, i);
}

std::string CustomToolInputDecoder::push(std::string_view arguments) {
  pending_.append(arguments);
  std::string out;
  decode(out);
  return out;
}

std::string CustomToolInputDecoder::finish() {
  std::string out;
  if (state_ != State::kAfter) out = std::move(pending_);  // an unfinished lead or escape, raw
  pending_.clear();
  state_ = State::kAfter;
  return out;
}

}  // namespace lg::proxy::openai

// PromptText: rendered prompt text plus the byte ranges that the server itself
// wrote (chat-template literals, bos/eos). Only inside those ranges may the
// tokenizer turn added-token strings such as "<｜Assistant｜>" into special ids;
// text that came from a client (message content, tool arguments, a completion
// prompt) is always encoded as plain text, so clients cannot forge turns.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lg::text {

struct ByteRange {
  size_t begin = 0;
  size_t end = 0;  // exclusive
  bool operator==(const ByteRange&) const = default;
};

struct PromptText {
  std::string text;
  std::vector<ByteRange> trusted;  // sorted, disjoint, non-empty, within text

  // Appends text written by the server (trusted) or by a client (untrusted),
  // merging adjacent trusted ranges.
  void append(std::string_view s, bool is_trusted) {
    if (s.empty()) return;
    const size_t begin = text.size();
    text.append(s);
    if (!is_trusted) return;
    if (!trusted.empty() && trusted.back().end == begin) {
      trusted.back().end = text.size();
    } else {
      trusted.push_back({begin, text.size()});
    }
  }
};

}  // namespace lg::text

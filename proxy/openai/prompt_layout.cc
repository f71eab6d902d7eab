#include "proxy/openai/prompt_layout.h"

#include <algorithm>
#include <optional>
#include <string>

namespace lg::proxy::openai {
namespace {

bool leadingSystem(Role r) { return r == Role::kSystem || r == Role::kDeveloper; }

// What a message contributed that the template copies verbatim.
std::string_view anchorOf(const ChatMessage& m) {
  if (m.content && !m.content->empty()) return *m.content;
  if (!m.tool_calls.empty()) {
    const ToolCall& c = m.tool_calls.front();
    return c.arguments.empty() ? std::string_view(c.name) : std::string_view(c.arguments);
  }
  return {};
}

// Where `needle` stands in `text`, searched from `from`: [begin, end) of
// what was found, and `trimmed`, how many of the needle's leading bytes are
// not in it. Templates commonly trim a content, so a miss retries without
// its surrounding whitespace.
struct Found {
  size_t begin = 0, end = 0;
  size_t trimmed = 0;
};

std::optional<Found> find(std::string_view text, std::string_view needle, size_t from) {
  if (needle.empty()) return std::nullopt;
  if (size_t at = text.find(needle, from); at != std::string_view::npos) return Found{at, at + needle.size(), 0};
  const size_t b = needle.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return std::nullopt;
  const size_t e = needle.find_last_not_of(" \t\r\n");
  const std::string_view core = needle.substr(b, e - b + 1);
  if (core.size() == needle.size()) return std::nullopt;
  if (size_t at = text.find(core, from); at != std::string_view::npos) return Found{at, at + core.size(), b};
  return std::nullopt;
}

std::optional<size_t> endOf(std::string_view text, std::string_view needle, size_t from) {
  const std::optional<Found> found = find(text, needle, from);
  if (!found) return std::nullopt;
  return found->end;
}

}  // namespace

PromptLayout layOut(const ChatPrompt& prompt, std::string_view rendered, std::string_view addendum,
                    std::string_view tools_text) {
  PromptLayout layout;
  layout.message_end.reserve(prompt.messages.size());
  size_t cursor = 0;
  // Ends the system part once the leading system messages are behind: the
  // encoder's addendum follows the last one's content (or is a system
  // message of its own, found here as well), and belongs to it.
  const auto endSystemPart = [&] {
    if (std::optional<Found> found = find(rendered, addendum, cursor)) {
      // The tools' text opens the addendum; a trimmed addendum lost its
      // leading white space, which the tools' text then loses too.
      if (!tools_text.empty() && addendum.substr(0, tools_text.size()) == tools_text &&
          tools_text.size() > found->trimmed) {
        layout.tools_begin = found->begin;
        layout.tools_end = std::min(found->end, found->begin + tools_text.size() - found->trimmed);
      }
      cursor = found->end;
      if (!layout.message_end.empty()) layout.message_end.back() = cursor;
    }
    layout.system_end = cursor;
  };
  bool leading = true;
  for (size_t i = 0; i < prompt.messages.size(); ++i) {
    const ChatMessage& m = prompt.messages[i];
    if (leading && !leadingSystem(m.role)) {
      leading = false;
      endSystemPart();
    }
    if (m.role == Role::kAssistant) layout.last_assistant = static_cast<int32_t>(i);
    // An assistant message's calls follow its content: the part ends after
    // the last call's arguments.
    if (std::optional<size_t> end = endOf(rendered, anchorOf(m), cursor)) cursor = *end;
    for (size_t c = m.content && !m.content->empty() ? 0 : 1; c < m.tool_calls.size(); ++c) {
      if (std::optional<size_t> end = endOf(rendered, m.tool_calls[c].arguments, cursor)) cursor = *end;
    }
    layout.message_end.push_back(cursor);
  }
  if (leading) endSystemPart();  // only system messages
  return layout;
}

PromptPlace placeOf(const PromptLayout& layout, size_t byte) {
  PromptPlace place;
  if (layout.empty()) return place;
  const auto it = std::upper_bound(layout.message_end.begin(), layout.message_end.end(), byte);
  place.message = it == layout.message_end.end() ? -1 : static_cast<int32_t>(it - layout.message_end.begin());
  if (byte >= layout.tools_begin && byte < layout.tools_end) {
    place.part = PromptPart::kTools;
  } else if (byte < layout.system_end) {
    place.part = PromptPart::kSystem;
  } else if (place.message >= 0 && place.message <= layout.last_assistant) {
    place.part = PromptPart::kHistory;
  } else {
    place.part = PromptPart::kInput;
  }
  return place;
}

const char* promptPartName(PromptPart part) {
  switch (part) {
    case PromptPart::kSystem: return "system";
    case PromptPart::kTools: return "tools";
    case PromptPart::kHistory: return "history";
    case PromptPart::kInput: return "input";
    case PromptPart::kNone: break;
  }
  return "none";
}

TokenLengths::TokenLengths(const text::Tokenizer& tokenizer) {
  lengths_.resize(static_cast<size_t>(std::max(0, tokenizer.vocabSize())));
  for (size_t id = 0; id < lengths_.size(); ++id) {
    lengths_[id] = static_cast<uint32_t>(tokenizer.tokenBytes(static_cast<int32_t>(id)).size());
  }
}

PromptLayout inTokens(const PromptLayout& layout, const TokenLengths& lengths, std::span<const int32_t> ids) {
  PromptLayout out = layout;
  // Every boundary, in byte order; one pass over the tokens counts those
  // that start before each.
  std::vector<size_t*> bounds;
  bounds.reserve(out.message_end.size() + 3);
  for (size_t& end : out.message_end) bounds.push_back(&end);
  bounds.push_back(&out.system_end);
  bounds.push_back(&out.tools_begin);
  bounds.push_back(&out.tools_end);
  std::stable_sort(bounds.begin(), bounds.end(), [](const size_t* a, const size_t* b) { return *a < *b; });
  size_t token = 0;
  size_t start = 0;  // the byte where ids[token] starts
  for (size_t* bound : bounds) {
    while (token < ids.size() && start < *bound) start += lengths[ids[token++]];
    *bound = token;
  }
  return out;
}

}  // namespace lg::proxy::openai

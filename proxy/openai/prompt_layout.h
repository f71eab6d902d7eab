// PromptLayout: where a chat prompt's parts lie in its rendered text, so that
// a token position can be named by the message and part it falls in without
// keeping any text: the miss anatomy's "the first missed block starts inside
// the system prompt" (docs/cache.md, "Why requests miss") reads it.
//
// The chat template is an interpreter: it says nothing about where it wrote
// each message. The layout finds them in the rendered text instead, message
// by message in order: a message's content (or, for an assistant message of
// tool calls alone, its first call's arguments) is searched from where the
// previous one ended. A message's part of the prompt runs from the end of
// the previous message's content to the end of its own, so the role markers a
// template writes before a content belong to that content's message. What
// the encoder added to the system prompt (tool definitions, format and
// verbosity instructions) belongs to the system part; the tool definitions
// are a part of their own (when the encoder writes them: a template that
// renders tools itself puts them where it chooses, and they count in the part
// they fall in). A content the template rewrote so that it is not
// found verbatim (a template that strips it, say) ends where its search
// started: the message gets an empty part and the next one absorbs its text.
//
// Positions are bytes of the rendered text; inTokens() turns them into token
// positions by adding the byte lengths of the tokens (the ids encode the
// rendered text exactly, generated ids substituted for a kept reply too,
// proxy/gateway/reply_ids.h).
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "proxy/openai/request_types.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

// The parts of a chat prompt, in the order templates render them.
enum class PromptPart : uint8_t {
  kNone,     // not a chat prompt (a completion), or before the first message
  kSystem,   // the leading system and developer messages
  kTools,    // the tool definitions
  kHistory,  // the conversation up to and including the last assistant message
  kInput,    // what follows it: the new user or tool messages and the generation prompt
};

struct PromptLayout {
  std::vector<size_t> message_end;  // per ChatPrompt message: where its part ends (bytes)
  size_t system_end = 0;            // the leading system messages' part ends here (0: none)
  size_t tools_begin = 0;           // the tool definitions [tools_begin, tools_end); empty: none
  size_t tools_end = 0;
  int32_t last_assistant = -1;      // the last assistant message; -1: none

  bool empty() const { return message_end.empty(); }
};

// A position named by its message and part.
struct PromptPlace {
  int32_t message = -1;  // -1: after the last message (the generation prompt) or no layout
  PromptPart part = PromptPart::kNone;
};

// The layout of `rendered`, the text `prompt` was rendered to. `addendum`
// is what the encoder added to the system prompt and `tools_text` the tool
// definitions it starts with (PromptEncoder::systemAddendum, toolsSystemText).
PromptLayout layOut(const ChatPrompt& prompt, std::string_view rendered, std::string_view addendum,
                    std::string_view tools_text);

PromptPlace placeOf(const PromptLayout& layout, size_t byte);

// "system", "tools", "history", "input"; "none" for kNone.
const char* promptPartName(PromptPart part);

// The byte length of every token's text, made once per tokenizer, so that a
// prompt's token positions map to bytes in one pass of additions.
class TokenLengths {
 public:
  explicit TokenLengths(const text::Tokenizer& tokenizer);
  size_t operator[](int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < lengths_.size() ? lengths_[static_cast<size_t>(id)] : 0;
  }

 private:
  std::vector<uint32_t> lengths_;
};

// `layout` (in bytes) with its positions in tokens of `ids` instead: a token
// belongs to the part its first byte lies in. placeOf() then takes a token
// position.
PromptLayout inTokens(const PromptLayout& layout, const TokenLengths& lengths, std::span<const int32_t> ids);

}  // namespace lg::proxy::openai

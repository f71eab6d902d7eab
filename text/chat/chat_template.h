// ChatTemplate: renders a model's Jinja `chat_template` (tokenizer_config.json)
// the way transformers' apply_chat_template does (Jinja2 with trim_blocks and
// lstrip_blocks), for the DeepSeek V2, V2.5, V3, V3.1 and R1 templates and any
// template using the same constructs.
//
// Templates are parsed once at load; a construct outside the supported subset is
// an Unimplemented error naming it and its line. Rendering never throws and
// never crashes on hostile messages: type errors and missing fields are
// InvalidArgument errors; a render that would exceed ChatRenderOptions' bounds
// on output size, bytes copied or loop iterations is a ResourceExhausted error
// naming the bound, raised as soon as it would be passed: the write or
// allocation that would pass it is not made.
//
// Trust: text written by the template's own literals and the bos/eos token
// variables is marked trusted in the PromptText; everything that came from the
// request (messages, tools, extra variables) is untrusted. See prompt_text.h.
//
// Thread-safety: a parsed ChatTemplate is immutable; render() may run
// concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "text/prompt_text.h"

namespace lg::text {

struct ChatRenderInput {
  const nlohmann::json* messages = nullptr;  // array of {role, content, tool_calls, ...}
  const nlohmann::json* tools = nullptr;     // optional array (OpenAI `tools`)
  const nlohmann::json* extra = nullptr;     // optional object of extra template variables
  bool add_generation_prompt = true;
};

// What a render spent (ChatRenderOptions::stats).
struct ChatRenderStats {
  uint64_t copied_bytes = 0;  // charged to max_copied_bytes
  int64_t loop_iterations = 0;
};

// Bounds on one render's work and memory (docs/chat-template.md, "Limits").
// Every string the template builds, and the rendered prompt, is at most
// max_output_bytes. Every byte a string operation writes (concatenation, `~`,
// filters, join, slicing, split, replace, tojson, the output itself), every
// list item allocated (counted as sizeof(Value), 40 bytes) and every byte
// scanned by a search or comparison is charged to max_copied_bytes. Loop
// iterations of all loops together are at most max_loop_iterations. A
// string extended in a loop (`ns.s = ns.s + x`) is appended in place, so it
// is charged (and costs) the bytes appended, not the whole string each time.
struct ChatRenderOptions {
  size_t max_output_bytes = size_t{8} << 20;       // 8 MiB
  uint64_t max_copied_bytes = uint64_t{64} << 20;  // 64 MiB: 8 x max_output_bytes
  int64_t max_loop_iterations = 250000;
  ChatRenderStats* stats = nullptr;  // optional: what the render spent (also when it failed)
};

class ChatTemplate {
 public:
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Parses template source. bos_token and eos_token are the trusted special-token
  // strings the template may reference.
  static Result<ChatTemplate> parse(std::string_view source, std::string bos_token, std::string eos_token);

  // Reads DIR/tokenizer_config.json: `chat_template` (a string, or a list of
  // {name, template} where "default" is used; DIR/chat_template.jinja, when
  // present, takes precedence as in transformers) and bos_token/eos_token (a
  // string or an AddedToken object).
  static Result<ChatTemplate> loadFromDir(const std::string& dir);

  Result<PromptText> render(const ChatRenderInput& input, const ChatRenderOptions& options = {}) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lg::text

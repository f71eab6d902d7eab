// PromptEncoder: from a parsed request to the token ids the scheduler takes.
//
// Chat Completions and Responses go through one function, encodeChat(): the
// ChatPrompt becomes the JSON that transformers' DeepSeek templates read
// (messages with assistant `tool_calls` as [{id, type: "function", function:
// {name, arguments}}], tool messages with `tool_call_id` and content; tools
// in OpenAI's shape), is rendered by the model's chat template into a
// text::PromptText (template text trusted, request text not) and encoded with
// Tokenizer::encodePrompt, so a client can never forge a control token.
// Completions prompts are plain text (Tokenizer::encode) or ids passed through.
//
// What a template does not do itself, the encoder adds to the system prompt
// (merged into the last system message, so templates that keep only one, as
// R1's, still see it; or a new first system message):
//  - tools, when the template does not render `tools` (the DeepSeek V3, R1 and
//    V3.1 templates do not): each function's name, description and parameter
//    schema, and the exact call format the output parser reads, with the
//    tool_choice and parallel_tool_calls rules;
//  - json_object: an instruction to reply with one JSON object;
//  - verbosity low or high: one line asking for a brief or a thorough reply.
// Reasoning effort (ChatPrompt::reasoning) sets the template's `thinking`
// switch; a template without one reasons always (R1) or never (V3), and an
// effort that asks the other is a 400 naming the field.
// The developer role is sent as system to templates that ignore it.
// TemplateTraits says which applies; probeTemplate() finds out once, at load,
// by rendering small probe conversations.
//
// Thread-safety: immutable after construction; encode* may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/output_parser.h"
#include "proxy/openai/prompt_layout.h"
#include "proxy/openai/request_types.h"
#include "serving/request.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai {

struct TemplateTraits {
  bool renders_developer = false;  // the template shows `developer` messages (else: sent as system)
  bool renders_tools = false;      // the template shows `tools` (else: described in the system prompt)
  ToolCallSyntax tool_call_syntax = ToolCallSyntax::kV3;  // how it renders past calls (and so how the model writes them)
  // The template reads a `thinking` variable that opens (true) or closes
  // (false) the reply's <think> (V3.1's); reasoning effort sets it.
  bool thinking_switch = false;
  // Without a switch: whether every reply starts in reasoning (R1's
  // generation prompt ends in <think>) or none does (V3's).
  bool always_reasons = false;
};

// Renders probe conversations through `chat_template`; a probe that fails to
// render leaves its trait at the default.
TemplateTraits probeTemplate(const text::ChatTemplate& chat_template);

struct EncodedPrompt {
  std::vector<int32_t> ids;
  // The rendered prompt ends inside an open <think> (R1's generation prompt
  // "<｜Assistant｜><think>\n", V3.1 with thinking): the reply starts with reasoning.
  bool reasoning_open = false;
  // Chat prompts: where each message and part lies (for the miss anatomy).
  PromptLayout layout;
};

class PromptEncoder {
 public:
  // Probes the template (probeTemplate).
  PromptEncoder(const text::ChatTemplate& chat_template, const text::Tokenizer& tokenizer,
                text::ChatRenderOptions render_options = {});
  PromptEncoder(const text::ChatTemplate& chat_template, const text::Tokenizer& tokenizer, TemplateTraits traits,
                text::ChatRenderOptions render_options = {});

  const TemplateTraits& traits() const { return traits_; }

  // The conversation through the template. `prompt_param` names the field
  // in errors ("messages" or "input"). With continue_final_message, the text
  // after the final message's content is cut as transformers cuts it (after
  // the last occurrence of that content, trailing whitespace the template
  // dropped not restored); both endings at once, a final message without
  // text, or one the template did not render are a 400.
  ApiResult<EncodedPrompt> encodeChat(const ChatPrompt& prompt, std::string_view prompt_param,
                                      ChatEnding ending = {}) const;

  // One /v1/completions prompt (`index` names it in errors).
  ApiResult<EncodedPrompt> encodeCompletion(const CompletionPrompt& prompt, size_t index, size_t count) const;

  // The template's input, as encodeChat builds it (for tests and the fuzzer).
  nlohmann::json templateMessages(const ChatPrompt& prompt) const;
  nlohmann::json templateTools(const ChatPrompt& prompt) const;  // null when the template gets no tools
  // What encodeChat adds to the system prompt ("" when nothing).
  std::string systemAddendum(const ChatPrompt& prompt) const;

  // How to parse the reply to this prompt.
  OutputParserOptions outputOptions(const ChatPrompt& prompt, const EncodedPrompt& encoded) const;

 private:
  // The tool definitions the encoder writes into the system prompt ("" when
  // the template renders tools itself, or none are offered).
  std::string toolsText(const ChatPrompt& prompt) const;
  std::string systemAddendum(const ChatPrompt& prompt, std::string_view tools_text) const;
  nlohmann::json templateMessages(const ChatPrompt& prompt, const std::string& addendum) const;

  const text::ChatTemplate& template_;
  const text::Tokenizer& tokenizer_;
  TemplateTraits traits_;
  text::ChatRenderOptions render_options_;
};

// The tools section of the system prompt for templates that do not render
// tools: stable text for the same tools, so it caches as a prefix.
std::string toolsSystemText(const std::vector<FunctionTool>& tools, const ToolChoice& choice, bool parallel_calls,
                            ToolCallSyntax syntax);

// The sampling options for a prompt of `prompt_tokens`: the client's
// max_tokens, or the default clamped to what the context leaves (never "until
// the context is full" beyond the default). A prompt that leaves no room, or
// a max_tokens that does not fit, is a 400 context_length_exceeded naming both
// numbers. max_context <= 0: unknown, no clamp (the scheduler still checks).
ApiResult<serving::SamplingOptions> resolveSampling(const SamplingSpec& spec, size_t prompt_tokens,
                                                    int32_t max_context, const ParamNames& params);

}  // namespace lg::proxy::openai

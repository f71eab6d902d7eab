#include "proxy/openai/prompt_encoder.h"

#include <algorithm>
#include <optional>

#include "proxy/openai/sse.h"

namespace lg::proxy::openai {

namespace {

using nlohmann::json;

std::string_view roleName(Role role, const TemplateTraits& traits) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kDeveloper: return traits.renders_developer ? "developer" : "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "user";
}

bool toolsOffered(const ChatPrompt& p) {
  return !p.tools.empty() && p.tool_choice.mode != ToolChoice::Mode::kNone;
}

// The tool_choice and parallel_tool_calls rules, as sentences ("" when none).
std::string toolRules(const ToolChoice& choice, bool parallel_calls) {
  std::string out;
  if (choice.mode == ToolChoice::Mode::kRequired) {
    out += "You must call at least one function in this reply.";
  } else if (choice.mode == ToolChoice::Mode::kFunction) {
    out += "You must call the function " + choice.function + " in this reply.";
  }
  if (!parallel_calls) {
    if (!out.empty()) out += ' ';
    out += "Call at most one function per reply.";
  }
  return out;
}

constexpr std::string_view kJsonObjectInstruction =
    "Reply with a single valid JSON object and nothing else: no code fences and no text before or after it.";
constexpr std::string_view kJsonSchemaInstruction =
    "Reply with a single valid JSON value and nothing else, matching this JSON Schema: ";

ApiError renderError(const Status& status, std::string_view param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      // The template's own words (raise_exception) or which value it could
      // not use; never prompt text beyond what the client sent.
      return invalidRequest(std::string(param), "invalid_value",
                            "the model's chat template cannot render this conversation: " + status.message());
    case StatusCode::kResourceExhausted:
      return ApiError{400, "invalid_request_error", "context_length_exceeded", std::string(param),
                      "the conversation is too large to render: " + status.message(), 0};
    default:
      return internalError();
  }
}

ApiError encodeError(const Status& status, std::string_view param) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return ApiError{400, "invalid_request_error", "context_length_exceeded", std::string(param),
                      "the prompt is too large to tokenize: " + status.message(), 0};
    case StatusCode::kInvalidArgument:
      return invalidRequest(std::string(param), "invalid_value", "the prompt cannot be tokenized: " + status.message());
    default:
      return internalError();
  }
}

bool endsWithOpenThink(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text.ends_with("<think>");
}

bool renders(const text::ChatTemplate& t, const json& messages, const json* tools, std::string_view needle) {
  text::ChatRenderInput input;
  input.messages = &messages;
  input.tools = tools;
  input.add_generation_prompt = true;
  Result<text::PromptText> out = t.render(input);
  return out.isOk() && out->text.find(needle) != std::string::npos;
}

// Whether the generation prompt for `messages` ends inside <think>, with the
// extra template variables `extra` (null: none).
bool opensThinking(const text::ChatTemplate& t, const json& messages, const json* extra) {
  text::ChatRenderInput input;
  input.messages = &messages;
  input.extra = extra;
  input.add_generation_prompt = true;
  Result<text::PromptText> out = t.render(input);
  return out.isOk() && endsWithOpenThink(out->text);
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view lstripped(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view stripped(std::string_view s) {
  s = lstripped(s);
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Where transformers' apply_chat_template(continue_final_message=True) cuts
// the rendered text: after the last occurrence of the final message's
// content, with the content's trailing whitespace when the template kept it
// (Python's strip() also strips non-ASCII spaces; ASCII is what templates
// and clients put at a message's edges). nullopt: the content is not there.
std::optional<size_t> finalMessageEnd(std::string_view rendered, std::string_view content) {
  const std::string_view core = stripped(content);
  const size_t at = rendered.rfind(core);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view kept = lstripped(content);
  if (rendered.substr(at, kept.size()) == content) return at + kept.size();
  return at + core.size();
}

// Cuts a rendered prompt at `end` bytes, trusted ranges included.
void truncatePrompt(text::PromptText& prompt, size_t end) {
  prompt.text.resize(end);
  while (!prompt.trusted.empty() && prompt.trusted.back().begin >= end) prompt.trusted.pop_back();
  if (!prompt.trusted.empty() && prompt.trusted.back().end > end) prompt.trusted.back().end = end;
}

constexpr std::string_view kBriefInstruction = "Keep the reply brief: say only what the request needs.";
constexpr std::string_view kThoroughInstruction = "Give a thorough, detailed reply.";

}  // namespace

TemplateTraits probeTemplate(const text::ChatTemplate& chat_template) {
  TemplateTraits traits;
  const json user = json{{"role", "user"}, {"content", "x"}};
  traits.renders_developer = renders(
      chat_template, json::array({json{{"role", "developer"}, {"content", "lg-probe-developer"}}, user}), nullptr,
      "lg-probe-developer");
  const json tools = json::array({json{
      {"type", "function"},
      {"function", json{{"name", "lg_probe_tool"},
                        {"description", "probe"},
                        {"parameters", json{{"type", "object"}, {"properties", json::object()}}}}}}});
  traits.renders_tools = renders(chat_template, json::array({user}), &tools, "lg_probe_tool");
  const json call_conversation = json::array(
      {user,
       json{{"role", "assistant"},
            {"content", nullptr},
            {"tool_calls", json::array({json{{"id", "call_probe"},
                                             {"type", "function"},
                                             {"function", json{{"name", "lg_probe_fn"}, {"arguments", "{}"}}}}})}},
       json{{"role", "tool"}, {"content", "r"}, {"tool_call_id", "call_probe"}}});
  if (!renders(chat_template, call_conversation, nullptr, "function<｜tool▁sep｜>lg_probe_fn") &&
      renders(chat_template, call_conversation, nullptr, "lg_probe_fn<｜tool▁sep｜>")) {
    traits.tool_call_syntax = ToolCallSyntax::kV31;
  }
  const json thinking_on = json{{"thinking", true}}, thinking_off = json{{"thinking", false}};
  const json one_user = json::array({user});
  traits.thinking_switch = opensThinking(chat_template, one_user, &thinking_on) &&
                           !opensThinking(chat_template, one_user, &thinking_off);
  traits.always_reasons = !traits.thinking_switch && opensThinking(chat_template, one_user, nullptr);
  return traits;
}

std::string toolsSystemText(const std::vector<FunctionTool>& tools, const ToolChoice& choice, bool parallel_calls,
                            ToolCallSyntax syntax) {
  std::string out = "## Tools\n\nYou can call the following functions.\n";
  const std::string* ns = nullptr;  // the namespace whose functions are being listed
  for (const FunctionTool& tool : tools) {
    if (!tool.origin.ns.empty() && (ns == nullptr || *ns != tool.origin.ns)) {
      // A namespace's description once, before the first of its functions.
      if (!tool.origin.ns_description.empty()) {
        out += "\nThe functions " + tool.origin.ns + ".*: " + tool.origin.ns_description + "\n";
      }
    }
    ns = &tool.origin.ns;
    out += "\n### " + tool.name + "\n";
    if (!tool.description.empty()) out += "Description: " + tool.description + "\n";
    out += "Parameters: " + (tool.parameters.is_null() ? std::string("{}") : jsonText(tool.parameters)) + "\n";
  }
  out += "\nTo call functions, end your reply with the calls in exactly this format:\n";
  if (syntax == ToolCallSyntax::kV31) {
    out +=
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>FUNCTION_NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>"
        "<｜tool▁call▁begin｜>FUNCTION_NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜><｜tool▁calls▁end｜>\n";
  } else {
    out +=
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>FUNCTION_NAME\n"
        "```json\nARGUMENTS\n```<｜tool▁call▁end｜>\n"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>FUNCTION_NAME\n"
        "```json\nARGUMENTS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\n";
  }
  out +=
      "ARGUMENTS is one JSON object that follows the function's parameters schema. Call functions only when they "
      "help; their results come back in the next message.";
  if (std::string rules = toolRules(choice, parallel_calls); !rules.empty()) out += "\n" + rules;
  return out;
}

PromptEncoder::PromptEncoder(const text::ChatTemplate& chat_template, const text::Tokenizer& tokenizer,
                             text::ChatRenderOptions render_options)
    : PromptEncoder(chat_template, tokenizer, probeTemplate(chat_template), render_options) {}

PromptEncoder::PromptEncoder(const text::ChatTemplate& chat_template, const text::Tokenizer& tokenizer,
                             TemplateTraits traits, text::ChatRenderOptions render_options)
    : template_(chat_template), tokenizer_(tokenizer), traits_(traits), render_options_(render_options) {
  render_options_.stats = nullptr;  // shared by concurrent renders: no per-render output
}

std::string PromptEncoder::toolsText(const ChatPrompt& prompt) const {
  if (!toolsOffered(prompt) || traits_.renders_tools) return {};
  return toolsSystemText(prompt.tools, prompt.tool_choice, prompt.parallel_tool_calls, traits_.tool_call_syntax);
}

std::string PromptEncoder::systemAddendum(const ChatPrompt& prompt) const {
  return systemAddendum(prompt, toolsText(prompt));
}

std::string PromptEncoder::systemAddendum(const ChatPrompt& prompt, std::string_view tools_text) const {
  std::string out;
  auto add = [&](std::string_view part) {
    if (part.empty()) return;
    if (!out.empty()) out += "\n\n";
    out += part;
  };
  // The tool definitions come first: the prompt layout finds them there.
  add(tools_text);
  if (toolsOffered(prompt) && traits_.renders_tools) add(toolRules(prompt.tool_choice, prompt.parallel_tool_calls));
  // The format is enforced by decoding; the instruction tells the model what
  // it is writing, so that its words fit the grammar's choices.
  switch (prompt.response_format.kind) {
    case ResponseFormat::Kind::kJsonObject:
      add(kJsonObjectInstruction);
      break;
    case ResponseFormat::Kind::kJsonSchema:
      add(std::string(kJsonSchemaInstruction) + prompt.response_format.schema.dump());
      break;
    default:
      break;
  }
  if (prompt.verbosity == Verbosity::kLow) add(kBriefInstruction);
  if (prompt.verbosity == Verbosity::kHigh) add(kThoroughInstruction);
  return out;
}

json PromptEncoder::templateMessages(const ChatPrompt& prompt) const {
  return templateMessages(prompt, systemAddendum(prompt));
}

json PromptEncoder::templateMessages(const ChatPrompt& prompt, const std::string& addendum) const {
  json messages = json::array();
  for (const ChatMessage& m : prompt.messages) {
    json j = json::object();
    j["role"] = roleName(m.role, traits_);
    j["content"] = m.content ? json(*m.content) : json(nullptr);
    if (m.role == Role::kAssistant && !m.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& c : m.tool_calls) {
        calls.push_back(json{{"id", c.id},
                             {"type", "function"},
                             {"function", json{{"name", c.name}, {"arguments", c.arguments}}}});
      }
      j["tool_calls"] = std::move(calls);
    }
    if (m.role == Role::kTool) j["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(j));
  }
  if (!addendum.empty()) {
    auto last_system = std::find_if(messages.rbegin(), messages.rend(),
                                    [](const json& j) { return j["role"] == "system"; });
    if (last_system != messages.rend()) {
      json& content = (*last_system)["content"];
      const bool empty = !content.is_string() || content.get_ref<const std::string&>().empty();
      content = empty ? json(addendum) : json(content.get<std::string>() + "\n\n" + addendum);
    } else {
      messages.insert(messages.begin(), json{{"role", "system"}, {"content", addendum}});
    }
  }
  return messages;
}

json PromptEncoder::templateTools(const ChatPrompt& prompt) const {
  if (!traits_.renders_tools || !toolsOffered(prompt)) return nullptr;
  json tools = json::array();
  for (const FunctionTool& t : prompt.tools) {
    json f = json{{"name", t.name}};
    if (!t.description.empty()) f["description"] = t.description;
    if (!t.parameters.is_null()) f["parameters"] = t.parameters;
    tools.push_back(json{{"type", "function"}, {"function", std::move(f)}});
  }
  return tools;
}

ApiResult<EncodedPrompt> PromptEncoder::encodeChat(const ChatPrompt& prompt, std::string_view prompt_param,
                                                   ChatEnding ending) const {
  // Building the input copies strings and the tools' schemas; everything
  // that can fail on request data reports a Status, and the JSON values built
  // here are well-formed by construction, so nothing below throws.
  if (ending.continue_final_message && ending.add_generation_prompt) {
    // As vLLM refuses it: the final message cannot both stay open and be
    // followed by the assistant's new turn.
    return invalidRequest("continue_final_message", "invalid_value",
                          "continue_final_message and add_generation_prompt cannot both be true");
  }
  json extra = nullptr;
  if (prompt.reasoning) {
    if (traits_.thinking_switch) {
      extra = json{{"thinking", *prompt.reasoning}};
    } else if (*prompt.reasoning != traits_.always_reasons) {
      // Nothing in the prompt turns this model's reasoning on or off: answer
      // as OpenAI answers an effort a model cannot honour, with a 400.
      return invalidRequest(prompt.reasoning_param, "unsupported_value",
                            traits_.always_reasons
                                ? prompt.reasoning_param + ": this model always reasons (its chat template has no "
                                                           "thinking switch); send an effort from 'low' up, or omit it"
                                : prompt.reasoning_param + ": this model does not reason (its chat template has no "
                                                           "thinking switch); send 'none' or 'minimal', or omit it");
    }
  }
  const std::string tools_text = toolsText(prompt);
  const std::string addendum = systemAddendum(prompt, tools_text);
  const json messages = templateMessages(prompt, addendum);
  const json tools = templateTools(prompt);
  text::ChatRenderInput input;
  input.messages = &messages;
  input.tools = tools.is_null() ? nullptr : &tools;
  input.extra = extra.is_null() ? nullptr : &extra;
  input.add_generation_prompt = ending.add_generation_prompt;
  Result<text::PromptText> rendered = template_.render(input, render_options_);
  if (!rendered.isOk()) return renderError(rendered.status(), prompt_param);
  if (ending.continue_final_message) {
    // The template's input, not the request's message: a final system
    // message carries the addendum there, and that is what was rendered.
    const json& content = messages.back()["content"];
    const std::string param = std::string(prompt_param) + "[" + std::to_string(prompt.messages.size() - 1) + "]";
    if (!content.is_string()) {
      return invalidRequest(param, "invalid_value", "continue_final_message needs a final message with text content");
    }
    const std::optional<size_t> end = finalMessageEnd(rendered->text, content.get_ref<const std::string&>());
    if (!end) {
      return invalidRequest(param, "invalid_value",
                            "continue_final_message: the chat template did not render the final message's content");
    }
    truncatePrompt(*rendered, *end);
  }
  Result<std::vector<int32_t>> ids = tokenizer_.encodePrompt(*rendered);
  if (!ids.isOk()) return encodeError(ids.status(), prompt_param);
  EncodedPrompt out;
  out.ids = std::move(*ids);
  out.reasoning_open = endsWithOpenThink(rendered->text);
  out.layout = layOut(prompt, rendered->text, addendum, tools_text);
  return out;
}

ApiResult<EncodedPrompt> PromptEncoder::encodeCompletion(const CompletionPrompt& prompt, size_t index,
                                                         size_t count) const {
  EncodedPrompt out;
  if (prompt.is_ids) {
    out.ids = prompt.ids;  // the scheduler checks them against the model's vocabulary
    return out;
  }
  const std::string param = count == 1 ? std::string("prompt") : "prompt[" + std::to_string(index) + "]";
  Result<std::vector<int32_t>> ids = tokenizer_.encode(prompt.text);
  if (!ids.isOk()) return encodeError(ids.status(), param);
  out.ids = std::move(*ids);
  return out;
}

OutputParserOptions PromptEncoder::outputOptions(const ChatPrompt& prompt, const EncodedPrompt& encoded) const {
  OutputParserOptions o;
  o.reasoning = true;
  o.starts_in_reasoning = encoded.reasoning_open;
  o.tool_calls = toolsOffered(prompt);
  // The smaller of parallel_tool_calls' limit (one) and max_tool_calls; -1: none.
  int32_t limit = prompt.parallel_tool_calls ? -1 : 1;
  if (prompt.max_tool_calls >= 0 && (limit < 0 || prompt.max_tool_calls < limit)) limit = prompt.max_tool_calls;
  o.max_tool_calls = limit;
  o.syntax = traits_.tool_call_syntax;
  return o;
}

ApiResult<serving::SamplingOptions> resolveSampling(const SamplingSpec& spec, size_t prompt_tokens,
                                                    int32_t max_context, const ParamNames& params) {
  serving::SamplingOptions out = spec.options;
  const auto prompt = static_cast<int64_t>(prompt_tokens);
  if (spec.requested_max_tokens) {
    out.max_tokens = *spec.requested_max_tokens;
    if (max_context > 0 && prompt + out.max_tokens > max_context) {
      return contextLengthExceeded(std::string(params.prompt), prompt, out.max_tokens, max_context);
    }
    return out;
  }
  int64_t cap = spec.default_max_tokens;
  if (max_context > 0) {
    const int64_t room = max_context - prompt;
    if (room <= 0) return contextLengthExceeded(std::string(params.prompt), prompt, 1, max_context);
    cap = std::min(cap, room);
  }
  out.max_tokens = static_cast<int32_t>(std::max<int64_t>(cap, 1));
  return out;
}

}  // namespace lg::proxy::openai

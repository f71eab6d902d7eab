#include "proxy/openai/chat_request.h"

#include <nlohmann/json.hpp>

#include "proxy/openai/common_fields.h"
#include "proxy/openai/json_fields.h"
#include "proxy/openai/parse_common.h"

namespace lg::proxy::openai {

namespace {

using detail::FieldReader;
using detail::fieldPath;
using detail::indexPath;
using detail::wrongType;
using nlohmann::json;

ApiResult<Role> parseRole(const std::string& role, const std::string& param) {
  if (role == "system") return Role::kSystem;
  if (role == "developer") return Role::kDeveloper;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool") return Role::kTool;
  if (role == "function") {
    return invalidRequest(param, "unsupported_value",
                          "the deprecated 'function' role is not supported; send tool results as 'tool' messages");
  }
  return invalidRequest(param, "invalid_value",
                        param + " must be one of 'system', 'developer', 'user', 'assistant', 'tool', got '" + role +
                            "'");
}

ApiResult<std::vector<ToolCall>> parseToolCalls(const json& calls, const std::string& param) {
  if (!calls.is_array()) return wrongType(param, "an array", calls);
  std::vector<ToolCall> out;
  out.reserve(calls.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string call_path = indexPath(param, k);
    const json& call = calls[k];
    if (!call.is_object()) return wrongType(call_path, "an object", call);
    FieldReader r(call, call_path);
    ToolCall tc;
    std::string type = "function";
    r.string("type", type);
    if (!r.string("id", tc.id) && !r.failed()) r.missing("id");
    if (r.failed()) return r.takeError();
    if (type != "function") {
      return invalidRequest(r.path("type"), "unsupported_value",
                            r.path("type") + " must be 'function', got '" + type + "'");
    }
    const json* function = r.find("function");
    if (function == nullptr) {
      r.missing("function");
      return r.takeError();
    }
    if (!function->is_object()) return wrongType(r.path("function"), "an object", *function);
    FieldReader f(*function, r.path("function"));
    if (!f.string("name", tc.name) && !f.failed()) f.missing("name");
    if (!f.string("arguments", tc.arguments) && !f.failed()) f.missing("arguments");
    if (f.failed()) return f.takeError();
    out.push_back(std::move(tc));
  }
  return out;
}

ApiResult<ChatMessage> parseMessage(const json& m, const std::string& path) {
  if (!m.is_object()) return wrongType(path, "an object", m);
  FieldReader r(m, path);
  std::string role_name;
  if (!r.string("role", role_name) && !r.failed()) r.missing("role");
  if (r.failed()) return r.takeError();
  ApiResult<Role> role = parseRole(role_name, r.path("role"));
  if (!role) return role.error();

  ChatMessage msg;
  msg.role = *role;
  if (bool prefix = false; r.boolean("prefix", prefix) && prefix) {
    return invalidRequest(r.path("prefix"), "unsupported_parameter",
                          "chat prefix completion (an assistant message with prefix: true) is not supported");
  }
  if (r.failed()) return r.takeError();

  detail::TextPartTypes parts{{"text"}, msg.role == Role::kAssistant};
  if (const json* content = r.find("content")) {
    ApiResult<std::string> text = detail::readTextContent(*content, r.path("content"), parts);
    if (!text) return text.error();
    msg.content = std::move(*text);
  }

  if (msg.role == Role::kAssistant) {
    if (const json* calls = r.find("tool_calls")) {
      ApiResult<std::vector<ToolCall>> tc = parseToolCalls(*calls, r.path("tool_calls"));
      if (!tc) return tc.error();
      msg.tool_calls = std::move(*tc);
    }
    // The DeepSeek templates render tool calls only when the content is null
    // (V3, R1), and OpenAI clients send "" beside tool calls: both mean none.
    if (!msg.tool_calls.empty() && msg.content && msg.content->empty()) msg.content.reset();
    // An assistant turn with neither is an empty reply, not a missing field.
    if (msg.tool_calls.empty() && !msg.content) msg.content.emplace();
  } else if (!msg.content) {
    r.missing("content");
    return r.takeError();
  }

  if (msg.role == Role::kTool) {
    if (!r.string("tool_call_id", msg.tool_call_id) && !r.failed()) r.missing("tool_call_id");
  }
  std::string name;
  r.string("name", name);  // a participant name: accepted, not rendered by the DeepSeek templates
  if (r.failed()) return r.takeError();
  return msg;
}

// Every field of OpenAI's CreateChatCompletionRequest, and the extensions
// read here (top_k, vLLM's sampling and structured-output fields). Each is
// read below and has an effect, or is refused when set; web_search_options
// (a hosted tool) is skipped and named in a header.
constexpr std::string_view kKnownFields[] = {
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "moderation", "n", "parallel_tool_calls",
    "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "web_search_options",
    // extensions
    "top_k", "repetition_penalty", "min_p", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar"};

ApiResult<ToolChoice> parseToolChoice(const json& v, const std::string& param) {
  ToolChoice choice;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "auto") return choice;
    if (s == "none") choice.mode = ToolChoice::Mode::kNone;
    else if (s == "required") choice.mode = ToolChoice::Mode::kRequired;
    else {
      return invalidRequest(param, "invalid_value",
                            param + " must be 'none', 'auto', 'required' or a function, got '" + s + "'");
    }
    return choice;
  }
  if (!v.is_object()) return wrongType(param, "a string or an object", v);
  FieldReader r(v, param);
  std::string type;
  if (!r.string("type", type) && !r.failed()) r.missing("type");
  if (r.failed()) return r.takeError();
  if (type != "function") {
    return invalidRequest(r.path("type"), "unsupported_value",
                          r.path("type") + " must be 'function', got '" + type + "'");
  }
  const json* function = r.find("function");
  if (function == nullptr) {
    r.missing("function");
    return r.takeError();
  }
  if (!function->is_object()) return wrongType(r.path("function"), "an object", *function);
  FieldReader f(*function, r.path("function"));
  if (!f.string("name", choice.function) && !f.failed()) f.missing("name");
  if (f.failed()) return f.takeError();
  choice.mode = ToolChoice::Mode::kFunction;
  return choice;
}

}  // namespace

ApiResult<ParsedChatRequest> parseChatCompletionRequest(const json& body, const ParseLimits& limits) {
  if (!body.is_object()) return invalidJsonBody("the request body must be a JSON object, got " +
                                                std::string(detail::typeName(body)));
  if (auto error = detail::refuseUnknownFields(body, kKnownFields)) return *error;
  FieldReader r(body, "");
  ParsedChatRequest out;
  out.sampling.default_max_tokens = limits.default_max_tokens;
  if (!r.string("model", out.model) && !r.failed()) r.missing("model");
  if (r.failed()) return r.takeError();

  // What this server cannot do, each refused when set rather than answered
  // without it.
  const std::pair<std::string_view, std::string_view> refused[] = {
      {"functions", "the deprecated functions API is not served; send the functions as tools"},
      {"function_call", "the deprecated functions API is not served; send tool_choice"},
      {"prediction", "predicted outputs (speculative decoding from a given text) are not implemented"},
      {"moderation", "no moderation runs here"},
      {"metadata", "chat completions are not stored here, so there is nothing to attach metadata to (stored "
                   "Responses keep theirs)"},
  };
  for (const auto& [key, why] : refused) detail::refuseIfSet(r, key, why);
  if (bool store = false; r.boolean("store", store) && store) {
    r.fail(invalidRequest("store", "unsupported_value",
                          "chat completions are not stored by this server; send store: false or omit it (the "
                          "Responses API stores responses)"));
  }
  if (r.failed()) return r.takeError();

  // messages
  const json* messages = r.find("messages");
  if (messages == nullptr) {
    r.missing("messages");
    return r.takeError();
  }
  if (!messages->is_array()) return wrongType("messages", "an array", *messages);
  if (messages->empty()) {
    return invalidRequest("messages", "invalid_value", "messages must contain at least one message");
  }
  if (static_cast<int64_t>(messages->size()) > limits.max_messages) {
    return invalidRequest("messages", "invalid_value",
                          "messages may hold at most " + std::to_string(limits.max_messages) + " messages, got " +
                              std::to_string(messages->size()));
  }
  out.prompt.messages.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    ApiResult<ChatMessage> m = parseMessage((*messages)[i], indexPath("messages", i));
    if (!m) return m.error();
    out.prompt.messages.push_back(std::move(*m));
  }

  // tools and tool_choice
  if (const json* tools = r.find("tools")) {
    if (!tools->is_array()) return wrongType("tools", "an array", *tools);
    if (static_cast<int64_t>(tools->size()) > limits.max_tools) {
      return invalidRequest("tools", "invalid_value",
                            "tools may hold at most " + std::to_string(limits.max_tools) + " tools, got " +
                                std::to_string(tools->size()));
    }
    for (size_t k = 0; k < tools->size(); ++k) {
      const std::string tool_path = indexPath("tools", k);
      const json& tool = (*tools)[k];
      if (!tool.is_object()) return wrongType(tool_path, "an object", tool);
      FieldReader t(tool, tool_path);
      std::string type;
      if (!t.string("type", type) && !t.failed()) t.missing("type");
      if (t.failed()) return t.takeError();
      if (type != "function") {
        return invalidRequest(t.path("type"), "unsupported_value",
                              t.path("type") + " must be 'function' (the only tool type for chat completions here), "
                                               "got '" + type + "'");
      }
      const json* function = t.find("function");
      if (function == nullptr) {
        t.missing("function");
        return t.takeError();
      }
      ApiResult<FunctionTool> f = detail::readFunction(*function, t.path("function"));
      if (!f) return f.error();
      out.prompt.tools.push_back(std::move(*f));
    }
  }
  if (const json* choice = r.find("tool_choice")) {
    ApiResult<ToolChoice> c = parseToolChoice(*choice, "tool_choice");
    if (!c) return c.error();
    out.prompt.tool_choice = std::move(*c);
  }
  if (auto error = detail::checkToolChoice(out.prompt.tool_choice, out.prompt.tools, "tool_choice")) return *error;
  r.boolean("parallel_tool_calls", out.prompt.parallel_tool_calls);

  if (const json* format = r.find("response_format"); format != nullptr && !format->is_null()) {
    ApiResult<ResponseFormat> f = detail::readResponseFormat(*format, "response_format", false);
    if (!f) return f.error();
    out.prompt.response_format = std::move(*f);
  }
  // vLLM's spellings (structured_outputs, guided_*), one constraint at most.
  ApiResult<std::optional<ResponseFormat>> vllm = detail::readStructuredOutputs(r);
  if (!vllm) return vllm.error();
  if (*vllm) {
    if (out.prompt.response_format.kind != ResponseFormat::Kind::kText) {
      return invalidRequest((*vllm)->param, "invalid_value",
                            (*vllm)->param + " and response_format both constrain the output; send one");
    }
    out.prompt.response_format = std::move(**vllm);
  }

  // Output.
  r.boolean("stream", out.stream);
  detail::readStreamOptions(r, out.stream, &out.include_usage);  // include_usage only counts when streaming, as OpenAI
  int64_t n = 1;
  if (r.integer("n", n, 1, 128)) out.n = static_cast<int32_t>(n);
  if (const json* modalities = r.find("modalities")) {
    if (!modalities->is_array()) return wrongType("modalities", "an array", *modalities);
    for (size_t k = 0; k < modalities->size(); ++k) {
      const json& m = (*modalities)[k];
      if (!m.is_string() || m.get_ref<const std::string&>() != "text") {
        return invalidRequest(indexPath("modalities", k), "unsupported_value",
                              "only the 'text' output modality is supported");
      }
    }
  }
  if (r.find("audio") != nullptr) {
    return invalidRequest("audio", "unsupported_parameter", "audio output is not supported");
  }

  // Sampling.
  detail::readSampling(r, out.sampling);
  detail::readStop(r, limits, out.sampling.options.stop);
  detail::readMaxTokens(r, "max_tokens", 1, out.sampling);
  if (r.find("max_completion_tokens") != nullptr) {
    // The newer name wins when both are sent; errors then name it.
    detail::readMaxTokens(r, "max_completion_tokens", 1, out.sampling);
    out.params.max_tokens = "max_completion_tokens";
  }
  bool logprobs = false;
  r.boolean("logprobs", logprobs);
  int64_t top = 0;
  const bool has_top = r.integer("top_logprobs", top, 0, 20);
  if (r.failed()) return r.takeError();
  if (has_top && !logprobs) {
    return invalidRequest("top_logprobs", "invalid_value", "top_logprobs requires logprobs to be true");
  }
  out.sampling.options.logprobs = logprobs;
  out.sampling.options.top_logprobs = static_cast<int32_t>(top);

  if (r.failed()) return r.takeError();

  if (const json* effort = r.find("reasoning_effort")) {
    if (auto error = detail::readReasoningEffort(*effort, "reasoning_effort", out.prompt)) return *error;
  }
  if (const json* verbosity = r.find("verbosity")) {
    if (auto error = detail::readVerbosity(*verbosity, "verbosity", out.prompt)) return *error;
  }
  // A hosted tool: the search runs at OpenAI, not in a model. Skipped, and
  // named in a response header, as the Responses API's hosted tools are.
  if (const json* search = r.find("web_search_options")) {
    if (!search->is_object()) return wrongType("web_search_options", "an object", *search);
    out.hosted_tools.emplace_back("web_search");
  }
  detail::readIdentifiers(r);
  detail::readServiceTier(r);
  detail::readPromptCacheHints(r);
  if (r.failed()) return r.takeError();
  return out;
}

ApiResult<ParsedChatRenderRequest> parseChatRenderRequest(json body, const ParseLimits& limits) {
  ParsedChatRenderRequest out;
  if (body.is_object()) {  // anything else gets the chat parser's 400 below
    FieldReader r(body, "");
    r.boolean("add_generation_prompt", out.ending.add_generation_prompt);
    r.boolean("continue_final_message", out.ending.continue_final_message);
    detail::refuseIfSet(r, "chat_template",
                        "prompts are rendered with the model's own chat template, as the chat endpoint renders them");
    detail::refuseIfSet(r, "chat_template_kwargs",
                        "the chat endpoint passes no extra template variables (reasoning_effort sets the thinking "
                        "switch), so its render takes none either");
    detail::refuseIfSet(r, "documents", "the chat template is given no documents here");
    if (r.failed()) return r.takeError();
    for (const char* key :
         {"add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs", "documents"}) {
      body.erase(key);
    }
  }
  auto chat = parseChatCompletionRequest(body, limits);
  if (!chat) return chat.error();
  out.chat = std::move(*chat);
  return out;
}

}  // namespace lg::proxy::openai

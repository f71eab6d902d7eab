#include "proxy/openai/responses_request.h"

#include <algorithm>

#include "proxy/openai/common_fields.h"
#include "proxy/openai/json_fields.h"
#include "proxy/openai/parse_common.h"

namespace lg::proxy::openai {

namespace {

using detail::FieldReader;
using detail::indexPath;
using detail::wrongType;
using nlohmann::json;

void addOnce(std::vector<std::string>& list, std::string value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(std::move(value));
}

// Items a hosted tool (or a tool this server does not offer) leaves in a
// conversation. Their tools are not in the prompt, so neither are they.
bool isHostedItem(std::string_view type) {
  static constexpr std::string_view kHosted[] = {
      "web_search_call",      "file_search_call",        "computer_call",         "computer_call_output",
      "code_interpreter_call", "image_generation_call",  "local_shell_call",      "local_shell_call_output",
      "shell_call",           "shell_call_output",       "apply_patch_call",      "apply_patch_call_output",
      "mcp_call",             "mcp_list_tools",          "mcp_approval_request",  "mcp_approval_response"};
  return std::find(std::begin(kHosted), std::end(kHosted), type) != std::end(kHosted);
}

// A custom tool's input as the model writes it: the one argument of the
// function it is offered as (customTool).
std::string customArguments(const std::string& input) { return json{{"input", input}}.dump(); }

// A custom tool {type: "custom", name, description, format}: offered to the
// model as a strict function of one string argument, {"input": TEXT}.
// format {type: "text"} (the default) leaves TEXT free; {type: "grammar",
// syntax: "regex", definition} makes the whole of TEXT match the regular
// expression, enforced by constrained decoding as a JSON Schema `pattern`
// (docs/grammar.md has the subset); syntax "lark" is refused: no Lark
// grammar engine here.
ApiResult<FunctionTool> readCustomTool(const json& tool, const std::string& path, ToolOrigin origin) {
  FieldReader r(tool, path);
  FunctionTool out;
  std::string name;
  if (!r.string("name", name) && !r.failed()) r.missing("name");
  r.string("description", out.description);
  if (r.failed()) return r.takeError();
  if (auto error = detail::checkFunctionName(name, r.path("name"))) return *error;
  json input = json{{"type", "string"}};
  if (const json* format = r.find("format")) {
    if (!format->is_object()) return wrongType(r.path("format"), "an object", *format);
    FieldReader f(*format, r.path("format"));
    std::string type, syntax, definition;
    if (!f.string("type", type) && !f.failed()) f.missing("type");
    if (f.failed()) return f.takeError();
    if (type == "grammar") {
      if (!f.string("syntax", syntax) && !f.failed()) f.missing("syntax");
      if (!f.string("definition", definition) && !f.failed()) f.missing("definition");
      if (f.failed()) return f.takeError();
      if (syntax == "lark") {
        return invalidRequest(f.path("syntax"), "unsupported_value",
                              "Lark grammars are not supported by this server (it has no Lark engine); send a "
                              "'regex' grammar or a 'text' format");
      }
      if (syntax != "regex") {
        return invalidRequest(f.path("syntax"), "invalid_value",
                              f.path("syntax") + " must be 'lark' or 'regex', got '" + syntax + "'");
      }
      // The whole input matches (a JSON Schema pattern matches anywhere
      // unless anchored); anchors the definition has at its ends are kept
      // as the wrapper's.
      std::string_view re = definition;
      if (re.starts_with('^')) re.remove_prefix(1);
      if (re.ends_with('$')) {
        size_t backslashes = 0;
        while (backslashes + 1 < re.size() && re[re.size() - 2 - backslashes] == '\\') ++backslashes;
        if (backslashes % 2 == 0) re.remove_suffix(1);
      }
      input["pattern"] = "^(?:" + std::string(re) + ")$";
    } else if (type != "text") {
      return invalidRequest(f.path("type"), "invalid_value",
                            f.path("type") + " must be 'text' or 'grammar', got '" + type + "'");
    }
  }
  out.parameters = json{{"type", "object"},
                        {"properties", {{"input", std::move(input)}}},
                        {"required", json::array({"input"})},
                        {"additionalProperties", false}};
  // Strict whatever the format: the arguments are then always one JSON
  // string the input can be read from.
  out.strict = true;
  out.name = origin.ns.empty() ? name : origin.ns + "." + name;
  out.origin = std::move(origin);
  out.origin.custom = true;
  out.param = path;
  return out;
}

// A namespace tool {type: "namespace", name, description, tools: [function
// or custom tools]} (Codex CLI sends one): each of its tools is offered as
// "NS.NAME". Its functions are strict only when they say so: OpenAI's
// "strict when the schema is compatible" would turn a schema the grammar
// engine cannot enforce into a 400 here.
std::optional<ApiError> readNamespace(const json& tool, const std::string& path, std::vector<FunctionTool>& out) {
  FieldReader r(tool, path);
  ToolOrigin origin;
  if (!r.string("name", origin.ns) && !r.failed()) r.missing("name");
  r.string("description", origin.ns_description);
  if (r.failed()) return r.takeError();
  if (auto error = detail::checkFunctionName(origin.ns, r.path("name"))) return error;
  const json* tools = r.find("tools");
  if (tools == nullptr) {
    r.missing("tools");
    return r.takeError();
  }
  if (!tools->is_array()) return wrongType(r.path("tools"), "an array", *tools);
  for (size_t k = 0; k < tools->size(); ++k) {
    const std::string inner = indexPath(r.path("tools"), k);
    const json& t = (*tools)[k];
    if (!t.is_object()) return wrongType(inner, "an object", t);
    FieldReader tr(t, inner);
    std::string type;
    if (!tr.string("type", type) && !tr.failed()) tr.missing("type");
    if (tr.failed()) return tr.takeError();
    if (type == "function") {
      ApiResult<FunctionTool> f = detail::readFunction(t, inner);
      if (!f) return f.error();
      f->name = origin.ns + "." + f->name;
      f->origin = origin;
      f->param = inner;
      out.push_back(std::move(*f));
    } else if (type == "custom") {
      ApiResult<FunctionTool> c = readCustomTool(t, inner, origin);
      if (!c) return c.error();
      out.push_back(std::move(*c));
    } else {
      return invalidRequest(tr.path("type"), "invalid_value",
                            tr.path("type") + " must be 'function' or 'custom' in a namespace, got '" + type + "'");
    }
  }
  return std::nullopt;
}

const detail::TextPartTypes kInputParts{{"input_text", "output_text", "text"}, false};
const detail::TextPartTypes kAssistantParts{{"output_text", "input_text", "text"}, true};

ApiResult<ChatMessage> parseMessageItem(const json& item, const std::string& path) {
  FieldReader r(item, path);
  std::string role;
  if (!r.string("role", role) && !r.failed()) r.missing("role");
  if (r.failed()) return r.takeError();
  ChatMessage msg;
  if (role == "user") msg.role = Role::kUser;
  else if (role == "system") msg.role = Role::kSystem;
  else if (role == "developer") msg.role = Role::kDeveloper;
  else if (role == "assistant") msg.role = Role::kAssistant;
  else {
    return invalidRequest(r.path("role"), "invalid_value",
                          r.path("role") + " must be 'user', 'system', 'developer' or 'assistant', got '" + role +
                              "'");
  }
  const json* content = r.find("content");
  if (content == nullptr) {
    r.missing("content");
    return r.takeError();
  }
  ApiResult<std::string> text = detail::readTextContent(
      *content, r.path("content"), msg.role == Role::kAssistant ? kAssistantParts : kInputParts);
  if (!text) return text.error();
  msg.content = std::move(*text);
  return msg;
}

// function_call {call_id, name, arguments} or custom_tool_call {call_id, name,
// input}, either with the `namespace` of a namespace tool's function. Written
// as the model writes such a call (the tools' names and arguments as
// offered to it), so that a conversation sent back renders the tokens the
// reply was made of: "NS.NAME", and a custom tool's input as {"input": TEXT}.
ApiResult<ToolCall> parseCallItem(const json& item, const std::string& path, bool custom) {
  FieldReader r(item, path);
  ToolCall call;
  std::string ns;
  const std::string_view arguments_key = custom ? "input" : "arguments";
  if (!r.string("call_id", call.id) && !r.failed()) r.missing("call_id");
  if (!r.string("name", call.name) && !r.failed()) r.missing("name");
  if (!r.string(arguments_key, call.arguments) && !r.failed()) r.missing(arguments_key);
  r.string("namespace", ns);
  if (r.failed()) return r.takeError();
  if (!ns.empty()) call.name = ns + "." + call.name;
  if (custom) call.arguments = customArguments(call.arguments);
  return call;
}

ApiResult<ChatMessage> parseCallOutputItem(const json& item, const std::string& path) {
  FieldReader r(item, path);
  ChatMessage msg;
  msg.role = Role::kTool;
  if (!r.string("call_id", msg.tool_call_id) && !r.failed()) r.missing("call_id");
  if (r.failed()) return r.takeError();
  const json* output = r.find("output");
  if (output == nullptr) {
    r.missing("output");
    return r.takeError();
  }
  ApiResult<std::string> text = detail::readTextContent(*output, r.path("output"), kInputParts);
  if (!text) return text.error();
  msg.content = std::move(*text);
  return msg;
}

// Appends a tool call to the conversation: consecutive calls (a reply's
// parallel calls) form one assistant message, as in Chat Completions.
void appendCall(std::vector<ChatMessage>& messages, ToolCall call) {
  if (messages.empty() || messages.back().role != Role::kAssistant || messages.back().tool_calls.empty()) {
    ChatMessage m;
    m.role = Role::kAssistant;
    messages.push_back(std::move(m));
  }
  messages.back().tool_calls.push_back(std::move(call));
}

ApiResult<std::vector<ChatMessage>> parseInput(const json& input, const ParseLimits& limits,
                                               std::vector<std::string>& hosted) {
  std::vector<ChatMessage> messages;
  if (input.is_string()) {
    ChatMessage m;
    m.role = Role::kUser;
    m.content = input.get<std::string>();
    messages.push_back(std::move(m));
    return messages;
  }
  if (!input.is_array()) return wrongType("input", "a string or an array of input items", input);
  if (static_cast<int64_t>(input.size()) > limits.max_messages) {
    return invalidRequest("input", "invalid_value",
                          "input may hold at most " + std::to_string(limits.max_messages) + " items, got " +
                              std::to_string(input.size()));
  }
  messages.reserve(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string path = indexPath("input", i);
    if (!item.is_object()) return wrongType(path, "an object", item);
    FieldReader r(item, path);
    std::string type = "message";  // an "easy input message" has a role and no type
    r.string("type", type);
    if (r.failed()) return r.takeError();
    if (type == "message") {
      ApiResult<ChatMessage> m = parseMessageItem(item, path);
      if (!m) return m.error();
      messages.push_back(std::move(*m));
    } else if (type == "function_call" || type == "custom_tool_call") {
      ApiResult<ToolCall> call = parseCallItem(item, path, type == "custom_tool_call");
      if (!call) return call.error();
      appendCall(messages, std::move(*call));
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      ApiResult<ChatMessage> m = parseCallOutputItem(item, path);
      if (!m) return m.error();
      messages.push_back(std::move(*m));
    } else if (type == "reasoning") {
      // Past reasoning is not shown to the model again (the DeepSeek templates
      // drop it too); encrypted_content cannot be read by anyone but OpenAI.
    } else if (isHostedItem(type)) {
      addOnce(hosted, "input item " + type);
    } else if (type == "item_reference") {
      // The gateway resolves references from its stored responses before
      // parsing; one that reaches here had nothing to be resolved from.
      return invalidRequest(r.path("type"), "unsupported_value",
                            "item_reference needs stored responses, which this server does not keep; send the items");
    } else {
      return invalidRequest(r.path("type"), "invalid_value", path + " has an unknown item type '" + type + "'");
    }
  }
  return messages;
}

// The name the model calls a tool by, for a tool choice's {type, name}:
// "function" names a function (a namespace's by "NS.NAME", or by NAME when
// one namespace alone has it), "custom" a custom tool. Empty: none.
std::string promptName(const std::vector<FunctionTool>& tools, bool custom, const std::string& name) {
  const FunctionTool* found = nullptr;
  int matches = 0;
  for (const FunctionTool& t : tools) {
    if (t.origin.custom != custom) continue;
    if (t.name == name) return t.name;
    if (!t.origin.ns.empty() && t.name.size() == t.origin.ns.size() + 1 + name.size() && t.name.ends_with(name)) {
      found = &t;
      ++matches;
    }
  }
  return matches == 1 ? found->name : std::string();
}

// A tool choice, and for allowed_tools the tools the reply may call, by the
// names the model calls them.
struct ParsedToolChoice {
  ToolChoice choice;
  std::optional<std::vector<std::string>> allowed;
};

ApiResult<ParsedToolChoice> parseToolChoice(const json& v, const std::vector<FunctionTool>& offered,
                                            std::vector<std::string>& hosted) {
  ParsedToolChoice out;
  ToolChoice& choice = out.choice;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "auto") return out;
    if (s == "none") choice.mode = ToolChoice::Mode::kNone;
    else if (s == "required") choice.mode = ToolChoice::Mode::kRequired;
    else {
      return invalidRequest("tool_choice", "invalid_value",
                            "tool_choice must be 'none', 'auto', 'required' or an object, got '" + s + "'");
    }
    return out;
  }
  if (!v.is_object()) return wrongType("tool_choice", "a string or an object", v);
  FieldReader r(v, "tool_choice");
  std::string type;
  if (!r.string("type", type) && !r.failed()) r.missing("type");
  if (r.failed()) return r.takeError();
  if (type == "function" || type == "custom") {
    std::string name;
    if (!r.string("name", name) && !r.failed()) r.missing("name");
    if (r.failed()) return r.takeError();
    choice.function = promptName(offered, type == "custom", name);
    if (choice.function.empty()) {
      return invalidRequest("tool_choice", "invalid_value",
                            "tool_choice names the " + std::string(type == "custom" ? "custom tool" : "function") +
                                " '" + name + "', which is not among the tools");
    }
    choice.mode = ToolChoice::Mode::kFunction;
    return out;
  }
  if (type == "allowed_tools") {
    // {mode: "auto" | "required", tools: [...]}: the reply may call only the
    // listed functions and custom tools. Hosted entries are skipped as their
    // tools are.
    std::string mode;
    if (!r.string("mode", mode) && !r.failed()) r.missing("mode");
    if (r.failed()) return r.takeError();
    if (mode == "required") choice.mode = ToolChoice::Mode::kRequired;
    else if (mode != "auto") {
      return invalidRequest("tool_choice.mode", "invalid_value",
                            "tool_choice.mode must be 'auto' or 'required', got '" + mode + "'");
    }
    const json* tools = r.find("tools");
    if (tools == nullptr) {
      r.missing("tools");
      return r.takeError();
    }
    if (!tools->is_array()) return wrongType("tool_choice.tools", "an array", *tools);
    out.allowed.emplace();
    for (size_t k = 0; k < tools->size(); ++k) {
      const std::string path = indexPath("tool_choice.tools", k);
      if (!(*tools)[k].is_object()) return wrongType(path, "an object", (*tools)[k]);
      FieldReader t((*tools)[k], path);
      std::string tool_type, name;
      if (!t.string("type", tool_type) && !t.failed()) t.missing("type");
      if (t.failed()) return t.takeError();
      if (tool_type != "function" && tool_type != "custom") continue;
      if (!t.string("name", name) && !t.failed()) t.missing("name");
      if (t.failed()) return t.takeError();
      std::string prompt_name = promptName(offered, tool_type == "custom", name);
      if (prompt_name.empty()) {
        return invalidRequest("tool_choice.tools", "invalid_value",
                              "tool_choice.tools names the " +
                                  std::string(tool_type == "custom" ? "custom tool" : "function") + " '" + name +
                                  "', which is not among the tools");
      }
      out.allowed->push_back(std::move(prompt_name));
    }
    return out;
  }
  // A hosted tool (web_search_preview, file_search, mcp, shell, ...), whose
  // tools are skipped: nothing here can run them, so the model chooses among
  // the client's tools, and the header says so.
  addOnce(hosted, "tool_choice " + type);
  return out;
}

// Every field of OpenAI's CreateResponse, the extensions read here (as on
// chat), and Codex CLI's client_metadata. Each has an effect or is refused
// when set; hosted tools are skipped and named in a header.
constexpr std::string_view kKnownFields[] = {
    "model", "input", "background", "context_management", "conversation", "include", "instructions",
    "max_output_tokens", "max_tool_calls", "metadata", "moderation", "parallel_tool_calls", "previous_response_id",
    "prompt", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning", "safety_identifier",
    "service_tier", "store", "stream", "stream_options", "temperature", "text", "tool_choice", "tools",
    "top_logprobs", "top_p", "truncation", "user",
    // extensions
    "client_metadata", "top_k", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p", "seed",
    "logit_bias"};

// reasoning {effort, summary, generate_summary, mode, context}.
std::optional<ApiError> readReasoning(const json& reasoning, ChatPrompt& prompt) {
  if (!reasoning.is_object()) return wrongType("reasoning", "an object", reasoning);
  for (const auto& [key, value] : reasoning.items()) {
    const std::string param = "reasoning." + key;
    if (key == "effort") {
      if (auto error = detail::readReasoningEffort(value, param, prompt)) return error;
    } else if (key == "summary" || key == "generate_summary") {
      // The reasoning is returned whole, as reasoning_text content; no model
      // here writes a summary of it. "auto" leaves the summary to the model
      // (Codex sends it): it is empty. Asking for one is refused.
      if (value.is_null()) continue;
      if (!value.is_string()) return wrongType(param, "a string", value);
      if (value == "auto") continue;
      if (value == "concise" || value == "detailed") {
        return invalidRequest(param, "unsupported_value",
                              "reasoning summaries are not written by this server (the reasoning itself is "
                              "returned as reasoning_text); send 'auto' or omit it");
      }
      return invalidRequest(param, "invalid_value",
                            param + " must be 'auto', 'concise' or 'detailed', got '" + value.get<std::string>() + "'");
    } else if (key == "mode") {
      if (value.is_null() || value == "standard") continue;
      if (!value.is_string()) return wrongType(param, "a string", value);
      return invalidRequest(param, "unsupported_value", "only the 'standard' reasoning mode is served here");
    } else if (key == "context") {
      // The DeepSeek templates drop earlier turns' reasoning: current_turn.
      if (value.is_null() || value == "auto" || value == "current_turn") continue;
      if (!value.is_string()) return wrongType(param, "a string", value);
      return invalidRequest(param, "unsupported_value",
                            "earlier turns' reasoning is not shown to the model again (the chat template drops it); "
                            "send 'auto' or 'current_turn'");
    } else {
      return invalidRequest(param, "unknown_parameter", "Unrecognized request argument supplied: " + param);
    }
  }
  return std::nullopt;
}

// metadata: at most 16 string values, keys up to 64 and values up to 512
// characters (OpenAI's limits); kept with a stored response and echoed.
std::optional<ApiError> checkMetadata(const json& metadata) {
  if (!metadata.is_object()) return wrongType("metadata", "an object", metadata);
  if (metadata.size() > 16) return invalidRequest("metadata", "invalid_value", "metadata may hold at most 16 pairs");
  for (const auto& [key, value] : metadata.items()) {
    const std::string param = detail::fieldPath("metadata", key.substr(0, 64));
    if (key.size() > 64) return invalidRequest(param, "invalid_value", "metadata keys are at most 64 characters");
    if (!value.is_string()) return wrongType(param, "a string", value);
    if (value.get_ref<const std::string&>().size() > 512) {
      return invalidRequest(param, "invalid_value", "metadata values are at most 512 characters");
    }
  }
  return std::nullopt;
}

}  // namespace

ApiResult<ParsedResponsesRequest> parseResponsesRequest(const json& body, const ParseLimits& limits) {
  if (!body.is_object()) {
    return invalidJsonBody("the request body must be a JSON object, got " + std::string(detail::typeName(body)));
  }
  if (auto error = detail::refuseUnknownFields(body, kKnownFields)) return *error;
  FieldReader r(body, "");
  ParsedResponsesRequest out;
  out.sampling.default_max_tokens = limits.default_max_tokens;
  json& echo = out.echo;
  if (!r.string("model", out.model) && !r.failed()) r.missing("model");
  if (r.failed()) return r.takeError();

  // What needs state this server does not keep: background runs, OpenAI's
  // conversation objects and stored prompt templates. Stored responses
  // (store, previous_response_id) are kept.
  const std::pair<std::string_view, std::string_view> stateful[] = {
      {"background", "a response runs while its request is open; there are no background runs"},
      {"conversation", "there are no conversation objects; chain responses with previous_response_id"},
      {"prompt", "there are no stored prompt templates; send instructions and input"},
      {"context_management", "there is no server-side compaction; truncation: auto drops the oldest items"},
      {"moderation", "no moderation runs here"},
  };
  for (const auto& [key, why] : stateful) {
    const json* v = r.find(key);
    if (v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>())) continue;
    return invalidRequest(std::string(key), "unsupported_parameter",
                          std::string(key) + " is not supported by this server: " + std::string(why));
  }

  // instructions + input -> messages.
  std::string instructions;
  const bool has_instructions = r.string("instructions", instructions);
  if (r.failed()) return r.takeError();
  const json* input = r.find("input");
  if (input == nullptr) {
    r.missing("input");
    return r.takeError();
  }
  ApiResult<std::vector<ChatMessage>> messages = parseInput(*input, limits, out.hosted_tools);
  if (!messages) return messages.error();
  if (has_instructions) {
    ChatMessage system;
    system.role = Role::kSystem;
    system.content = instructions;
    out.prompt.messages.push_back(std::move(system));
  }
  for (ChatMessage& m : *messages) out.prompt.messages.push_back(std::move(m));
  if (out.prompt.messages.empty()) {
    return invalidRequest("input", "invalid_value", "input must contain at least one item the model can read");
  }
  echo["instructions"] = has_instructions ? json(instructions) : json(nullptr);

  // Tools.
  echo["tools"] = json::array();
  if (const json* tools = r.find("tools")) {
    if (!tools->is_array()) return wrongType("tools", "an array", *tools);
    if (static_cast<int64_t>(tools->size()) > limits.max_tools) {
      return invalidRequest("tools", "invalid_value",
                            "tools may hold at most " + std::to_string(limits.max_tools) + " tools, got " +
                                std::to_string(tools->size()));
    }
    echo["tools"] = *tools;
    for (size_t k = 0; k < tools->size(); ++k) {
      const std::string path = indexPath("tools", k);
      const json& tool = (*tools)[k];
      if (!tool.is_object()) return wrongType(path, "an object", tool);
      FieldReader t(tool, path);
      std::string type;
      if (!t.string("type", type) && !t.failed()) t.missing("type");
      if (t.failed()) return t.takeError();
      if (type == "function") {
        ApiResult<FunctionTool> f = detail::readFunction(tool, path);
        if (!f) return f.error();
        // The Responses API's function tools are strict unless they say not.
        if (!tool.contains("strict")) f->strict = true;
        f->param = path;
        // The echo has every field OpenAI's FunctionTool schema requires.
        json& echoed = echo["tools"][k];
        echoed["strict"] = f->strict;
        if (!echoed.contains("parameters")) echoed["parameters"] = nullptr;
        if (!echoed.contains("description")) echoed["description"] = nullptr;
        out.prompt.tools.push_back(std::move(*f));
      } else if (type == "custom") {
        ApiResult<FunctionTool> c = readCustomTool(tool, path, ToolOrigin{});
        if (!c) return c.error();
        out.prompt.tools.push_back(std::move(*c));
      } else if (type == "namespace") {
        if (auto error = readNamespace(tool, path, out.prompt.tools)) return *error;
      } else {
        addOnce(out.hosted_tools, type);
      }
    }
    for (size_t i = 0; i < out.prompt.tools.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (out.prompt.tools[i].name != out.prompt.tools[j].name) continue;
        return invalidRequest(out.prompt.tools[i].param + ".name", "invalid_value",
                              "tools: the name '" + out.prompt.tools[i].name + "' is used by two tools");
      }
    }
  }
  echo["tool_choice"] = "auto";
  if (const json* choice = r.find("tool_choice")) {
    ApiResult<ParsedToolChoice> c = parseToolChoice(*choice, out.prompt.tools, out.hosted_tools);
    if (!c) return c.error();
    out.prompt.tool_choice = std::move(c->choice);
    if (c->allowed) {
      // allowed_tools: the other tools are left out of the prompt, so the
      // model is offered (and the grammar allows) only these.
      std::erase_if(out.prompt.tools, [&](const FunctionTool& t) {
        return std::find(c->allowed->begin(), c->allowed->end(), t.name) == c->allowed->end();
      });
    }
    echo["tool_choice"] = *choice;
  }
  if (auto error = detail::checkToolChoice(out.prompt.tool_choice, out.prompt.tools, "tool_choice")) return *error;
  r.boolean("parallel_tool_calls", out.prompt.parallel_tool_calls);
  echo["parallel_tool_calls"] = out.prompt.parallel_tool_calls;

  // text.format and text.verbosity.
  echo["text"] = json{{"format", json{{"type", "text"}}}};
  if (const json* text = r.find("text")) {
    if (!text->is_object()) return wrongType("text", "an object", *text);
    for (const auto& [key, value] : text->items()) {
      if (key != "format" && key != "verbosity") {
        return invalidRequest("text." + key, "unknown_parameter", "Unrecognized request argument supplied: text." + key);
      }
    }
    if (auto it = text->find("format"); it != text->end() && !it->is_null()) {
      ApiResult<ResponseFormat> f = detail::readResponseFormat(*it, "text.format", true);
      if (!f) return f.error();
      out.prompt.response_format = std::move(*f);
    }
    if (auto it = text->find("verbosity"); it != text->end()) {
      if (auto error = detail::readVerbosity(*it, "text.verbosity", out.prompt)) return *error;
    }
    echo["text"] = *text;
    if (!echo["text"].contains("format")) echo["text"]["format"] = json{{"type", "text"}};
  }

  // Sampling.
  detail::readSampling(r, out.sampling);
  detail::readMaxTokens(r, "max_output_tokens", 1, out.sampling);
  int64_t top_logprobs = 0;
  const bool has_top_logprobs = r.integer("top_logprobs", top_logprobs, 0, 20);
  int64_t max_tool_calls = 0;
  if (r.integer("max_tool_calls", max_tool_calls, 0, INT32_MAX)) {
    out.prompt.max_tool_calls = static_cast<int32_t>(max_tool_calls);
  }
  if (r.failed()) return r.takeError();
  echo["temperature"] = r.find("temperature") ? *r.find("temperature") : json(1.0);
  echo["top_p"] = r.find("top_p") ? *r.find("top_p") : json(1.0);
  echo["max_output_tokens"] =
      out.sampling.requested_max_tokens ? json(*out.sampling.requested_max_tokens) : json(nullptr);

  // Stored state (store, previous_response_id: the gateway acts on them),
  // identifiers, truncation, reasoning, include, metadata.
  r.boolean("stream", out.stream);
  detail::readStreamOptions(r, out.stream, nullptr);
  r.boolean("store", out.store);
  echo["store"] = out.store;
  std::string s;
  if (r.string("previous_response_id", s)) out.previous_response_id = s;
  echo["previous_response_id"] = out.previous_response_id ? json(*out.previous_response_id) : json(nullptr);
  if (r.string("prompt_cache_key", out.prompt_cache_key)) echo["prompt_cache_key"] = out.prompt_cache_key;
  echo["user"] = r.string("user", s) ? json(s) : json(nullptr);
  detail::readIdentifiers(r);
  detail::readServiceTier(r);
  detail::readPromptCacheHints(r);
  // Codex CLI's identifiers of its installation and session: no effect on the output.
  if (const json* client = r.find("client_metadata"); client != nullptr && !client->is_object()) {
    return wrongType("client_metadata", "an object", *client);
  }
  if (r.failed()) return r.takeError();
  echo["truncation"] = "disabled";
  if (r.string("truncation", s)) {
    if (s != "auto" && s != "disabled") {
      return invalidRequest("truncation", "invalid_value", "truncation must be 'auto' or 'disabled', got '" + s + "'");
    }
    echo["truncation"] = s;
    out.truncate_auto = s == "auto";
  }
  echo["reasoning"] = json{{"effort", nullptr}, {"summary", nullptr}};
  if (const json* reasoning = r.find("reasoning")) {
    if (auto error = readReasoning(*reasoning, out.prompt)) return *error;
    echo["reasoning"] = *reasoning;
  }
  bool output_text_logprobs = false;
  if (const json* include = r.find("include")) {
    if (!include->is_array()) return wrongType("include", "an array", *include);
    for (size_t k = 0; k < include->size(); ++k) {
      if (!(*include)[k].is_string()) return wrongType(indexPath("include", k), "a string", (*include)[k]);
      const std::string& what = (*include)[k].get_ref<const std::string&>();
      if (what.starts_with("file_search_call.") || what.starts_with("web_search_call.") ||
          what.starts_with("code_interpreter_call.") || what.starts_with("computer_call_output.")) {
        addOnce(out.hosted_tools, "include " + what);  // a hosted tool's output: none runs here
        continue;
      }
      if (what == "reasoning.encrypted_content") {
        // Encrypted reasoning lets a stateless client send reasoning back;
        // here the reasoning comes back as plain reasoning_text, and earlier
        // turns' reasoning is not shown to the model again either way.
        continue;
      }
      if (what == "message.input_image.image_url") {
        return invalidRequest(indexPath("include", k), "unsupported_value",
                              "this model reads text only: there are no input images to include");
      }
      if (what != "message.output_text.logprobs") {
        return invalidRequest(indexPath("include", k), "invalid_value",
                              indexPath("include", k) + " is not something a response can include: '" +
                                  what.substr(0, 64) + "'");
      }
      output_text_logprobs = true;
    }
  }
  // top_logprobs only says how many alternatives the included logprobs list.
  // Without the include OpenAI accepts it and nothing shows it; here too, and
  // the alternatives are not computed.
  out.sampling.options.logprobs = output_text_logprobs;
  if (output_text_logprobs) {
    out.sampling.options.top_logprobs = static_cast<int32_t>(top_logprobs);
  } else if (has_top_logprobs && top_logprobs > 0) {
    addOnce(out.ignored, "top_logprobs");
  }
  echo["top_logprobs"] = top_logprobs;
  echo["metadata"] = json::object();
  if (const json* metadata = r.find("metadata")) {
    if (auto error = checkMetadata(*metadata)) return *error;
    echo["metadata"] = *metadata;
  }
  if (r.failed()) return r.takeError();
  return out;
}

}  // namespace lg::proxy::openai

// The internal form of an OpenAI request, shared by the three endpoints:
// what the parsers (chat_request.h, completion_request.h, responses_request.h)
// produce and the prompt encoder (prompt_encoder.h) consumes.
//
// Chat Completions and Responses both become a ChatPrompt: a conversation of
// system/developer/user/assistant/tool messages, function tools, a tool choice
// and a response format. Only text reaches it: the parsers already joined
// content parts and refused what the model cannot read (images, audio).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "serving/request.h"

namespace lg::proxy::openai {

enum class Role : uint8_t { kSystem, kDeveloper, kUser, kAssistant, kTool };

struct ToolCall {
  std::string id;         // call_...: what the tool result refers to
  std::string name;
  std::string arguments;  // a JSON text, as the model wrote it
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  Role role = Role::kUser;
  // Text content; nullopt only for an assistant message that holds tool calls.
  std::optional<std::string> content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
};

// Where a Responses tool that is not a plain function came from, so that a
// call of it is reported as the item the client expects (responses_response.h).
struct ToolOrigin {
  // The namespace tool it belongs to, or empty. A namespace's function is
  // offered to the model as "NS.NAME" and reported as a function_call with
  // `namespace: NS` and `name: NAME`.
  std::string ns;
  std::string ns_description;  // the namespace's description, rendered once before its functions
  // A custom (freeform) tool: offered as a function of one string argument,
  // {"input": TEXT}, and reported as a custom_tool_call with `input: TEXT`.
  bool custom = false;
  bool operator==(const ToolOrigin&) const = default;
};

struct FunctionTool {
  std::string name;         // ^[A-Za-z0-9_-]{1,64}$, as OpenAI requires; "NS.NAME" in a namespace
  std::string description;  // may be empty
  nlohmann::json parameters;  // a JSON Schema object, or null when absent
  // Whether the arguments must match `parameters` exactly (OpenAI's strict
  // mode). Chat's default is false, the Responses API's true.
  bool strict = false;
  ToolOrigin origin;  // Responses' namespace and custom tools
  // Where the request defined the tool ("tools[3]", "tools[4].tools[1]"):
  // the gateway reads its parameters again there in the client's key order,
  // and names it in errors. Empty: found by name (chat).
  std::string param;
};

struct ToolChoice {
  enum class Mode : uint8_t { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction: the function the reply must call
};

// What the reply must be, enforced by constrained decoding (the gateway
// compiles it with text/grammar/; the scheduler masks every step).
struct ResponseFormat {
  enum class Kind : uint8_t {
    kText,        // free text
    kJsonObject,  // any JSON object (response_format json_object)
    kJsonSchema,  // JSON matching `schema` (json_schema; vLLM's structured_outputs.json, guided_json)
    kRegex,       // text matching `regex` (vLLM's structured_outputs.regex, guided_regex)
    kChoice,      // exactly one of `choices` (vLLM's structured_outputs.choice, guided_choice)
  };
  Kind kind = Kind::kText;
  nlohmann::json schema;             // kJsonSchema
  std::string name;                  // kJsonSchema: the schema's name, as sent
  bool strict = false;               // kJsonSchema: as sent (the schema is enforced either way)
  std::string regex;                 // kRegex
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // where the request said it, for errors: "response_format.json_schema.schema"
};

// verbosity (chat) / text.verbosity (Responses): how long a reply the client
// wants. Medium, OpenAI's default, adds nothing; the others add one line to
// the system prompt (PromptEncoder::systemAddendum).
enum class Verbosity : uint8_t { kMedium, kLow, kHigh };

struct ChatPrompt {
  std::vector<ChatMessage> messages;
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;  // false: at most one call per reply
  int32_t max_tool_calls = -1;      // Responses' max_tool_calls: calls past it are dropped; -1: no limit
  ResponseFormat response_format;
  // reasoning_effort (chat) / reasoning.effort (Responses): true for any
  // effort from "low" up, false for "none" or "minimal"; nullopt when not sent
  // (the template's default). The encoder sets the template's `thinking`
  // switch, or refuses what a template without one cannot do.
  std::optional<bool> reasoning;
  std::string reasoning_param;  // the field that set it, for errors
  Verbosity verbosity = Verbosity::kMedium;
};

// How the rendered conversation ends: vLLM's (and transformers')
// add_generation_prompt and continue_final_message, which the render routes
// accept (parseChatRenderRequest, chat_request.h); PromptEncoder::encodeChat
// applies it. Every generation request renders with the defaults: the
// assistant's turn opened after the last message.
struct ChatEnding {
  bool add_generation_prompt = true;
  // The final message left open (its end-of-turn text cut off), for the model
  // to continue it; needs add_generation_prompt false.
  bool continue_final_message = false;
};

// Limits and defaults the server configures once.
struct ParseLimits {
  // max_tokens when a request names none: DeepSeek's API default, clamped to
  // what the context leaves (resolveSampling).
  int32_t default_max_tokens = 4096;
  // The same for /v1/completions, whose OpenAI default is 16 tokens.
  int32_t default_completion_max_tokens = 16;
  int32_t max_stop_strings = 4;          // as OpenAI (and serving.max_stop_strings)
  int32_t max_completion_prompts = 128;  // entries of a /v1/completions prompt list
  int32_t max_tools = 512;
  int32_t max_messages = 100000;         // messages, or Responses input items
  int32_t max_json_depth = 64;           // nesting of the body (parseJsonBody)
};

// Sampling as parsed: everything of serving::SamplingOptions but the output
// cap, which depends on the prompt's length (resolveSampling, prompt_encoder.h).
struct SamplingSpec {
  serving::SamplingOptions options;            // max_tokens left 0 until resolved
  std::optional<int32_t> requested_max_tokens;  // what the client asked for, if anything
  int32_t default_max_tokens = 4096;            // otherwise (ParseLimits), clamped to the context left
};

}  // namespace lg::proxy::openai

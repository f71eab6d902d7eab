// POST /v1/responses (the OpenAI Responses API, what Codex CLI speaks): the
// body as a ParsedResponsesRequest.
//
// `input` is a string (one user message) or a list of items: messages (role
// user, system, developer or assistant; content a string or input_text /
// output_text parts), function_call and function_call_output (and their
// custom_tool_call counterparts), reasoning items (skipped: the templates drop
// past reasoning). `instructions` becomes the first system message. The tools
// that run at the client are rendered: functions, custom tools (as a function
// of one string argument, {"input": TEXT}) and namespace tools (each of their
// tools as "NS.NAME"), with FunctionTool::origin saying which. Hosted tools (web_search, file_search,
// code_interpreter, computer_use, local_shell, mcp, ...), their input items,
// tool choices and include entries are left out and listed in
// `hosted_tools`, never refused, so that a client that always sends them
// (Codex) still works and the server can say what was skipped. Stored state
// (previous_response_id) is parsed only: resolving it is the integrator's.
// Every other field has an effect or is refused (docs/openai-api.md lists
// them): background, prompt templates, conversations, context_management,
// moderation, reasoning summaries and any field this server does not know.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai {

struct ParsedResponsesRequest {
  std::string model;
  ChatPrompt prompt;
  SamplingSpec sampling;
  ParamNames params{"input", "max_output_tokens", "top_logprobs"};
  bool stream = false;
  bool store = true;  // OpenAI's default; the integrator decides what storing means
  // truncation "auto": the oldest input items are dropped until the prompt
  // fits the context (the gateway does it, as OpenAI does); "disabled": too
  // long is a 400.
  bool truncate_auto = false;
  std::optional<std::string> previous_response_id;
  std::string prompt_cache_key;
  // What hosted tools left out, each once, in request order: tool types
  // ("web_search"), and "input item web_search_call", "tool_choice
  // file_search", "include web_search_call.results".
  std::vector<std::string> hosted_tools;
  // Fields and input items accepted without effect ("top_logprobs" without
  // the message.output_text.logprobs include, "input item web_search_call",
  // ...), each once.
  std::vector<std::string> ignored;
  // The request fields a response object repeats (instructions, tools,
  // tool_choice, temperature, top_p, top_logprobs, max_output_tokens,
  // parallel_tool_calls, previous_response_id, reasoning, store, text, truncation, metadata, user,
  // prompt_cache_key), with OpenAI's defaults filled in.
  nlohmann::json echo = nlohmann::json::object();
};

ApiResult<ParsedResponsesRequest> parseResponsesRequest(const nlohmann::json& body, const ParseLimits& limits);

}  // namespace lg::proxy::openai

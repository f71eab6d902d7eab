// POST /v1/chat/completions: the request body as a ParsedChatRequest.
//
// Accepted: model, messages (system, developer, user, assistant with
// tool_calls, tool), content as a string or text parts, stream,
// stream_options.include_usage, max_tokens / max_completion_tokens,
// temperature, top_p, top_k (extension), seed, stop, logprobs, top_logprobs,
// n, logit_bias, penalties (and vLLM's repetition_penalty, min_p), tools
// (function), tool_choice, parallel_tool_calls, response_format (text,
// json_object, json_schema) or vLLM's structured_outputs / guided_*.
// reasoning_effort (thinking on or off, prompt_encoder.h), verbosity (a line
// of the system prompt). Identifiers without effect on the output: user,
// safety_identifier, prompt_cache_key; cache hints the prefix cache meets:
// prompt_cache_retention, prompt_cache_options. Skipped and named in a
// header: web_search_options (a hosted tool). Refused with a 400 naming the
// parameter: wrong types, out-of-range values, image/audio/file parts, audio
// output, DeepSeek's prefix completion, functions / function_call,
// prediction, moderation, metadata, store: true, service tiers other than
// auto/default, stream obfuscation, and any field this server does not know.
// docs/openai-api.md has the full table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai {

struct ParsedChatRequest {
  std::string model;
  ChatPrompt prompt;
  SamplingSpec sampling;
  ParamNames params{"messages", "max_tokens", "top_logprobs"};  // max_completion_tokens when the client used it
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage and no choices
  int32_t n = 1;               // choices (1..128), generated together from one prompt
  // Hosted tools asked for ("web_search" for web_search_options): they run
  // at OpenAI, not in a model, so nothing runs them here; the gateway names
  // them in a response header.
  std::vector<std::string> hosted_tools;
};

ApiResult<ParsedChatRequest> parseChatCompletionRequest(const nlohmann::json& body, const ParseLimits& limits);

// POST /v1/chat/completions/render (vLLM's route, which routers such as
// llm-d call with the client's chat request to learn its token ids): the
// chat request, parsed and refused exactly as above, plus how the
// conversation ends: add_generation_prompt (default true) and
// continue_final_message (default false). vLLM's chat_template,
// chat_template_kwargs and documents pass only when they ask for nothing
// (null, empty): the chat endpoint refuses them, and a render must give the
// ids a real request would get.
struct ParsedChatRenderRequest {
  ParsedChatRequest chat;
  ChatEnding ending;
};

// Takes the body by value: the render fields are erased from it before the
// chat parser, which refuses fields it does not know, reads the rest.
ApiResult<ParsedChatRenderRequest> parseChatRenderRequest(nlohmann::json body, const ParseLimits& limits);

}  // namespace lg::proxy::openai

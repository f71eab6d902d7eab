// POST /v1/completions (the legacy text completion endpoint): the body as a
// ParsedCompletionRequest.
//
// `prompt` is a string, a list of strings, a list of token ids or a list of
// lists of ids; each entry is one choice (index in order), run as its own
// scheduler request. Accepted: echo, logprobs (0..5 alternatives, the sampled
// token always included), max_tokens (0 with echo + logprobs scores the
// prompt), stop, seed, temperature, top_p, top_k (extension), stream,
// stream_options.include_usage, n, best_of = 1, logit_bias, penalties,
// vLLM's structured outputs; `user` is an identifier without effect. Refused:
// suffix, best_of > 1, stream obfuscation, wrong types and ranges, and any
// field this server does not know.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai {

// One prompt: text to encode as plain text (added-token strings stay text), or
// ids passed through to the scheduler (which range-checks them).
struct CompletionPrompt {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct ParsedCompletionRequest {
  std::string model;
  std::vector<CompletionPrompt> prompts;  // n choices each: choice i * n + j is prompt i's j-th
  int32_t n = 1;                          // choices per prompt (1..128)
  SamplingSpec sampling;                  // the same for every prompt
  ParamNames params{"prompt", "max_tokens", "logprobs"};
  bool echo = false;
  // Legacy `logprobs`: nullopt, or 0..5 alternatives per token.
  std::optional<int32_t> logprobs;
  bool stream = false;
  bool include_usage = false;
  // vLLM's structured outputs (structured_outputs, guided_json / _regex /
  // _choice): every choice's text must match it.
  ResponseFormat format;
};

ApiResult<ParsedCompletionRequest> parseCompletionRequest(const nlohmann::json& body, const ParseLimits& limits);

}  // namespace lg::proxy::openai

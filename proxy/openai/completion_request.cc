#include "proxy/openai/completion_request.h"

#include <nlohmann/json.hpp>

#include "proxy/openai/common_fields.h"
#include "proxy/openai/json_fields.h"
#include "proxy/openai/parse_common.h"

namespace lg::proxy::openai {

namespace {

using detail::FieldReader;
using detail::indexPath;
using detail::wrongType;
using nlohmann::json;

ApiResult<std::vector<int32_t>> parseIds(const json& ids, const std::string& param) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    int64_t id = 0;
    // The vocabulary bound is the scheduler's to check (it knows the model);
    // here ids only have to be token-id shaped.
    if (auto error = detail::checkInteger(ids[k], indexPath(param, k), 0, INT32_MAX, id)) return *error;
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

ApiResult<std::vector<CompletionPrompt>> parsePrompt(const json& prompt, const ParseLimits& limits) {
  std::vector<CompletionPrompt> out;
  if (prompt.is_string()) {
    out.push_back({false, prompt.get<std::string>(), {}});
    return out;
  }
  if (!prompt.is_array()) {
    return wrongType("prompt", "a string, an array of strings, an array of token ids or an array of arrays of ids",
                     prompt);
  }
  if (prompt.empty()) return invalidRequest("prompt", "invalid_value", "prompt must not be an empty array");
  const json& first = prompt[0];
  if (first.is_number()) {  // one prompt of ids
    ApiResult<std::vector<int32_t>> ids = parseIds(prompt, "prompt");
    if (!ids) return ids.error();
    out.push_back({true, {}, std::move(*ids)});
    return out;
  }
  if (static_cast<int64_t>(prompt.size()) > limits.max_completion_prompts) {
    return invalidRequest("prompt", "invalid_value",
                          "prompt may hold at most " + std::to_string(limits.max_completion_prompts) +
                              " prompts, got " + std::to_string(prompt.size()));
  }
  const bool strings = first.is_string();
  if (!strings && !first.is_array()) {
    return wrongType("prompt[0]", "a string, a token id or an array of token ids", first);
  }
  for (size_t k = 0; k < prompt.size(); ++k) {
    const json& p = prompt[k];
    const std::string path = indexPath("prompt", k);
    if (strings) {
      if (!p.is_string()) return wrongType(path, "a string (like prompt[0])", p);
      out.push_back({false, p.get<std::string>(), {}});
    } else {
      if (!p.is_array()) return wrongType(path, "an array of token ids (like prompt[0])", p);
      if (p.empty()) return invalidRequest(path, "invalid_value", path + " must not be empty");
      ApiResult<std::vector<int32_t>> ids = parseIds(p, path);
      if (!ids) return ids.error();
      out.push_back({true, {}, std::move(*ids)});
    }
  }
  return out;
}

// Every field of OpenAI's CreateCompletionRequest and the extensions read
// here (as on chat); each has an effect or is refused when set.
constexpr std::string_view kKnownFields[] = {
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
    // extensions
    "top_k", "repetition_penalty", "min_p", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar"};

}  // namespace

ApiResult<ParsedCompletionRequest> parseCompletionRequest(const json& body, const ParseLimits& limits) {
  if (!body.is_object()) {
    return invalidJsonBody("the request body must be a JSON object, got " + std::string(detail::typeName(body)));
  }
  if (auto error = detail::refuseUnknownFields(body, kKnownFields)) return *error;
  FieldReader r(body, "");
  ParsedCompletionRequest out;
  out.sampling.default_max_tokens = limits.default_completion_max_tokens;
  if (!r.string("model", out.model) && !r.failed()) r.missing("model");
  if (r.failed()) return r.takeError();

  const json* prompt = r.find("prompt");
  if (prompt == nullptr) {
    r.missing("prompt");
    return r.takeError();
  }
  ApiResult<std::vector<CompletionPrompt>> prompts = parsePrompt(*prompt, limits);
  if (!prompts) return prompts.error();
  out.prompts = std::move(*prompts);

  if (const json* suffix = r.find("suffix")) {
    if (!suffix->is_string()) return wrongType("suffix", "a string", *suffix);
    if (!suffix->get_ref<const std::string&>().empty()) {
      return invalidRequest("suffix", "unsupported_parameter",
                            "suffix (fill in the middle) is not supported by this server");
    }
  }
  int64_t n = 1;
  if (r.integer("n", n, 1, 128)) out.n = static_cast<int32_t>(n);
  int64_t best_of = 1;
  if (r.integer("best_of", best_of, 1, 128) && best_of != 1) {
    return invalidRequest("best_of", "unsupported_value", "best_of must be 1");
  }

  r.boolean("echo", out.echo);
  int64_t logprobs = 0;
  if (r.integer("logprobs", logprobs, 0, 5)) out.logprobs = static_cast<int32_t>(logprobs);
  r.boolean("stream", out.stream);
  detail::readStreamOptions(r, out.stream, &out.include_usage);

  detail::readSampling(r, out.sampling);
  detail::readStop(r, limits, out.sampling.options.stop);
  detail::readMaxTokens(r, "max_tokens", 0, out.sampling);
  std::string user;
  r.string("user", user);  // an end-user identifier for OpenAI's abuse monitoring: checked, no effect here
  if (r.failed()) return r.takeError();
  ApiResult<std::optional<ResponseFormat>> format = detail::readStructuredOutputs(r);
  if (!format) return format.error();
  if (*format) out.format = std::move(**format);

  serving::SamplingOptions& s = out.sampling.options;
  s.logprobs = out.logprobs.has_value();
  s.top_logprobs = out.logprobs.value_or(0);
  s.prompt_logprobs = out.echo && out.logprobs.has_value();
  if (out.sampling.requested_max_tokens == 0 && !s.prompt_logprobs) {
    return invalidRequest("max_tokens", "integer_below_min_value",
                          "max_tokens must be at least 1, or 0 with echo and logprobs (to score the prompt)");
  }
  return out;
}

}  // namespace lg::proxy::openai

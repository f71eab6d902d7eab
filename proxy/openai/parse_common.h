// Parsing shared by the three endpoints (internal to proxy/openai): sampling
// fields, stop strings, text content parts, function tools and tool choice.
// Chat Completions and Responses spell tools and tool choice differently; the
// checks behind them (names, schemas) live here once.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/openai/json_fields.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai::detail {

// temperature (0..2), top_p (0..1], seed, top_k (an extension, as vLLM's),
// frequency_penalty / presence_penalty (-2..2), logit_bias ({"token id":
// -100..100}, at most 300), and vLLM's repetition_penalty (0..2] and min_p
// [0, 1]: all applied by the scheduler (serving/logits_processor.h).
void readSampling(FieldReader& r, SamplingSpec& spec);

// `stop`: a string or a list of up to limits.max_stop_strings non-empty strings.
void readStop(FieldReader& r, const ParseLimits& limits, std::vector<std::string>& out);

// A positive output cap under `key` (min_value: 0 where scoring prompts is allowed).
void readMaxTokens(FieldReader& r, std::string_view key, int64_t min_value, SamplingSpec& spec);

// Text content: a string, or a list of parts whose text is joined with "\n".
// `text_types` are the part types that carry text in `text` (or in
// `refusal`, for a "refusal" part); image, audio and file parts are refused
// naming the part, other types too.
struct TextPartTypes {
  std::vector<std::string_view> text;  // e.g. {"text"} or {"input_text", "output_text"}
  bool allow_refusal = false;
};
ApiResult<std::string> readTextContent(const json& content, const std::string& param, const TextPartTypes& types);

// ^[A-Za-z0-9_-]{1,64}$ (OpenAI's rule; it also keeps names free of the
// tool-call markers and newlines that the output format relies on).
std::optional<ApiError> checkFunctionName(const std::string& name, const std::string& param);

// A function tool's parts, from an object holding name/description/parameters
// (the chat `function` object, or the Responses tool itself).
ApiResult<FunctionTool> readFunction(const json& object, const std::string& prefix);

// Checks a tool choice against the tools (a named function must be one of
// them; a choice that needs tools needs some).
std::optional<ApiError> checkToolChoice(const ToolChoice& choice, const std::vector<FunctionTool>& tools,
                                        const std::string& param);

// response_format (chat: {"type": "text" | "json_object" | "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}) or text.format
// (Responses: the json_schema fields beside "type"); `flat` says which.
ApiResult<ResponseFormat> readResponseFormat(const json& format, const std::string& param, bool flat);

// vLLM's structured outputs, on chat and completions: structured_outputs
// {"json" | "regex" | "choice"} and the older guided_json, guided_regex,
// guided_choice; "grammar" / guided_grammar (EBNF) and the others are
// refused. nullopt with no error: none was sent. Two formats at once (these
// and response_format) are refused.
ApiResult<std::optional<ResponseFormat>> readStructuredOutputs(FieldReader& r);

}  // namespace lg::proxy::openai::detail

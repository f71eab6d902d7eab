// Server-sent events framing and the one JSON serializer of proxy/openai.
//
// Chat Completions and Completions stream `data: {json}\n\n` lines and end
// with `data: [DONE]\n\n`; Responses streams `event: TYPE\ndata: {json}\n\n`
// and ends with its response.completed (or .incomplete / .failed) event, no
// [DONE]. The JSON is compact, so it never holds a raw line break (strings
// escape theirs), which would end an SSE field.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "proxy/http/api_error.h"

namespace lg::proxy::openai {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON, non-ASCII kept as UTF-8; invalid UTF-8 (which model text
// never has: the stream decoder repairs it) becomes U+FFFD instead of throwing.
std::string jsonText(const nlohmann::json& value);

std::string sseData(const nlohmann::json& value);                           // "data: {...}\n\n"
std::string sseEvent(std::string_view event, const nlohmann::json& value);  // "event: E\ndata: {...}\n\n"
// A failed chat or completions stream's last data chunk (before [DONE]): "data: {"error": {...}}\n\n".
std::string sseErrorData(const ApiError& error);

}  // namespace lg::proxy::openai

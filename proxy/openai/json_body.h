// The request body as JSON, for the server: the one place a body's text is
// parsed. Bad JSON and bodies nested deeper than ParseLimits::max_json_depth
// are a 400 (nlohmann::json parses iteratively, but copying, comparing and
// serializing a value recurse, and the tools' schemas are copied and
// serialized, so depth is bounded before anything else sees the value).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai {

ApiResult<nlohmann::json> parseJsonBody(std::string_view body, const ParseLimits& limits);

}  // namespace lg::proxy::openai

#include "proxy/openai/json_body.h"

#include <algorithm>

namespace lg::proxy::openai {

namespace {

// The deepest nesting of arrays and objects in `text`, brackets inside
// strings excluded; stops counting once past `limit`.
int32_t nestingDepth(std::string_view text, int32_t limit) {
  int32_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

ApiResult<nlohmann::json> parseJsonBody(std::string_view body, const ParseLimits& limits) {
  if (nestingDepth(body, limits.max_json_depth) > limits.max_json_depth) {
    return invalidJsonBody("the request body nests arrays and objects more than " +
                           std::to_string(limits.max_json_depth) + " levels deep");
  }
  nlohmann::json value = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return invalidJsonBody("We could not parse the JSON body of your request: it is not valid JSON (UTF-8).");
  }
  if (!value.is_object()) return invalidJsonBody("the request body must be a JSON object");
  return value;
}

}  // namespace lg::proxy::openai

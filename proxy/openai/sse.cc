#include "proxy/openai/sse.h"

#include <nlohmann/json.hpp>

namespace lg::proxy::openai {

std::string jsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string sseData(const nlohmann::json& value) {
  std::string out = "data: ";
  out.append(jsonText(value));
  out.append("\n\n");
  return out;
}

std::string sseEvent(std::string_view event, const nlohmann::json& value) {
  std::string out = "event: ";
  out.append(event);
  out.append("\ndata: ");
  out.append(jsonText(value));
  out.append("\n\n");
  return out;
}

std::string sseErrorData(const ApiError& error) {
  std::string out = "data: ";
  out.append(apiErrorBody(error));
  out.append("\n\n");
  return out;
}

}  // namespace lg::proxy::openai

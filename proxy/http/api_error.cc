#include "proxy/http/api_error.h"

#include <nlohmann/json.hpp>

namespace lg::proxy {

std::string apiErrorBody(const ApiError& error) {
  using json = nlohmann::ordered_json;
  json inner = {
      {"message", error.message},
      {"type", error.type},
      {"param", error.param.empty() ? json(nullptr) : json(error.param)},
      {"code", error.code.empty() ? json(nullptr) : json(error.code)},
  };
  return json{{"error", std::move(inner)}}.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

}  // namespace lg::proxy

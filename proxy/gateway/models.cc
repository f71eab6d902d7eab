// GET /v1/models (and /models): the served model and its aliases.
#include <nlohmann/json.hpp>

#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"

namespace lg::proxy {

void Gateway::models(const HttpRequest&, std::shared_ptr<Exchange> exchange, const billing::Principal&) const {
  using nlohmann::json;
  json data = json::array();
  auto entry = [](const std::string& id) {
    return json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "latentgate"}};
  };
  data.push_back(entry(options_.model_id));
  for (const std::string& a : options_.aliases) data.push_back(entry(a));
  exchange->respond(200, jsonHeaders(), json{{"object", "list"}, {"data", data}}.dump());
}

}  // namespace lg::proxy

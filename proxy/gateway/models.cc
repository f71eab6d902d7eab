// GET /v1/models (and /models): the served model and its aliases;
// GET /v1/models/{id} (the SDKs' models.retrieve): one of them, or 404.
#include <nlohmann/json.hpp>

#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/http_message.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

namespace {

nlohmann::json modelEntry(const std::string& id) {
  return nlohmann::json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "latentgate"}};
}

}  // namespace

void Gateway::models(const HttpRequest&, std::shared_ptr<Exchange> exchange, const billing::Principal&) const {
  using nlohmann::json;
  json data = json::array();
  data.push_back(modelEntry(options_.model_id));
  for (const std::string& a : options_.aliases) data.push_back(modelEntry(a));
  exchange->respond(200, jsonHeaders(), json{{"object", "list"}, {"data", data}}.dump());
}

void Gateway::model(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal&) const {
  // The SDKs percent-encode the id (a Hugging Face id has a '/').
  const std::string_view path = request.path;
  const std::string id = percentDecode(path.substr(path.find("/models/") + 8));
  if (!knownModel(id)) return respondWithApiError(*exchange, openai::modelNotFound(id));
  exchange->respond(200, jsonHeaders(), modelEntry(id).dump());
}

}  // namespace lg::proxy

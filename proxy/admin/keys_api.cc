#include "proxy/admin/keys_api.h"

#include <nlohmann/json.hpp>

#include "proxy/admin/control_errors.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

using nlohmann::json;

void KeysApi::addRoutes(Router& router) const {
  router.add("POST", "/admin/keys",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { create(r, std::move(e)); }),
             Runs::kBlocking);  // a synced write
  router.add("GET", "/admin/keys",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { list(r, std::move(e)); }));
  router.addPrefix(
      "DELETE", "/admin/keys/",
      admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { revoke(r, std::move(e)); }),
      Runs::kBlocking);  // a synced write
}

void KeysApi::create(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return respondWithApiError(*exchange, openai::invalidJsonBody("expected a JSON object {\"team\", \"name\"}"));
  }
  for (const char* field : {"team", "name"}) {
    if (!body.contains(field) || !body[field].is_string()) {
      return respondWithApiError(*exchange, openai::invalidRequest(field, "invalid_type",
                                                                   std::string("`") + field + "` must be a string"));
    }
  }
  bool reuse = false;
  if (auto it = body.find("reuse_deleted_team"); it != body.end()) {
    if (!it->is_boolean()) {
      return respondWithApiError(*exchange, openai::invalidRequest("reuse_deleted_team", "invalid_type",
                                                                   "`reuse_deleted_team` must be a boolean"));
    }
    reuse = it->get<bool>();
  }
  auto created = keys_.create(body["team"].get<std::string>(), body["name"].get<std::string>(), reuse);
  if (!created.isOk()) {
    if (created.status().code() == StatusCode::kAlreadyExists) {
      // A deleted team's id: reusing it silently would hand the new owner
      // whatever still names the old team (issue 21, item 10).
      ApiError e = openai::invalidRequest("team", "team_deleted", created.status().message());
      e.http_status = 409;
      return respondWithApiError(*exchange, e);
    }
    if (created.status().code() == StatusCode::kInvalidArgument) {
      const std::string param = created.status().message().rfind("name", 0) == 0 ? "name" : "team";
      return respondWithApiError(*exchange, openai::invalidRequest(param, "invalid_value", created.status().message()));
    }
    return respondWithApiError(*exchange, controlPlaneError(created.status(), "creating an API key"));
  }
  const auto& [info, key] = *created;
  proxyLog()->info("admin created API key {} for team {} (generation {})", info.id, info.team, info.team_generation);
  exchange->respond(200, jsonHeaders(),
                    json{{"id", info.id}, {"key", key}, {"team", info.team}, {"name", info.name}, {"created", info.created_unix}}
                        .dump(-1, ' ', false, json::error_handler_t::replace));
}

void KeysApi::list(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  json data = json::array();
  for (const billing::ApiKeyInfo& k : keys_.list()) {
    data.push_back({{"id", k.id}, {"team", k.team}, {"name", k.name}, {"created", k.created_unix}, {"hint", k.hint}});
  }
  exchange->respond(200, jsonHeaders(),
                    json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void KeysApi::revoke(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const std::string id = request.path.substr(std::string_view("/admin/keys/").size());
  Status s = keys_.revoke(id);
  if (s.code() == StatusCode::kNotFound) {
    ApiError e = openai::invalidRequest("id", "key_not_found", "No API key with this id.");
    e.http_status = 404;
    return respondWithApiError(*exchange, e);
  }
  if (!s.isOk()) return respondWithApiError(*exchange, controlPlaneError(s, "revoking API key " + id));
  proxyLog()->info("admin revoked API key {}", id);
  exchange->respond(200, jsonHeaders(), json{{"id", id}, {"object", "api_key"}, {"deleted", true}}.dump());
}

}  // namespace lg::proxy

#include "proxy/admin/responses_api.h"

#include <nlohmann/json.hpp>

#include "common/unix_time.h"
#include "proxy/admin/control_errors.h"
#include "proxy/admin/usage_json.h"  // parseQuery
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

using nlohmann::json;

void ResponsesAdminApi::addRoutes(Router& router) const {
  router.add("DELETE", "/admin/responses",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { purge(r, std::move(e)); }),
             Runs::kBlocking);  // a scan and synced deletes
}

void ResponsesAdminApi::purge(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const auto q = parseQuery(request.query);
  const auto key_id = q.find("key_id");
  const auto team = q.find("team");
  const bool by_key = key_id != q.end() && !key_id->second.empty();
  const bool by_team = team != q.end() && !team->second.empty();
  if (by_key == by_team) {
    return respondWithApiError(*exchange, openai::invalidRequest(by_key ? "team" : "key_id", "invalid_value",
                                                                 "Name exactly one of `key_id` and `team`."));
  }
  std::vector<std::string> owners;
  if (by_key) {
    owners.push_back(key_id->second);
  } else {
    for (const billing::ApiKeyInfo& k : keys_.list()) {
      if (k.team == team->second) owners.push_back(k.id);
    }
  }
  // Every replica purges these keys' records (replica_purges.h): recorded
  // first, so that a purge refused for PostgreSQL purges nowhere.
  const std::string at = json{{"at_us", unixMicros()}}.dump();
  Status recorded = control_.update("purging stored responses", [&](billing::ControlTxn& txn) {
    for (const std::string& owner : owners) {
      const std::string record = "resppurge/" + owner;
      if (billing::wellFormedControlKey(record)) txn.put(record, at);  // an id no key has is purged nowhere
    }
    return Status::ok();
  });
  if (!recorded.isOk()) return respondWithApiError(*exchange, controlPlaneError(recorded, "purging stored responses"));
  int64_t purged = 0;
  for (const std::string& owner : owners) {
    auto n = responses_.purgeOwner(owner);
    if (!n.isOk()) {
      proxyLog()->error("purging stored responses of {} failed: {}", owner, n.status().toString());
      return respondWithApiError(*exchange, openai::internalError());
    }
    purged += *n;
  }
  proxyLog()->info("admin purged {} stored response(s) of {} {}", purged, by_key ? "key" : "team",
                   by_key ? key_id->second : team->second);
  json out{{"object", "stored_responses.purged"}, {"keys", owners.size()}, {"purged", purged}};
  out[by_key ? "key_id" : "team"] = by_key ? key_id->second : team->second;
  exchange->respond(200, jsonHeaders(), out.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace lg::proxy

#include "proxy/admin/teams_api.h"

#include <thread>

#include <nlohmann/json.hpp>

#include "common/team_id.h"
#include "common/unix_time.h"
#include "proxy/admin/control_errors.h"
#include "proxy/admin/usage_json.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

using nlohmann::json;

namespace {

json teamJson(const billing::TeamInfo& t) {
  return json{{"object", "team"},
              {"id", t.id},
              {"generation", t.generation},
              {"since", t.since_us / 1'000'000},
              {"deleted", t.deleted()},
              {"deleted_at", t.deleted() ? json(t.deleted_us / 1'000'000) : json(nullptr)}};
}

}  // namespace

TeamsApi::TeamsApi(TeamsApiOptions options, billing::KeyStore& keys, const Admission& admission,
                   const Generation& generation, cache::PrefixCache* cache, ResponseStore* responses)
    : options_(std::move(options)),
      keys_(keys),
      admission_(admission),
      generation_(generation),
      cache_(cache),
      responses_(responses) {}

void TeamsApi::addRoutes(Router& router) const {
  router.add("GET", "/admin/teams",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { list(r, std::move(e)); }));
  router.addPrefix(
      "DELETE", "/admin/teams/",
      admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { remove(r, std::move(e)); }),
      Runs::kBlocking);  // synced writes, the disk tier, waiting for requests to end
}

void TeamsApi::list(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  std::map<std::string, int64_t> live_keys;
  for (const billing::ApiKeyInfo& k : keys_.list()) ++live_keys[k.team];
  json data = json::array();
  for (const billing::TeamInfo& t : keys_.teams()) {
    json row = teamJson(t);
    row["keys"] = live_keys[t.id];
    data.push_back(std::move(row));
  }
  exchange->respond(200, jsonHeaders(), json{{"object", "list"}, {"data", data}}.dump());
}

TeamsApi::Purged TeamsApi::purge(const billing::TeamInfo& info) const {
  const std::string& team = info.id;

  // The revocation hook cancelled the keys' requests; wait for them to end,
  // so that no block they publish and no response they store afterwards
  // escapes the purge below. (One that still did could not be hit: no key
  // reads this generation's namespace again.)
  const auto deadline = std::chrono::steady_clock::now() + options_.drain;
  size_t running = 0;
  for (;;) {
    running = 0;
    for (const std::string& key_id : info.key_ids) running += generation_.runningFor(key_id);
    if (running == 0 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (running > 0) {
    proxyLog()->warn("team {} deleted: {} request(s) still running after {} ms; purging anyway", team, running,
                     options_.drain.count());
  }

  json purged = json::object();
  purged["dashboard_sessions"] = options_.drop_sessions ? options_.drop_sessions(team) : 0;
  const cache::TeamNamespace ns = cache::TeamNamespace::ofTeam(team, info.generation).value();
  size_t grants = 0;
  if (cache_ != nullptr) {
    if (auto it = options_.shared_namespaces.find(team); it != options_.shared_namespaces.end()) {
      for (const cache::SharedNamespace& shared : it->second) {
        cache_->revokeShared(shared, ns);
        ++grants;
      }
    }
  }
  purged["shared_grants"] = grants;
  purged["cache_blocks_memory"] = 0;
  purged["cache_blocks_disk"] = 0;
  bool failed = false;
  if (cache_ != nullptr) {
    auto counts = cache_->purgeNamespace(ns);
    if (counts.isOk()) {
      purged["cache_blocks_memory"] = counts->tier0;
      purged["cache_blocks_disk"] = counts->disk;
    } else {
      failed = true;
      proxyLog()->error("team {} deleted, but purging its cache failed: {}", team, counts.status().toString());
    }
  }
  purged["stored_responses"] = 0;
  if (responses_ != nullptr) {
    auto records = responses_->purgeOwners(info.key_ids);
    if (records.isOk()) {
      purged["stored_responses"] = *records;
    } else {
      failed = true;
      proxyLog()->error("team {} deleted, but purging its stored responses failed: {}", team,
                        records.status().toString());
    }
  }
  return Purged{std::move(purged), failed};
}

void TeamsApi::remove(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const std::string team = request.path.substr(std::string_view("/admin/teams/").size());
  if (Status s = checkTeamId(team); !s.isOk()) {
    return respondWithApiError(*exchange, openai::invalidRequest("team", "invalid_value", s.message()));
  }
  auto deleted = keys_.deleteTeam(team, unixMicros());
  if (!deleted.isOk()) {
    if (deleted.status().code() == StatusCode::kNotFound) {
      ApiError e = openai::invalidRequest("team", "team_not_found", "No team with this id.");
      e.http_status = 404;
      return respondWithApiError(*exchange, e);
    }
    return respondWithApiError(*exchange, controlPlaneError(deleted.status(), "deleting team " + team));
  }
  const billing::TeamInfo& info = deleted->team;
  Purged purged = purge(info);
  // A control record: withdrawn here, once, and the erasure reaches every
  // replica through the control plane (not in purge(), which each replica runs).
  purged.counts["snippet_consent"] = 0;
  if (options_.withdraw_snippet_consent) {
    auto withdrawn = options_.withdraw_snippet_consent(team);
    if (withdrawn.isOk()) {
      purged.counts["snippet_consent"] = *withdrawn ? 1 : 0;
    } else {
      purged.failed = true;
      proxyLog()->error("team {} deleted, but withdrawing its snippet consent failed: {}", team,
                        withdrawn.status().toString());
    }
  }
  proxyLog()->info("admin deleted team {} (generation {}): {} key(s) revoked, purged {}", team, info.generation,
                   deleted->revoked.size(), purged.counts.dump());
  if (purged.failed) {
    // The team is deleted (its keys are gone for good); what is left of its
    // data is purged by deleting it again.
    ApiError e = openai::internalError();
    e.message = "Team " + team + " was deleted, but purging its data failed (the server log says why). "
                "Send the DELETE again to finish the purge.";
    return respondWithApiError(*exchange, e);
  }
  json out = teamJson(info);
  out["revoked_keys"] = deleted->revoked.size();
  out["purged"] = purged.counts;
  exchange->respond(200, jsonHeaders(), out.dump());
}

}  // namespace lg::proxy

// TeamsApi: the admin API of teams (issue 21, item 10; docs/gateway.md,
// "Admin API"). A team becomes known when its first key is made
// (billing/key_store.h, TeamInfo).
//
// Admin key:
//   GET    /admin/teams          every team: id, generation, since, deleted_at (null: live), keys
//   DELETE /admin/teams/{team}   deletes the team, in this order:
//     1. revokes its keys and records it deleted, in one synced write (its
//        keys stop authenticating; the revocation hook cancels their
//        requests in flight within an engine step, billed for what ran);
//     2. waits (at most TeamsApiOptions::drain) for those requests to end,
//        so that nothing they still publish or store outlives the purge;
//     3. ends its dashboard sessions;
//     4. withdraws its reads of shared cache namespaces (the grants);
//     5. purges its cache namespace from tier 0 and the disk tier (blocks a
//        running sequence holds stay its own until it releases them; they
//        are no longer indexed, so nothing hits them);
//     6. deletes its keys' stored responses.
//   -> 200 {"object": "team", "id", "deleted": true, "deleted_at", "generation",
//           "revoked_keys", "purged": {"cache_blocks_memory", "cache_blocks_disk",
//           "stored_responses", "dashboard_sessions", "shared_grants"}}
//   404 team_not_found for an id the store never knew. Deleting again runs
//   steps 2 to 6 again (a retry after a failed purge). The ledger keeps the
//   team's entries: they are the accounting, and the usage views mark them.
//   A deleted id is not reused unless POST /admin/keys says
//   "reuse_deleted_team": true, which starts a new generation: a new cache
//   namespace and fingerprint scope (common/team_id.h, teamScope).
//
// With replicas (billing.postgres_url), step 1 is a transaction of the
// control plane in PostgreSQL (503 control_plane_unavailable while it is
// unreachable, nothing deleted) and every other replica runs steps 2 to 6
// for what it holds once its follower applied the deletion (replica_purges.h).
//
// The route waits on synced writes and the disk tier, so it runs on the
// blocking pool.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "billing/key_store.h"
#include "cache/namespace.h"
#include "cache/prefix_cache.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/generation.h"
#include "proxy/gateway/response_store.h"
#include "proxy/http/router.h"

namespace lg::proxy {

struct TeamsApiOptions {
  // The shared namespaces each team id reads (cache.shared_namespaces).
  std::map<std::string, std::vector<cache::SharedNamespace>> shared_namespaces;
  // Ends a team's dashboard sessions; returns how many (the dashboard's).
  std::function<size_t(const std::string& team)> drop_sessions;
  // Withdraws the team's consent to prompt snippets (snippet_consent.h), a
  // control record naming who gave it; true: it had one.
  std::function<Result<bool>(const std::string& team)> withdraw_snippet_consent;
  // How long a deletion waits for the team's cancelled requests to end.
  std::chrono::milliseconds drain{10000};
};

class TeamsApi {
 public:
  // Everything must outlive the server; `cache` and `responses` may be null.
  TeamsApi(TeamsApiOptions options, billing::KeyStore& keys, const Admission& admission,
           const Generation& generation, cache::PrefixCache* cache, ResponseStore* responses);

  void addRoutes(Router& router) const;

  // Steps 2 to 6 for a team deleted (here, or on another replica): the
  // counts of "purged", and whether a step failed (logged).
  struct Purged {
    nlohmann::json counts;
    bool failed = false;
  };
  Purged purge(const billing::TeamInfo& team) const;

 private:
  void list(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void remove(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  const TeamsApiOptions options_;
  billing::KeyStore& keys_;
  const Admission& admission_;
  const Generation& generation_;
  cache::PrefixCache* const cache_;
  ResponseStore* const responses_;
};

}  // namespace lg::proxy

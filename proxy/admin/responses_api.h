// ResponsesAdminApi: the admin's purge of stored responses (issue 21, item 7).
//
//   DELETE /admin/responses?key_id=ID   every stored response of one API key
//   DELETE /admin/responses?team=TEAM   every stored response of the team's keys
//   -> {"object": "stored_responses.purged", "key_id" | "team": ..., "keys": N, "purged": N}
//
// Records are deleted outright (tombstones of client DELETEs included),
// synced, so a purge holds after a crash. Records are stored by key id, so
// `team` purges the team's keys the key store lists (its live keys); a
// revoked key's records are purged by its id (usage and the ledger name it).
// The admin key only; it runs on the blocking pool's admin lane (a scan and
// synced writes). With replicas, the purge is first recorded in the control
// plane (resppurge/<key id>, one per key; 503 control_plane_unavailable and
// nothing purged while PostgreSQL is unreachable), and every other replica
// purges what it holds of those keys once its follower applied it
// (replica_purges.h); the counts are this replica's.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include "billing/control_plane.h"
#include "billing/key_store.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/response_store.h"
#include "proxy/http/router.h"

namespace lg::proxy {

class ResponsesAdminApi {
 public:
  // Everything must outlive the server.
  ResponsesAdminApi(ResponseStore& responses, const billing::KeyStore& keys, billing::ControlPlane& control,
                    const Admission& admission)
      : responses_(responses), keys_(keys), control_(control), admission_(admission) {}

  void addRoutes(Router& router) const;

 private:
  void purge(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  ResponseStore& responses_;
  const billing::KeyStore& keys_;
  billing::ControlPlane& control_;
  const Admission& admission_;
};

}  // namespace lg::proxy

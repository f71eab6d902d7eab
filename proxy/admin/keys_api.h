// KeysApi: the admin API of API keys (docs/gateway.md, "Admin API").
//
// Admin key:
//   POST   /admin/keys        {"team", "name"} -> {"id", "key", "team", "name", "created"} (the key shown only here);
//                              409 team_deleted for a deleted team's id unless the body also says
//                              "reuse_deleted_team": true (a new team under the old id: teams_api.h)
//   GET    /admin/keys        every key: id, team, name, created, hint (never the key)
//   DELETE /admin/keys/{id}   revokes it, effective for the next request
//
// Creating and revoking are synced writes, so those routes run on the
// blocking pool.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <memory>

#include "billing/key_store.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"

namespace lg::proxy {

class KeysApi {
 public:
  // Both must outlive the server.
  KeysApi(billing::KeyStore& keys, const Admission& admission) : keys_(keys), admission_(admission) {}

  void addRoutes(Router& router) const;

 private:
  void create(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void list(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void revoke(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  billing::KeyStore& keys_;
  const Admission& admission_;
};

}  // namespace lg::proxy

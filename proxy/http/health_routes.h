// GET /healthz and GET /readyz, for load balancers and orchestrators.
//
// /healthz answers 200 {"status":"ok"} whenever the process serves HTTP
// (liveness). /readyz asks a readiness check (the model is loaded, the
// scheduler runs) and answers 200 {"status":"ready"} or 503
// {"status":"not_ready","reason":...}; the reason is the check's own words
// and must not name internals a client should not see.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "proxy/http/router.h"

namespace lg::proxy {

struct Readiness {
  bool ready = false;
  std::string reason;  // why not, when not ready
  // Parts' states shown in the body either way ("ledger_drain": "retrying"),
  // words only, no counts or internals; none: the body is just the status.
  std::vector<std::pair<std::string, std::string>> details = {};
};

// Called on an I/O thread for every /readyz: quick and non-blocking (read an
// atomic, not a lock another thread holds for long).
using ReadinessCheck = std::function<Readiness()>;

void addHealthRoutes(Router& router, ReadinessCheck ready);

}  // namespace lg::proxy

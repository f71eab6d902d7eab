#include "proxy/http/health_routes.h"

#include <nlohmann/json.hpp>

namespace lg::proxy {

void addHealthRoutes(Router& router, ReadinessCheck ready) {
  const HttpHeaders headers{{"content-type", "application/json"}, {"cache-control", "no-store"}};
  router.add("GET", "/healthz", [headers](const HttpRequest&, std::shared_ptr<Exchange> exchange) {
    exchange->respond(200, headers, R"({"status":"ok"})");
  });
  router.add("GET", "/readyz", [headers, ready = std::move(ready)](const HttpRequest&, std::shared_ptr<Exchange> exchange) {
    const Readiness r = ready ? ready() : Readiness{false, "no readiness check"};
    if (r.ready && r.details.empty()) return exchange->respond(200, headers, R"({"status":"ready"})");
    nlohmann::ordered_json body = {{"status", r.ready ? "ready" : "not_ready"}};
    if (!r.ready) body["reason"] = r.reason;
    for (const auto& [name, state] : r.details) body[name] = state;
    if (r.ready) return exchange->respond(200, headers, body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    exchange->respond(503, headers, body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  });
}

}  // namespace lg::proxy

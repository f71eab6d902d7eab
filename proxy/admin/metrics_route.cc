#include "proxy/admin/metrics_route.h"

namespace lg::proxy {

void addMetricsRoute(Router& router, const metrics::Registry& registry, const Admission& admission) {
  router.add("GET", "/metrics", admission.forMetrics([&registry](const HttpRequest&, std::shared_ptr<Exchange> exchange) {
    exchange->respond(200, {{"content-type", std::string(metrics::kContentType)}, {"cache-control", "no-store"}},
                      registry.scrape());
  }));
}

}  // namespace lg::proxy

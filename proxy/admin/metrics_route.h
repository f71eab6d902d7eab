// GET /metrics: what every part registered in the metrics registry
// (common/metrics.h), in the Prometheus text format, for the admin key or
// the metrics token (server.metrics_token; Admission::forMetrics). Each part
// writes its own families: the HTTP server's and the routes' (proxy/http/),
// the generations' (proxy/gateway/generation_metrics.h), the scheduler's and
// the memory's (serving/), the cache's (cache/), the ledger's and the
// budgets' (billing/); this route only collects. docs/metrics.md lists every
// family.
#pragma once

#include "common/metrics.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"

namespace lg::proxy {

// Content-Type `text/plain; version=0.0.4; charset=utf-8`, no caching. The
// registry and the admission must outlive the router.
void addMetricsRoute(Router& router, const metrics::Registry& registry, const Admission& admission);

}  // namespace lg::proxy

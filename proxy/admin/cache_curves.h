// GET /admin/cache/mrc: what more (or less) cache would buy, per tier: the
// prefix cache's miss-ratio curves (cache/miss_ratio_curve.h; docs/cache.md,
// "What more cache would buy"). Admin key only: a curve is a property of the
// whole cache, every team's traffic together, so no team key sees it.
//
//   -> 200 {"object": "cache.miss_ratio_curves", "tiers": [
//        {"tier": "tier0" | "disk", "size_blocks", "size_bytes", "block_bytes",
//         "hit_ratio_today", "sampling_rate", "accesses", "sampled_accesses",
//         "samples", "memory_bytes", "reliable_from_blocks" (null: none yet),
//         "points": [{"size_factor", "blocks", "bytes", "hit_ratio", "reliable"}, ...]}]}
//
// Points run from 1/16x to 16x today's size, four per doubling; today's
// size is size_factor 1. "tiers" is empty with the cache off or
// cache.mrc_max_samples = 0, and has no "disk" without a disk tier.
//
// Thread-safety: the route runs on an I/O thread and takes each curve's short
// lock once.
#pragma once

#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"

namespace lg::proxy {

// The answer's JSON text (the dashboard shows the same).
std::string missRatioCurvesJson(const std::vector<cache::MrcCurve>& curves);

class CacheCurvesApi {
 public:
  // `cache` may be null (cache.enabled false). Both must outlive the server.
  CacheCurvesApi(const cache::PrefixCache* cache, const Admission& admission) : cache_(cache), admission_(admission) {}
  void addRoutes(Router& router) const;

 private:
  const cache::PrefixCache* cache_;
  const Admission& admission_;
};

}  // namespace lg::proxy

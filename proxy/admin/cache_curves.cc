#include "proxy/admin/cache_curves.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "proxy/http/http_errors.h"
#include "proxy/openai/sse.h"  // jsonText

namespace lg::proxy {

using nlohmann::json;

std::string missRatioCurvesJson(const std::vector<cache::MrcCurve>& curves) {
  json tiers = json::array();
  for (const cache::MrcCurve& c : curves) {
    json points = json::array();
    for (const cache::MrcCurvePoint& p : c.points) {
      points.push_back({{"size_factor", p.size_factor},
                        {"blocks", p.blocks},
                        {"bytes", p.bytes},
                        {"hit_ratio", p.hit_ratio},
                        {"reliable", p.reliable}});
    }
    const cache::MrcTierStats& s = c.stats;
    tiers.push_back({{"tier", c.tier},
                     {"size_blocks", s.today_blocks},
                     {"size_bytes", s.today_blocks * s.block_bytes},
                     {"block_bytes", s.block_bytes},
                     {"hit_ratio_today", s.hit_ratio[1]},
                     {"sampling_rate", s.sampling_rate},
                     {"accesses", s.accesses},
                     {"sampled_accesses", s.sampled_accesses},
                     {"samples", s.samples},
                     {"memory_bytes", s.memory_bytes},
                     // null: no size is reliable yet (fewer than 512 sampled accesses)
                     {"reliable_from_blocks", std::isfinite(s.reliable_from_blocks) ? json(s.reliable_from_blocks)
                                                                                    : json(nullptr)},
                     {"points", std::move(points)}});
  }
  return openai::jsonText(json{{"object", "cache.miss_ratio_curves"}, {"tiers", std::move(tiers)}});
}

void CacheCurvesApi::addRoutes(Router& router) const {
  router.add("GET", "/admin/cache/mrc", admission_.forAdmin([this](const HttpRequest&, std::shared_ptr<Exchange> e) {
    const std::vector<cache::MrcCurve> curves =
        cache_ != nullptr ? cache_->missRatioCurves() : std::vector<cache::MrcCurve>{};
    e->respond(200, jsonHeaders(), missRatioCurvesJson(curves));
  }), Runs::kOnIoThread);
}

}  // namespace lg::proxy

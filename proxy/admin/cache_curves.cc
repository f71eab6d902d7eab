#include "proxy/admin/cache_curves.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "common/unix_time.h"
#include "proxy/http/http_errors.h"
#include "proxy/openai/sse.h"  // jsonText

namespace lg::proxy {

using nlohmann::json;

namespace {

constexpr double kMsPerDay = 86'400'000;

json pricesJson(const CurvePrices& p) {
  return {{"model", p.model},
          {"priced_as", p.applied.priced_as},
          {"price_version", p.applied.version},
          {"price_window", p.applied.window},
          {"rates", {{"input_cache_hit", p.applied.rates.input_cache_hit},
                     {"input_cache_miss", p.applied.rates.input_cache_miss}}}};
}

}  // namespace

std::string missRatioCurvesJson(const std::vector<cache::MrcCurve>& curves, const CurvePrices& prices) {
  // A block access that hits instead of missing bills its tokens at the
  // cache-hit rate instead of the cache-miss rate (whichever tier it is on).
  const int64_t saved_per_token = prices.applied.rates.input_cache_miss - prices.applied.rates.input_cache_hit;
  json tiers = json::array();
  for (const cache::MrcCurve& c : curves) {
    const cache::MrcTierStats& s = c.stats;
    const double hit_ratio_today = s.hit_ratio[1];  // kMrcSizeFactors[1] == 1
    // The traffic the curve saw, per day; 0 before it has counted at all.
    const double accesses_per_day =
        s.counted_ms > 0 ? static_cast<double>(s.accesses) * kMsPerDay / static_cast<double>(s.counted_ms) : 0;
    // A difference of two points is as reliable as the less reliable one.
    const bool today_reliable = static_cast<double>(s.today_blocks) >= s.reliable_from_blocks;
    const bool counted_long_enough = s.counted_ms >= kMinCountedMsForSavings;
    json points = json::array();
    for (const cache::MrcCurvePoint& p : c.points) {
      // The ratios are estimates (doubles); the tokens are rounded once, and
      // the money stays integer pico-dollars until it is written.
      const int64_t extra_hit_tokens =
          std::llround((p.hit_ratio - hit_ratio_today) * accesses_per_day * static_cast<double>(s.block_tokens));
      const Int128 savings_pico = Int128{extra_hit_tokens} * saved_per_token;
      points.push_back({{"size_factor", p.size_factor},
                        {"blocks", p.blocks},
                        {"bytes", p.bytes},
                        {"hit_ratio", p.hit_ratio},
                        {"reliable", p.reliable},
                        {"extra_hit_tokens_per_day", extra_hit_tokens},
                        {"savings_per_day", billing::usd(savings_pico)},
                        {"savings_reliable", p.reliable && today_reliable && counted_long_enough}});
    }
    tiers.push_back({{"tier", c.tier},
                     {"size_blocks", s.today_blocks},
                     {"size_bytes", s.today_blocks * s.block_bytes},
                     {"block_bytes", s.block_bytes},
                     {"block_tokens", s.block_tokens},
                     {"hit_ratio_today", hit_ratio_today},
                     {"sampling_rate", s.sampling_rate},
                     {"accesses", s.accesses},
                     {"sampled_accesses", s.sampled_accesses},
                     {"samples", s.samples},
                     {"memory_bytes", s.memory_bytes},
                     // null: no size is reliable yet (fewer than 512 sampled accesses)
                     {"reliable_from_blocks", std::isfinite(s.reliable_from_blocks) ? json(s.reliable_from_blocks)
                                                                                    : json(nullptr)},
                     {"counted_seconds", static_cast<double>(s.counted_ms) / 1000},
                     {"accesses_per_day", s.counted_ms > 0 ? json(std::llround(accesses_per_day)) : json(nullptr)},
                     {"points", std::move(points)}});
  }
  return openai::jsonText(
      json{{"object", "cache.miss_ratio_curves"}, {"prices", pricesJson(prices)}, {"tiers", std::move(tiers)}});
}

CurvePrices curvePricesAt(const Admission& admission, const std::string& served_model, int64_t unix_us) {
  return CurvePrices{served_model, admission.metering().ratesFor(served_model, unix_us)};
}

void CacheCurvesApi::addRoutes(Router& router) const {
  router.add("GET", "/admin/cache/mrc", admission_.forAdmin([this](const HttpRequest&, std::shared_ptr<Exchange> e) {
    const std::vector<cache::MrcCurve> curves =
        cache_ != nullptr ? cache_->missRatioCurves() : std::vector<cache::MrcCurve>{};
    e->respond(200, jsonHeaders(), missRatioCurvesJson(curves, curvePricesAt(admission_, served_model_, unixMicros())));
  }), Runs::kOnIoThread);
}

}  // namespace lg::proxy

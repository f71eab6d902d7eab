// GET /admin/cache/mrc: what more (or less) cache would buy, per tier: the
// prefix cache's miss-ratio curves (cache/miss_ratio_curve.h; docs/cache.md,
// "What more cache would buy"). Admin key only: a curve is a property of the
// whole cache, every team's traffic together, so no team key sees it.
//
//   -> 200 {"object": "cache.miss_ratio_curves",
//        "prices": {"model", "priced_as", "price_version", "price_window",
//                   "rates": {"input_cache_hit", "input_cache_miss"}},
//        "tiers": [
//        {"tier": "tier0" | "disk", "size_blocks", "size_bytes", "block_bytes",
//         "block_tokens", "hit_ratio_today", "sampling_rate", "accesses",
//         "sampled_accesses", "samples", "memory_bytes",
//         "reliable_from_blocks" (null: none yet), "counted_seconds",
//         "accesses_per_day" (null: nothing counted yet),
//         "points": [{"size_factor", "blocks", "bytes", "hit_ratio", "reliable",
//                     "extra_hit_tokens_per_day", "savings_per_day",
//                     "savings_reliable"}, ...]}]}
//
// Points run from 1/16x to 16x today's size, four per doubling; today's
// size is size_factor 1. "tiers" is empty with the cache off or
// cache.mrc_max_samples = 0, and has no "disk" without a disk tier.
//
// What a size would have been worth (docs/cache.md, "What more cache would
// buy"): the curve's block accesses per day (its accesses over the time it
// has counted) x (hit_ratio - hit_ratio_today) x block_tokens are the
// tokens a day that would have been read from the cache instead of computed
// (negative below today's size), "extra_hit_tokens_per_day"; each is billed
// input_cache_hit instead of input_cache_miss, so at the served model's
// rates in force now that is "savings_per_day", exact dollars as the usage
// API writes them ("-1.12896": what the smaller cache would cost). Rates
// are integers (pico-dollars a token, as in the ledger's entries).
// "savings_reliable" is false where the point or today's size is estimated
// from few samples, or the curve has counted for less than an hour (a day
// extrapolated from minutes).
//
// Thread-safety: the route runs on an I/O thread and takes each curve's short
// lock once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "billing/prices.h"
#include "cache/prefix_cache.h"
#include "proxy/gateway/admission.h"
#include "proxy/http/router.h"

namespace lg::proxy {

// Less counting than this and a per-day figure is an extrapolation from a
// few minutes of traffic: its savings are not marked reliable.
inline constexpr int64_t kMinCountedMsForSavings = 3'600'000;

// The prices a curve's points are worth at: the served model's, in force now.
struct CurvePrices {
  std::string model;              // the served model, as prices name it
  billing::AppliedRates applied;  // its rates now (Metering::ratesFor)
};

// The answer's JSON text (the dashboard shows the same).
std::string missRatioCurvesJson(const std::vector<cache::MrcCurve>& curves, const CurvePrices& prices);

// The served model's prices in force at `unix_us`, as `admission`'s
// metering reads them.
CurvePrices curvePricesAt(const Admission& admission, const std::string& served_model, int64_t unix_us);

class CacheCurvesApi {
 public:
  // `cache` may be null (cache.enabled false). Both must outlive the server.
  // `served_model`: the model id the gateway serves (what prices name).
  CacheCurvesApi(const cache::PrefixCache* cache, const Admission& admission, std::string served_model)
      : cache_(cache), admission_(admission), served_model_(std::move(served_model)) {}
  void addRoutes(Router& router) const;

 private:
  const cache::PrefixCache* cache_;
  const Admission& admission_;
  const std::string served_model_;
};

}  // namespace lg::proxy

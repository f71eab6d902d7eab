// GET /admin/cache/mrc's JSON (proxy/admin/cache_curves.h) from fixed
// curves, time counted and rates: what each size would have been worth a
// day, checked to the token and the pico-dollar; which estimates are marked
// unreliable. tests/integration/dashboard_test.cc drives the route itself.
#include "proxy/admin/cache_curves.h"

#include <limits>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace lg::proxy {
namespace {

using json = nlohmann::json;

// DeepSeek's list: $0.028 hit, $0.28 miss per 1M tokens; a hit saves 252,000
// pico-dollars a token.
CurvePrices deepSeekPrices() {
  CurvePrices p;
  p.model = "demo";
  p.applied.rates = billing::kDeepSeekRates;
  p.applied.version = 3;
  p.applied.priced_as = "*";
  return p;
}

// A tier of 1,000 blocks of 16 tokens that saw 1,000,000 block accesses in
// `counted_ms`; today it hits 84%, at 2x 91%, at 0.5x 70% (below the 512
// blocks from which the estimate is reliable).
cache::MrcCurve fixedCurve(int64_t counted_ms) {
  cache::MrcCurve c;
  c.tier = "disk";
  c.stats.present = true;
  c.stats.today_blocks = 1000;
  c.stats.block_bytes = 4096;
  c.stats.block_tokens = 16;
  c.stats.counted_ms = counted_ms;
  c.stats.accesses = 1'000'000;
  c.stats.sampled_accesses = 10'000;
  c.stats.samples = 900;
  c.stats.sampling_rate = 0.01;
  c.stats.reliable_from_blocks = 512;
  c.stats.hit_ratio = {0.70, 0.84, 0.91, 0.93, 0.94};
  const double factors[] = {0.5, 1, 2};
  const double ratios[] = {0.70, 0.84, 0.91};
  for (int i = 0; i < 3; ++i) {
    cache::MrcCurvePoint p;
    p.size_factor = factors[i];
    p.blocks = static_cast<uint64_t>(1000 * factors[i]);
    p.bytes = p.blocks * 4096;
    p.hit_ratio = ratios[i];
    p.reliable = static_cast<double>(p.blocks) >= c.stats.reliable_from_blocks;
    c.points.push_back(p);
  }
  return c;
}

TEST(CacheCurvesJsonTest, EachSizeIsWorthItsExtraHitTokensADayAtTheMissMinusHitRate) {
  const json j = json::parse(missRatioCurvesJson({fixedCurve(12 * 3'600'000)}, deepSeekPrices()));
  EXPECT_EQ(j["prices"], json::parse(R"({"model": "demo", "priced_as": "*", "price_version": 3, "price_window": -1,
                                         "rates": {"input_cache_hit": 28000, "input_cache_miss": 280000}})"));
  const json& t = j["tiers"][0];
  EXPECT_EQ(t["block_tokens"], 16);
  EXPECT_EQ(t["counted_seconds"], 43200.0);
  EXPECT_EQ(t["accesses_per_day"], 2'000'000);  // 1M accesses in 12 hours
  EXPECT_EQ(t["hit_ratio_today"], 0.84);
  ASSERT_EQ(t["points"].size(), 3u);
  // 2x: (0.91 - 0.84) x 2M accesses x 16 tokens = 2,240,000 tokens a day
  // read instead of computed, x 252,000 pico-dollars = $0.56448.
  const json& twice = t["points"][2];
  EXPECT_EQ(twice["extra_hit_tokens_per_day"], 2'240'000);
  EXPECT_EQ(twice["savings_per_day"], "0.56448");
  EXPECT_EQ(twice["savings_reliable"], true);
  // Today's size is worth nothing more.
  EXPECT_EQ(t["points"][1]["extra_hit_tokens_per_day"], 0);
  EXPECT_EQ(t["points"][1]["savings_per_day"], "0");
  EXPECT_EQ(t["points"][1]["savings_reliable"], true);
  // 0.5x: (0.70 - 0.84) x 2M x 16 = -4,480,000 tokens: what less cache would
  // cost, and from few samples.
  const json& half = t["points"][0];
  EXPECT_EQ(half["extra_hit_tokens_per_day"], -4'480'000);
  EXPECT_EQ(half["savings_per_day"], "-1.12896");
  EXPECT_EQ(half["reliable"], false);
  EXPECT_EQ(half["savings_reliable"], false);
}

TEST(CacheCurvesJsonTest, TheRatesInForceSetTheSavings) {
  CurvePrices prices = deepSeekPrices();
  prices.applied.rates = {100'000, 1'100'000, 0};  // a hit saves $1 per 1M tokens
  prices.applied.window = 0;
  const json j = json::parse(missRatioCurvesJson({fixedCurve(12 * 3'600'000)}, prices));
  EXPECT_EQ(j["prices"]["price_window"], 0);
  EXPECT_EQ(j["tiers"][0]["points"][2]["savings_per_day"], "2.24");  // 2,240,000 tokens
}

TEST(CacheCurvesJsonTest, LessThanAnHourCountedOrAnUnreliableTodayMakesNoSavingReliable) {
  // 1M accesses in 30 minutes: 48M a day, extrapolated from half an hour.
  const json early = json::parse(missRatioCurvesJson({fixedCurve(1'800'000)}, deepSeekPrices()));
  EXPECT_EQ(early["tiers"][0]["accesses_per_day"], 48'000'000);
  EXPECT_EQ(early["tiers"][0]["points"][2]["extra_hit_tokens_per_day"], 53'760'000);
  EXPECT_EQ(early["tiers"][0]["points"][2]["savings_per_day"], "13.54752");
  for (const json& p : early["tiers"][0]["points"]) EXPECT_EQ(p["savings_reliable"], false) << p.dump();

  // Today's size itself estimated from few samples: every difference is.
  cache::MrcCurve few = fixedCurve(12 * 3'600'000);
  few.stats.reliable_from_blocks = 1500;
  few.points[2].reliable = true;  // 2,000 blocks
  const json j = json::parse(missRatioCurvesJson({few}, deepSeekPrices()));
  for (const json& p : j["tiers"][0]["points"]) EXPECT_EQ(p["savings_reliable"], false) << p.dump();
}

TEST(CacheCurvesJsonTest, NothingCountedYetIsNoTrafficAndNoSavings) {
  cache::MrcCurve c = fixedCurve(0);
  c.stats.accesses = 0;
  c.stats.reliable_from_blocks = std::numeric_limits<double>::infinity();
  const json t = json::parse(missRatioCurvesJson({c}, deepSeekPrices()))["tiers"][0];
  EXPECT_TRUE(t["accesses_per_day"].is_null());
  EXPECT_TRUE(t["reliable_from_blocks"].is_null());
  for (const json& p : t["points"]) {
    EXPECT_EQ(p["extra_hit_tokens_per_day"], 0);
    EXPECT_EQ(p["savings_per_day"], "0");
    EXPECT_EQ(p["savings_reliable"], false);
  }
}

}  // namespace
}  // namespace lg::proxy

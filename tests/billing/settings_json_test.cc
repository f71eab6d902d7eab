// Billing's settings as JSON (billing/settings_json.h) on their own, without
// the configuration or the billing store: exact dollars, the canonical text
// read back to the same values, and errors that name the field, word for
// word (the admin API returns them to its callers). How a config file, the
// environment and flags give the same objects is in budgets_test.cc and
// prices_test.cc.
#include "billing/settings_json.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace lg {
namespace {

TEST(BudgetSettingTest, ParsesExactDollarsAndRefusesTheRest) {
  auto b = parseBudget(R"({"limit": "25.50", "period": "day"})", "b");
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_TRUE(b->enabled);
  EXPECT_EQ(b->limit, int64_t{25'500'000'000'000});
  EXPECT_EQ(b->soft_limit, int64_t{20'400'000'000'000});  // 80%
  EXPECT_EQ(b->period, BudgetPeriodSetting::kDay);
  EXPECT_EQ(*parseBudget(budgetToJson(*b), "b"), *b);
  auto none = parseBudget(R"({"limit": null})", "b");
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->enabled);
  EXPECT_EQ(parseBudget(R"({"limit": "1"})", "b")->period, BudgetPeriodSetting::kMonth);
  for (const char* bad : {R"({"limit": 25})", R"({"limit": "25.5", "period": "week"})", R"({"limit": "-1"})",
                          R"({"limit": "1", "soft_limit": "2"})", R"({"limit": "1e3"})", R"({"period": "day"})",
                          R"({"limit": "1", "extra": 1})", R"({"limit": null, "period": "day"})", R"([1])", "nope",
                          R"({"limit": "1000001"})", R"({"limit": "0.0000000000001"})"}) {
    EXPECT_FALSE(parseBudget(bad, "b").isOk()) << bad;
  }
}

TEST(BudgetSettingTest, ErrorsNameTheFieldWordForWord) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"limit": 25})", "budget.limit: expected USD as a decimal string such as \"25.00\" (exact; a JSON number would "
                           "be read as binary floating point), got 25"},
      {R"({"limit": "25.5", "period": "week"})", R"(budget.period: expected "day", "month" or "total", got "week")"},
      {R"({"limit": "1", "period": 3})", R"(budget.period: expected "day", "month" or "total", got "3")"},
      {R"({"limit": "1", "soft_limit": "2"})", "budget.soft_limit: 2 is above the limit 1"},
      {R"({"limit": "1e3"})", R"(budget.limit: expected a decimal number such as "0.028" (digits and one point), got "1e3" )"
                              "(USD, at most 12 decimals, at most 1000000)"},
      {R"({"limit": "1000001"})", R"(budget.limit: "1000001" is too large (USD, at most 12 decimals, at most 1000000))"},
      {R"({"period": "day"})", "budget.limit: missing (USD, or null for no budget)"},
      {R"({"limit": "1", "extra": 1})", R"(budget: unknown field "extra" (limit, period, soft_limit))"},
      {R"({"limit": null, "period": "day"})", R"(budget: a budget with "limit": null takes no other field)"},
      {R"([1])", R"(budget: expected an object {"limit": "25.00", "period": "month", "soft_limit": "20.00"}, got [1])"},
      {"nope", "budget: not JSON"},
  };
  for (const auto& [text, message] : cases) {
    auto b = parseBudget(text, "budget");
    ASSERT_FALSE(b.isOk()) << text;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(b.status().message(), message) << text;
  }
}

TEST(BudgetSettingTest, WrittenCanonically) {
  BudgetSetting b;
  EXPECT_EQ(budgetToJson(b), R"({"limit":null})");
  b.enabled = true;
  b.limit = int64_t{5'000'000'000'000};
  b.soft_limit = int64_t{4'000'000'000'000};
  b.period = BudgetPeriodSetting::kDay;
  EXPECT_EQ(budgetToJson(b), R"({"limit":"5","period":"day","soft_limit":"4"})");
  EXPECT_EQ(budgetPeriodName(BudgetPeriodSetting::kDay), "day");
  EXPECT_EQ(budgetPeriodName(BudgetPeriodSetting::kMonth), "month");
  EXPECT_EQ(budgetPeriodName(BudgetPeriodSetting::kTotal), "total");
}

TEST(PriceTableSettingTest, ReadsExactRatesAndWindowsAndWritesThemCanonically) {
  auto t = parsePriceTable(R"({"*": {"input_cache_hit": "0.028", "input_cache_miss": "0.28", "output": 1,
      "windows": [{"start": "16:30", "end": "00:30", "output": "0.2"}]}})",
                           "prices");
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  const ModelPriceSetting& star = t->at("*");
  EXPECT_EQ(star.rates, (PriceRatesSetting{28'000, 280'000, 1'000'000}));
  ASSERT_EQ(star.windows.size(), 1u);
  EXPECT_EQ(star.windows[0].start_minute, 16 * 60 + 30);
  EXPECT_EQ(star.windows[0].end_minute, 30);
  EXPECT_EQ(star.windows[0].rates, (PriceRatesSetting{28'000, 280'000, 200'000}));  // the others stay the model's
  const std::string canonical =
      R"({"*":{"input_cache_hit":"0.028","input_cache_miss":"0.28","output":"1","windows":[{"end":"00:30",)"
      R"("input_cache_hit":"0.028","input_cache_miss":"0.28","output":"0.2","start":"16:30"}]}})";
  EXPECT_EQ(priceTableToJson(*t), canonical);
  EXPECT_EQ(*parsePriceTable(canonical, "prices"), *t);
}

TEST(PriceTableSettingTest, ErrorsNameTheFieldWordForWord) {
  const std::string rates = R"("input_cache_hit": "1", "input_cache_miss": "1", "output": "1")";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", R"(prices: expected an object of models, {"*": {"input_cache_hit": "0.028", ...}}, got [])"},
      {"nope", "prices: not JSON"},
      {R"({"a/b": {}})",
       R"(prices: "a/b" is not a model id (1..128 printable characters without '/', or "*" for every other model))"},
      {R"({"*": 1})", R"(prices.*: expected {"input_cache_hit", "input_cache_miss", "output", "windows"}, got 1)"},
      {R"({"*": {"input_cache_hit": 0.028, "input_cache_miss": "0.28", "output": "0.42"}})",
       R"(prices.*.input_cache_hit: expected USD per 1M tokens as a decimal string such as "0.028" (exact; a JSON )"
       "number with a fraction would be read as binary floating point), got 0.028"},
      {R"({"*": {"input_cache_hit": "0.028", "output": "0.42"}})",
       "prices.*.input_cache_miss: missing (USD per 1M tokens)"},
      {R"({"*": {"input_cache_hit": "0.0000001", "input_cache_miss": "0.28", "output": "0.42"}})",
       R"(prices.*.input_cache_hit: "0.0000001" has more than 6 digits after the point (it cannot be held exactly) )"
       "(USD per 1M tokens, at most 6 decimals, at most 1000)"},
      {R"({"*": {"input_cache_hit": 1001, "input_cache_miss": "0.28", "output": "0.42"}})",
       "prices.*.input_cache_hit: 1001 is above $1000 per 1M tokens"},
      {R"({"*": {)" + rates + R"(, "typo": "1"}})",
       R"(prices.*: unknown field "typo" (expected input_cache_hit, input_cache_miss, output, windows))"},
      {R"({"*": {)" + rates + R"(, "windows": 3}})",
       "prices.*.windows: expected a list of at most 24 time windows, got 3"},
      {R"({"*": {)" + rates + R"(, "windows": [1]}})",
       R"(prices.*.windows[0]: expected {"start": "HH:MM", "end": "HH:MM", rates...})"},
      {R"({"*": {)" + rates + R"(, "windows": [{"start": "01:00"}]}})",
       R"(prices.*.windows[0]: needs start and end ("HH:MM", UTC))"},
      {R"({"*": {)" + rates + R"(, "windows": [{"start": "01:00", "end": "02:00", "x": 1}]}})",
       R"(prices.*.windows[0]: unknown field "x" (expected start, end, input_cache_hit, input_cache_miss, output))"},
      {R"({"*": {)" + rates + R"(, "windows": [{"start": "25:00", "end": "01:00"}]}})",
       R"(prices.*.windows[0].start: expected a UTC time "HH:MM" (00:00..24:00), got "25:00")"},
      {R"({"*": {)" + rates + R"(, "windows": [{"start": "01:00", "end": "01:00"}]}})",
       "prices.*.windows[0]: start and end are the same time (an empty or whole-day window)"},
  };
  for (const auto& [text, message] : cases) {
    auto t = parsePriceTable(text, "prices");
    ASSERT_FALSE(t.isOk()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(t.status().message(), message) << text;
  }
}

}  // namespace
}  // namespace lg

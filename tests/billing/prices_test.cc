// Prices: exact decimals (never a double), the DeepSeek defaults, time-of-day
// windows (UTC, wrapping midnight), and the history of tables in the real
// RocksDB billing store (config recorded when it changes, admin versions
// effective later, no retroactive changes, reopened intact).
#include "billing/prices.h"

#include <gtest/gtest.h>

#include "common/decimal.h"
#include "config/config.h"
#include "tests/support/temp_dir.h"

namespace lg::billing {
namespace {

constexpr int64_t kUs = 1'000'000;
// 2026-01-01T00:00:00Z
constexpr int64_t kDay0 = int64_t{1767225600} * kUs;

int64_t at(int hour, int minute) { return kDay0 + (int64_t{hour} * 3600 + minute * 60) * kUs; }

TEST(DecimalTest, ParsesExactlyAndRefusesWhatWouldRound) {
  EXPECT_EQ(*parseFixedDecimal("0.028", 6, 1'000'000'000), 28'000);
  EXPECT_EQ(*parseFixedDecimal("0.28", 6, 1'000'000'000), 280'000);
  EXPECT_EQ(*parseFixedDecimal("0.42", 6, 1'000'000'000), 420'000);
  EXPECT_EQ(*parseFixedDecimal("12", 6, 1'000'000'000), 12'000'000);
  EXPECT_EQ(*parseFixedDecimal(".5", 6, 1'000'000'000), 500'000);
  EXPECT_EQ(*parseFixedDecimal("3.", 6, 1'000'000'000), 3'000'000);
  EXPECT_EQ(*parseFixedDecimal("0.000001", 6, 1'000'000'000), 1);
  EXPECT_EQ(*parseFixedDecimal("0.0280000000", 6, 1'000'000'000), 28'000);  // trailing zeros are exact
  EXPECT_EQ(*parseFixedDecimal("1000", 6, 1'000'000'000), 1'000'000'000);
  // 0.1 + 0.2 style inputs that a double would not hold are exact here.
  EXPECT_EQ(*parseFixedDecimal("0.1", 6, 1'000'000'000) + *parseFixedDecimal("0.2", 6, 1'000'000'000),
            *parseFixedDecimal("0.3", 6, 1'000'000'000));
  for (const char* bad : {"", ".", "-1", "+1", "1e3", "0.0000001", "1,5", " 1", "1 ", "0x10", "1000.000001",
                          "99999999999999999999999999"}) {
    EXPECT_FALSE(parseFixedDecimal(bad, 6, 1'000'000'000).isOk()) << bad;
  }
}

TEST(DecimalTest, FormatsExactDollars) {
  EXPECT_EQ(usd(0), "0");
  EXPECT_EQ(usd(1'792'000), "0.000001792");  // 64 hit tokens at $0.028 per 1M
  EXPECT_EQ(usd(1'000'000'000'000), "1");
  EXPECT_EQ(usd(1), "0.000000000001");
  EXPECT_EQ(usd(-1'500'000'000'000), "-1.5");
  EXPECT_EQ(usd(static_cast<Int128>(INT64_MAX) * 1000), "9223372036.854775807");
  EXPECT_EQ(usdCents(0), "0.00");
  EXPECT_EQ(usdCents(12'349'999'999'999), "12.34");  // rounded down, at display only
  EXPECT_EQ(usdCents(999'999'999), "0.00");
}

TEST(PricesTest, DefaultsAreDeepSeeksListForAnyModel) {
  PriceTable empty;
  const AppliedRates r = empty.at("demo", kDay0);
  EXPECT_EQ(r.rates, (Rates{28'000, 280'000, 420'000}));
  EXPECT_EQ(r.priced_as, "default");
  // 64 hit, 10 miss, 5 output tokens.
  const Cost c = costOf(r.rates, 64, 10, 5);
  EXPECT_EQ(usd(c.input_cache_hit), "0.000001792");
  EXPECT_EQ(usd(c.input_cache_miss), "0.0000028");
  EXPECT_EQ(usd(c.output), "0.0000021");
  EXPECT_EQ(usd(c.total()), "0.000006692");
}

PriceTable parse(const std::string& text) {
  auto t = parsePriceTableJson(text, "prices");
  EXPECT_TRUE(t.isOk()) << t.status().toString();
  return t.isOk() ? *t : PriceTable{};
}

TEST(PricesTest, ModelThenStarThenDefaults) {
  const PriceTable t = parse(R"({"demo": {"input_cache_hit": "0.01", "input_cache_miss": "0.1", "output": "1"},
                                 "*": {"input_cache_hit": "0.02", "input_cache_miss": "0.2", "output": 2}})");
  EXPECT_EQ(t.at("demo", kDay0).rates, (Rates{10'000, 100'000, 1'000'000}));
  EXPECT_EQ(t.at("demo", kDay0).priced_as, "demo");
  EXPECT_EQ(t.at("other", kDay0).rates, (Rates{20'000, 200'000, 2'000'000}));
  EXPECT_EQ(t.at("other", kDay0).priced_as, "*");
  const PriceTable only = parse(R"({"demo": {"input_cache_hit": "0.01", "input_cache_miss": "0.1", "output": "1"}})");
  EXPECT_EQ(only.at("other", kDay0).rates, kDeepSeekRates);
}

TEST(PricesTest, TimeWindowsInUtcWrapPastMidnight) {
  // DeepSeek's former off-peak hours, 16:30 to 00:30 UTC, and a morning window.
  const PriceTable t = parse(R"({"*": {"input_cache_hit": "0.07", "input_cache_miss": "0.27", "output": "1.1",
      "windows": [{"start": "16:30", "end": "00:30", "input_cache_hit": "0.035", "input_cache_miss": "0.135", "output": "0.55"},
                  {"start": "08:00", "end": "09:00", "output": "0.9"}]}})");
  EXPECT_EQ(t.at("m", at(12, 0)).window, -1);
  EXPECT_EQ(t.at("m", at(12, 0)).rates, (Rates{70'000, 270'000, 1'100'000}));
  EXPECT_EQ(t.at("m", at(16, 29)).window, -1);
  EXPECT_EQ(t.at("m", at(16, 30)).window, 0);
  EXPECT_EQ(t.at("m", at(16, 30)).rates, (Rates{35'000, 135'000, 550'000}));
  EXPECT_EQ(t.at("m", at(23, 59)).window, 0);
  EXPECT_EQ(t.at("m", at(0, 0)).window, 0);
  EXPECT_EQ(t.at("m", at(0, 29)).window, 0);
  EXPECT_EQ(t.at("m", at(0, 30)).window, -1);  // [start, end)
  // A window naming only some rates keeps the model's others.
  EXPECT_EQ(t.at("m", at(8, 15)).window, 1);
  EXPECT_EQ(t.at("m", at(8, 15)).rates, (Rates{70'000, 270'000, 900'000}));
  EXPECT_EQ(t.at("m", at(9, 0)).window, -1);
}

TEST(PricesTest, BadTablesNameTheField) {
  const auto error = [](const std::string& text) {
    auto t = parsePriceTableJson(text, "prices");
    return t.isOk() ? std::string("ok") : t.status().message();
  };
  EXPECT_NE(error(R"({"*": {"input_cache_hit": 0.028, "input_cache_miss": "0.28", "output": "0.42"}})").find("prices.*.input_cache_hit"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "0.028", "output": "0.42"}})").find("input_cache_miss: missing"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "0.0000001", "input_cache_miss": "0.28", "output": "0.42"}})").find("more than 6 digits"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "1001", "input_cache_miss": "0.28", "output": "0.42"}})").find("too large"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "1", "input_cache_miss": "1", "output": "1", "typo": "1"}})").find("unknown field"), std::string::npos);
  EXPECT_NE(error(R"({"a/b": {"input_cache_hit": "1", "input_cache_miss": "1", "output": "1"}})").find("not a model id"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "1", "input_cache_miss": "1", "output": "1",
                            "windows": [{"start": "25:00", "end": "01:00"}]}})").find("windows[0].start"), std::string::npos);
  EXPECT_NE(error(R"({"*": {"input_cache_hit": "1", "input_cache_miss": "1", "output": "1",
                            "windows": [{"start": "01:00", "end": "01:00"}]}})").find("same time"), std::string::npos);
  EXPECT_EQ(error("[]").find("expected an object"), std::string("prices: ").size());
}

TEST(PricesTest, JsonRoundTripsCanonically) {
  const std::string text =
      R"({"*":{"input_cache_hit":"0.028","input_cache_miss":"0.28","output":"0.42","windows":[{"end":"00:30","input_cache_hit":"0.014","input_cache_miss":"0.14","output":"0.21","start":"16:30"}]}})";
  const PriceTable t = parse(text);
  EXPECT_EQ(priceTableJson(t), text);
  EXPECT_EQ(parse(priceTableJson(t)), t);
}

TEST(PricesTest, ConfigFileTakesTheSameTable) {
  Config c;
  ASSERT_TRUE(applyConfigText(R"({"billing": {"prices": {"demo": {"input_cache_hit": "0.01", "input_cache_miss": "0.1", "output": "1"}}}})",
                              "test", c).isOk());
  EXPECT_EQ(PriceTable::fromSetting(c.billing.prices).at("demo", kDay0).rates, (Rates{10'000, 100'000, 1'000'000}));
  Config bad;
  const Status s = applyConfigText(R"({"billing": {"prices": {"demo": {"input_cache_hit": 0.01}}}})", "test", bad);
  EXPECT_NE(s.message().find("billing.prices.demo.input_cache_hit"), std::string::npos) << s.toString();
  // The environment takes the same JSON.
  Config env;
  ASSERT_TRUE(setConfigField("billing.prices", R"({"*": {"input_cache_hit": "0", "input_cache_miss": "0", "output": "0"}})", env).isOk());
  EXPECT_EQ(PriceTable::fromSetting(env.billing.prices).at("x", kDay0).rates, (Rates{0, 0, 0}));
  EXPECT_NE(configToJson(c).find(R"("input_cache_hit": "0.01")"), std::string::npos) << configToJson(c);
}

TEST(PriceBookTest, HistoryIsKeptAndNeverRewritten) {
  test::TempDir dir;
  const PriceTable config_a = parse(R"({"*": {"input_cache_hit": "0.028", "input_cache_miss": "0.28", "output": "0.42"}})");
  const PriceTable config_b = parse(R"({"*": {"input_cache_hit": "0.03", "input_cache_miss": "0.3", "output": "0.5"}})");
  const PriceTable admin = parse(R"({"demo": {"input_cache_hit": "0.001", "input_cache_miss": "0.01", "output": "0.1"}})");
  const int64_t t0 = at(10, 0);
  {
    auto db = BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto book = PriceBook::open(**db, config_a, t0);
    ASSERT_TRUE(book.isOk()) << book.status().toString();
    EXPECT_EQ((*book)->history().size(), 1u);
    EXPECT_EQ((*book)->at("demo", t0 - 1).version, 0);  // before any version: the defaults
    EXPECT_EQ((*book)->at("demo", t0).version, 1);
    // A change in the past is refused: entries priced then keep their prices.
    EXPECT_EQ((*book)->schedule(admin, t0 + 10, t0 + 20, "admin").status().code(), StatusCode::kInvalidArgument);
    // Scheduled for later: the old table applies until then.
    auto v = (*book)->schedule(admin, at(11, 0), t0 + 20, "admin");
    ASSERT_TRUE(v.isOk());
    EXPECT_EQ(v->version, 2);
    EXPECT_EQ((*book)->at("demo", at(10, 59)).rates, kDeepSeekRates);
    EXPECT_EQ((*book)->at("demo", at(10, 59)).version, 1);
    EXPECT_EQ((*book)->at("demo", at(11, 0)).rates, (Rates{1'000, 10'000, 100'000}));
    EXPECT_EQ((*book)->at("demo", at(11, 0)).version, 2);
    EXPECT_EQ((*book)->at("other", at(11, 0)).priced_as, "default");  // the admin table has no "*"
  }
  {
    // Reopened with the same configured table: nothing new recorded.
    auto db = BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto book = PriceBook::open(**db, config_a, at(12, 0));
    ASSERT_TRUE(book.isOk());
    ASSERT_EQ((*book)->history().size(), 2u);
    EXPECT_EQ((*book)->at("demo", at(11, 30)).version, 2);
    EXPECT_EQ((*book)->at("demo", at(10, 30)).version, 1);
  }
  {
    // Reopened with another configured table: recorded, effective from now,
    // and it wins over the admin version from then on.
    auto db = BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto book = PriceBook::open(**db, config_b, at(13, 0));
    ASSERT_TRUE(book.isOk());
    const auto h = (*book)->history();
    ASSERT_EQ(h.size(), 3u);
    EXPECT_EQ(h[2].source, "config");
    EXPECT_EQ(h[2].effective_us, at(13, 0));
    EXPECT_EQ((*book)->at("demo", at(12, 59)).version, 2);
    EXPECT_EQ((*book)->at("demo", at(13, 0)).rates, (Rates{30'000, 300'000, 500'000}));
    EXPECT_EQ((*book)->inForce(at(13, 0)).version, 3);
  }
}

}  // namespace
}  // namespace lg::billing

// Billing's settings: a price table and a budget as the configuration
// (billing.prices, billing.key_budget, billing.team_budget) and the admin API
// give them, and as billing stores them; billing/settings_json.h reads and
// writes them as JSON. Plain values in lg_billing_settings, a leaf below both
// lg_config (config/options.h includes this for BillingOptions) and
// lg_billing, which so needs no configuration for them. In namespace lg,
// beside the configuration's other settings.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lg {

// Prices (billing/, docs/billing.md). Written in USD per 1M tokens as exact
// decimal strings ("0.028"); held as integer pico-dollars per token, which is
// the same number as micro-dollars per 1M tokens (0.028 -> 28000).
struct PriceRatesSetting {
  int64_t input_cache_hit = 0;   // prompt tokens whose latent KV came from the cache
  int64_t input_cache_miss = 0;  // prompt tokens computed
  int64_t output = 0;            // generated tokens
  bool operator==(const PriceRatesSetting&) const = default;
};
// Other rates during a time of day, UTC: [start, end) in minutes after
// midnight; end < start wraps past midnight (16:30 to 00:30).
struct PriceWindowSetting {
  int start_minute = 0;
  int end_minute = 0;
  PriceRatesSetting rates;
  bool operator==(const PriceWindowSetting&) const = default;
};
struct ModelPriceSetting {
  PriceRatesSetting rates;
  std::vector<PriceWindowSetting> windows;  // the first that contains the time applies
  bool operator==(const ModelPriceSetting&) const = default;
};
// Model id -> prices; "*" prices every other served model. Empty: DeepSeek's
// list for every model (billing/prices.h).
using PriceTableSetting = std::map<std::string, ModelPriceSetting>;

// A spending limit (billing/budgets.h): at most `limit` pico-dollars per
// period, counting committed entries and holding a reservation for each
// request in flight. Written as {"limit": "25.00", "period": "month",
// "soft_limit": "20.00"} in USD (exact decimal strings); the soft limit
// (default 80% of the limit) only warns.
enum class BudgetPeriodSetting : uint8_t { kDay, kMonth, kTotal };  // UTC days, UTC calendar months, ever
struct BudgetSetting {
  bool enabled = false;  // false: no budget (unlimited)
  int64_t limit = 0;     // pico-dollars; 0 with enabled: nothing may be spent
  BudgetPeriodSetting period = BudgetPeriodSetting::kMonth;
  int64_t soft_limit = 0;  // pico-dollars, <= limit
  bool operator==(const BudgetSetting&) const = default;
};

}  // namespace lg

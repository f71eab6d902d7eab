// Billing's settings (billing/settings.h) as JSON: a price table and a
// budget, with every value an exact decimal string, read with errors that name
// the field and written canonically. Their one home: the configuration reads
// billing.prices, billing.key_budget and billing.team_budget with them
// (config/config.cc, from a file, the environment or a flag), billing stores
// its rows with them (price/<version>, budget/...), and the admin API takes
// and returns the same objects (PUT /admin/pricing, PUT /admin/budgets/...).
// lg_billing_settings: lg_common and, privately, nlohmann_json; below both
// lg_config and lg_billing.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "billing/settings.h"
#include "common/status.h"

namespace lg {

// A price table ({"model" | "*": {"input_cache_hit", "input_cache_miss",
// "output", "windows": [...]}}, USD per 1M tokens as decimal strings) from
// JSON text. Errors name `path` and the field.
Result<PriceTableSetting> parsePriceTable(std::string_view json_text, const std::string& path);
// The same object as canonical JSON text (rates as decimal strings, windows "HH:MM").
std::string priceTableToJson(const PriceTableSetting& table);

// A budget ({"limit": "25.00", "period": "day" | "month" | "total",
// "soft_limit": "20.00"}, USD as exact decimal strings; "limit": null is no
// budget; soft_limit defaults to 80% of the limit) from JSON text. Errors name
// `path` and the field.
Result<BudgetSetting> parseBudget(std::string_view json_text, const std::string& path);
// The same object as JSON text ({"limit": null} when not enabled).
std::string budgetToJson(const BudgetSetting& budget);
std::string_view budgetPeriodName(BudgetPeriodSetting period);  // "day", "month", "total"

}  // namespace lg

#include "billing/settings_json.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/decimal.h"

namespace lg {
namespace {

using json = nlohmann::json;

// --------------------------------------------------------------- prices

// $1,000 per 1M tokens: far above any list price, and low enough that a
// request's cost (rate x tokens) can never overflow 64 bits.
constexpr int64_t kMaxRate = 1'000'000'000;
constexpr std::array<std::string_view, 3> kRateNames = {"input_cache_hit", "input_cache_miss", "output"};

int64_t* rateField(PriceRatesSetting& r, size_t i) {
  return i == 0 ? &r.input_cache_hit : i == 1 ? &r.input_cache_miss : &r.output;
}
int64_t rateValue(const PriceRatesSetting& r, size_t i) {
  return i == 0 ? r.input_cache_hit : i == 1 ? r.input_cache_miss : r.output;
}

// USD per 1M tokens, exact: a decimal string, or an integer.
Status parseRate(const std::string& path, const json& value, int64_t& out) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(kMaxRate / 1'000'000)) {
      return invalidArgument(path + ": " + value.dump() + " is above $1000 per 1M tokens");
    }
    out = static_cast<int64_t>(value.get<uint64_t>()) * 1'000'000;
    return Status::ok();
  }
  if (!value.is_string()) {
    return invalidArgument(path + ": expected USD per 1M tokens as a decimal string such as \"0.028\" (exact; "
                           "a JSON number with a fraction would be read as binary floating point), got " +
                           value.dump());
  }
  auto parsed = parseFixedDecimal(value.get<std::string>(), 6, kMaxRate);
  if (!parsed.isOk()) return invalidArgument(path + ": " + parsed.status().message() + " (USD per 1M tokens, at most 6 decimals, at most 1000)");
  out = *parsed;
  return Status::ok();
}

// "HH:MM", 00:00..24:00, as minutes after midnight.
Status parseMinute(const std::string& path, const json& value, int& out) {
  const std::string text = value.is_string() ? value.get<std::string>() : "";
  const bool shaped = text.size() == 5 && text[2] == ':' && std::isdigit(static_cast<unsigned char>(text[0])) &&
                      std::isdigit(static_cast<unsigned char>(text[1])) &&
                      std::isdigit(static_cast<unsigned char>(text[3])) && std::isdigit(static_cast<unsigned char>(text[4]));
  const int h = shaped ? (text[0] - '0') * 10 + (text[1] - '0') : -1;
  const int m = shaped ? (text[3] - '0') * 10 + (text[4] - '0') : -1;
  if (!shaped || m > 59 || h > 24 || (h == 24 && m != 0)) {
    return invalidArgument(path + ": expected a UTC time \"HH:MM\" (00:00..24:00), got " + value.dump());
  }
  out = h * 60 + m;
  return Status::ok();
}

bool validPriceModel(std::string_view name) {
  if (name == "*") return true;
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '/' && c != '*'; });
}

Status parseModelPrices(const std::string& path, const json& value, ModelPriceSetting& out) {
  if (!value.is_object()) {
    return invalidArgument(path + R"(: expected {"input_cache_hit", "input_cache_miss", "output", "windows"}, got )" +
                           value.dump());
  }
  ModelPriceSetting prices;
  for (const auto& [name, v] : value.items()) {
    if (name == "windows") continue;
    if (std::find(kRateNames.begin(), kRateNames.end(), name) == kRateNames.end()) {
      return invalidArgument(path + ": unknown field " + quoteValue(name) +
                             " (expected input_cache_hit, input_cache_miss, output, windows)");
    }
  }
  for (size_t i = 0; i < kRateNames.size(); ++i) {
    const std::string name(kRateNames[i]);
    if (!value.contains(name)) return invalidArgument(path + "." + name + ": missing (USD per 1M tokens)");
    LG_RETURN_IF_ERROR(parseRate(path + "." + name, value[name], *rateField(prices.rates, i)));
  }
  if (value.contains("windows")) {
    const json& windows = value["windows"];
    if (!windows.is_array() || windows.size() > 24) {
      return invalidArgument(path + ".windows: expected a list of at most 24 time windows, got " +
                             windows.dump().substr(0, 200));
    }
    for (size_t w = 0; w < windows.size(); ++w) {
      const std::string wpath = path + ".windows[" + std::to_string(w) + "]";
      const json& win = windows[w];
      if (!win.is_object()) return invalidArgument(wpath + R"(: expected {"start": "HH:MM", "end": "HH:MM", rates...})");
      PriceWindowSetting window;
      window.rates = prices.rates;  // rates the window does not name stay the model's
      for (const auto& [name, v] : win.items()) {
        if (name == "start" || name == "end") continue;
        const auto it = std::find(kRateNames.begin(), kRateNames.end(), name);
        if (it == kRateNames.end()) {
          return invalidArgument(wpath + ": unknown field " + quoteValue(name) +
                                 " (expected start, end, input_cache_hit, input_cache_miss, output)");
        }
        LG_RETURN_IF_ERROR(parseRate(wpath + "." + name, v, *rateField(window.rates, it - kRateNames.begin())));
      }
      if (!win.contains("start") || !win.contains("end")) return invalidArgument(wpath + ": needs start and end (\"HH:MM\", UTC)");
      LG_RETURN_IF_ERROR(parseMinute(wpath + ".start", win["start"], window.start_minute));
      LG_RETURN_IF_ERROR(parseMinute(wpath + ".end", win["end"], window.end_minute));
      if (window.start_minute % 1440 == window.end_minute % 1440) {
        return invalidArgument(wpath + ": start and end are the same time (an empty or whole-day window)");
      }
      prices.windows.push_back(window);
    }
  }
  out = std::move(prices);
  return Status::ok();
}

Status parsePrices(const std::string& path, const json& value, PriceTableSetting& out) {
  if (!value.is_object()) {
    return invalidArgument(path + R"(: expected an object of models, {"*": {"input_cache_hit": "0.028", ...}}, got )" +
                           value.dump().substr(0, 200));
  }
  PriceTableSetting table;
  for (const auto& [model, prices] : value.items()) {
    if (!validPriceModel(model)) {
      return invalidArgument(path + ": " + quoteValue(model) +
                             " is not a model id (1..128 printable characters without '/', or \"*\" for every other model)");
    }
    LG_RETURN_IF_ERROR(parseModelPrices(path + "." + model, prices, table[model]));
  }
  out = std::move(table);
  return Status::ok();
}

std::string minuteText(int minute) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02d:%02d", minute / 60, minute % 60);
  return buf;
}

json ratesJson(const PriceRatesSetting& r, json out = json::object()) {
  for (size_t i = 0; i < kRateNames.size(); ++i) {
    out[std::string(kRateNames[i])] = formatFixedDecimal(rateValue(r, i), 6);
  }
  return out;
}

json pricesJson(const PriceTableSetting& table) {
  json out = json::object();
  for (const auto& [model, p] : table) {
    json m = ratesJson(p.rates);
    if (!p.windows.empty()) {
      json windows = json::array();
      for (const PriceWindowSetting& w : p.windows) {
        windows.push_back(ratesJson(w.rates, json{{"start", minuteText(w.start_minute)}, {"end", minuteText(w.end_minute)}}));
      }
      m["windows"] = std::move(windows);
    }
    out[model] = std::move(m);
  }
  return out;
}

// --------------------------------------------------------------- budgets

constexpr std::array<std::string_view, 3> kBudgetPeriodNames = {"day", "month", "total"};  // by BudgetPeriodSetting

// $1,000,000 in pico-dollars: far above any team's budget, and far below 2^63
// with every request's reservation added to it.
constexpr int64_t kMaxBudget = int64_t{1'000'000} * 1'000'000'000'000;

Status parseDollars(const std::string& path, const json& value, int64_t& out) {
  if (!value.is_string()) {
    return invalidArgument(path + ": expected USD as a decimal string such as \"25.00\" (exact; a JSON number "
                           "would be read as binary floating point), got " + value.dump().substr(0, 100));
  }
  auto parsed = parseFixedDecimal(value.get<std::string>(), 12, kMaxBudget);
  if (!parsed.isOk()) return invalidArgument(path + ": " + parsed.status().message() + " (USD, at most 12 decimals, at most 1000000)");
  out = *parsed;
  return Status::ok();
}

Status parseBudgetJson(const std::string& path, const json& value, BudgetSetting& out) {
  if (!value.is_object()) {
    return invalidArgument(path + R"(: expected an object {"limit": "25.00", "period": "month", "soft_limit": "20.00"}, got )" +
                           value.dump().substr(0, 200));
  }
  for (const auto& [name, v] : value.items()) {
    if (name != "limit" && name != "period" && name != "soft_limit") {
      return invalidArgument(path + ": unknown field " + quoteValue(name) + " (limit, period, soft_limit)");
    }
  }
  BudgetSetting b;
  if (!value.contains("limit")) return invalidArgument(path + ".limit: missing (USD, or null for no budget)");
  if (value["limit"].is_null()) {
    if (value.size() > 1) return invalidArgument(path + ": a budget with \"limit\": null takes no other field");
    out = b;
    return Status::ok();
  }
  b.enabled = true;
  LG_RETURN_IF_ERROR(parseDollars(path + ".limit", value["limit"], b.limit));
  if (value.contains("period")) {
    const json& p = value["period"];
    const std::string name = p.is_string() ? p.get<std::string>() : p.dump();
    auto it = std::find(kBudgetPeriodNames.begin(), kBudgetPeriodNames.end(), name);
    if (!p.is_string() || it == kBudgetPeriodNames.end()) {
      return invalidArgument(path + ".period: expected \"day\", \"month\" or \"total\", got " + quoteValue(name));
    }
    b.period = static_cast<BudgetPeriodSetting>(it - kBudgetPeriodNames.begin());
  }
  if (value.contains("soft_limit")) {
    LG_RETURN_IF_ERROR(parseDollars(path + ".soft_limit", value["soft_limit"], b.soft_limit));
    if (b.soft_limit > b.limit) {
      return invalidArgument(path + ".soft_limit: " + formatFixedDecimal(b.soft_limit, 12) + " is above the limit " +
                             formatFixedDecimal(b.limit, 12));
    }
  } else {
    b.soft_limit = b.limit / 5 * 4;  // 80%, rounded down to the pico-dollar
  }
  out = b;
  return Status::ok();
}

json budgetJson(const BudgetSetting& b) {
  if (!b.enabled) return json{{"limit", nullptr}};
  return json{{"limit", formatFixedDecimal(b.limit, 12)},
              {"period", std::string(kBudgetPeriodNames[static_cast<size_t>(b.period)])},
              {"soft_limit", formatFixedDecimal(b.soft_limit, 12)}};
}

}  // namespace

Result<PriceTableSetting> parsePriceTable(std::string_view json_text, const std::string& path) {
  const json parsed = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalidArgument(path + ": not JSON");
  PriceTableSetting table;
  LG_RETURN_IF_ERROR(parsePrices(path, parsed, table));
  return table;
}

std::string priceTableToJson(const PriceTableSetting& table) { return pricesJson(table).dump(); }

Result<BudgetSetting> parseBudget(std::string_view json_text, const std::string& path) {
  const json parsed = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalidArgument(path + ": not JSON");
  BudgetSetting budget;
  LG_RETURN_IF_ERROR(parseBudgetJson(path, parsed, budget));
  return budget;
}

std::string budgetToJson(const BudgetSetting& budget) { return budgetJson(budget).dump(); }

std::string_view budgetPeriodName(BudgetPeriodSetting period) { return kBudgetPeriodNames[static_cast<size_t>(period)]; }

}  // namespace lg

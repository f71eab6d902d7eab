#include "billing/prices.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "billing/settings_json.h"
#include "common/decimal.h"
#include "common/logging.h"

namespace lg::billing {

namespace {

using nlohmann::json;

constexpr std::string_view kPricePrefix = "price/";  // price/<version, 12 digits> -> version JSON

std::string versionKey(int64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%012" PRId64, version);
  return std::string(kPricePrefix) + buf;
}

Rates fromSetting(const PriceRatesSetting& r) { return {r.input_cache_hit, r.input_cache_miss, r.output}; }
PriceRatesSetting toSetting(const Rates& r) { return {r.input_cache_hit, r.input_cache_miss, r.output}; }

json versionJson(const PriceVersion& v) {
  return json{{"version", v.version},
              {"effective_us", v.effective_us},
              {"recorded_us", v.recorded_us},
              {"source", v.source},
              {"prices", json::parse(priceTableJson(v.table))}};
}

Result<PriceVersion> parseVersion(std::string_view key, std::string_view value) {
  const json j = json::parse(value, nullptr, false);
  const auto bad = [&] { return dataLoss("billing store: price version " + std::string(key) + " is corrupt"); };
  if (j.is_discarded() || !j.is_object()) return bad();
  for (const char* f : {"version", "effective_us", "recorded_us"}) {
    if (!j.contains(f) || !j[f].is_number_integer()) return bad();
  }
  if (!j.contains("source") || !j["source"].is_string() || !j.contains("prices")) return bad();
  PriceVersion v;
  v.version = j["version"].get<int64_t>();
  v.effective_us = j["effective_us"].get<int64_t>();
  v.recorded_us = j["recorded_us"].get<int64_t>();
  v.source = j["source"].get<std::string>();
  auto table = parsePriceTableJson(j["prices"].dump(), "prices");
  if (!table.isOk()) return bad();
  v.table = std::move(*table);
  return v;
}

}  // namespace

Cost costOf(const Rates& rates, int64_t hit_tokens, int64_t miss_tokens, int64_t output_tokens) {
  return Cost{rates.input_cache_hit * hit_tokens, rates.input_cache_miss * miss_tokens, rates.output * output_tokens};
}

std::string usd(Int128 pico) { return formatFixedDecimal(pico, kPicoScale); }
std::string usdCents(Int128 pico) { return formatFixedDecimalTruncated(pico, kPicoScale, 2); }

bool PriceWindow::contains(int minute) const {
  if (start_minute < end_minute) return minute >= start_minute && minute < end_minute;
  return minute >= start_minute || minute < end_minute;  // wraps past midnight
}

PriceTable PriceTable::fromSetting(const PriceTableSetting& setting) {
  PriceTable t;
  for (const auto& [model, p] : setting) {
    ModelPrices m;
    m.rates = billing::fromSetting(p.rates);
    for (const PriceWindowSetting& w : p.windows) {
      m.windows.push_back(PriceWindow{w.start_minute, w.end_minute, billing::fromSetting(w.rates)});
    }
    t.models[model] = std::move(m);
  }
  return t;
}

PriceTableSetting PriceTable::toSetting() const {
  PriceTableSetting s;
  for (const auto& [model, p] : models) {
    ModelPriceSetting m;
    m.rates = billing::toSetting(p.rates);
    for (const PriceWindow& w : p.windows) {
      m.windows.push_back(PriceWindowSetting{w.start_minute, w.end_minute, billing::toSetting(w.rates)});
    }
    s[model] = std::move(m);
  }
  return s;
}

AppliedRates PriceTable::at(std::string_view model, int64_t unix_us) const {
  AppliedRates out;
  auto it = models.find(std::string(model));
  if (it == models.end()) it = models.find("*");
  if (it == models.end()) {
    out.rates = kDeepSeekRates;
    out.priced_as = "default";
    return out;
  }
  out.priced_as = it->first;
  out.rates = it->second.rates;
  // Minute of the UTC day; floor division, so times before 1970 work too.
  const int64_t minute = unix_us >= 0 ? unix_us / 60'000'000 : (unix_us - 59'999'999) / 60'000'000;
  const int minute_of_day = static_cast<int>(((minute % 1440) + 1440) % 1440);
  for (size_t i = 0; i < it->second.windows.size(); ++i) {
    if (it->second.windows[i].contains(minute_of_day)) {
      out.rates = it->second.windows[i].rates;
      out.window = static_cast<int>(i);
      break;
    }
  }
  return out;
}

Result<PriceTable> parsePriceTableJson(std::string_view json_text, const std::string& path) {
  LG_ASSIGN_OR_RETURN(PriceTableSetting setting, parsePriceTable(json_text, path));
  return PriceTable::fromSetting(setting);
}

std::string priceTableJson(const PriceTable& table) { return priceTableToJson(table.toSetting()); }

// ------------------------------------------------------------------ PriceBook

Result<std::unique_ptr<PriceBook>> PriceBook::open(BillingDb& db, const PriceTable& configured, int64_t now_us) {
  auto own = std::make_unique<LocalControlPlane>(db);
  ControlPlane& control = *own;
  LG_ASSIGN_OR_RETURN(std::unique_ptr<PriceBook> book, load(db, std::move(own), control));
  LG_RETURN_IF_ERROR(book->recordConfigured(configured, now_us));
  return book;
}

Result<std::unique_ptr<PriceBook>> PriceBook::open(BillingDb& db, ControlPlane& control) {
  return load(db, nullptr, control);
}

Result<std::unique_ptr<PriceBook>> PriceBook::load(BillingDb& db, std::unique_ptr<LocalControlPlane> own,
                                                   ControlPlane& control) {
  std::unique_ptr<PriceBook> book(new PriceBook(std::move(own), control));
  Status bad;
  LG_RETURN_IF_ERROR(db.scan(kPricePrefix, [&](std::string_view key, std::string_view value) {
    auto v = parseVersion(key, value);
    if (!v.isOk()) {
      bad = v.status();
      return false;
    }
    book->versions_.push_back(std::move(*v));
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  control.addApplier({std::string(kPricePrefix)}, book.get());
  return book;
}

Status PriceBook::recordConfigured(const PriceTable& configured, int64_t now_us) {
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    const PriceVersion* last_config = nullptr;
    for (const PriceVersion& v : versions_) {
      if (v.source == "config") last_config = &v;
    }
    changed = last_config == nullptr || !(last_config->table == configured);
  }
  // A configured table changed while the server was down takes effect
  // now; what was billed before keeps the prices it recorded.
  if (changed) LG_RETURN_IF_ERROR(schedule(configured, now_us, now_us, "config").status());
  return Status::ok();
}

Result<PriceVersion> PriceBook::schedule(const PriceTable& table, int64_t effective_us, int64_t now_us,
                                         std::string source) {
  if (effective_us < now_us) {
    return invalidArgument("the effective time is in the past: requests already priced then keep their prices; "
                           "schedule a change from now or later");
  }
  PriceVersion v;
  int64_t next = 1;
  {
    std::lock_guard lock(mu_);
    if (!versions_.empty()) next = versions_.back().version + 1;
  }
  v.effective_us = effective_us;
  v.recorded_us = now_us;
  v.source = std::move(source);
  v.table = table;
  // The number is the first one the source of truth does not hold (this
  // replica may not have applied the newest yet), taken in the control
  // plane's transaction: versions are numbered in the order they commit.
  LG_RETURN_IF_ERROR(control_.update("scheduling a price table", [&](ControlTxn& txn) -> Status {
    for (v.version = next;; ++v.version) {
      LG_ASSIGN_OR_RETURN(std::optional<std::string> taken, txn.get(versionKey(v.version)));
      if (!taken) break;
    }
    txn.put(versionKey(v.version), versionJson(v).dump());
    return Status::ok();
  }));
  return v;
}

void PriceBook::applyControl(const std::vector<ControlRecord>& records) {
  std::lock_guard lock(mu_);
  for (const ControlRecord& r : records) {
    if (!r.value) continue;  // versions are never erased
    auto v = parseVersion(r.key, *r.value);
    if (!v.isOk()) {
      componentLogger("billing")->error("control records: {}; not applied", v.status().message());
      continue;
    }
    auto at = std::lower_bound(versions_.begin(), versions_.end(), v->version,
                               [](const PriceVersion& a, int64_t version) { return a.version < version; });
    if (at != versions_.end() && at->version == v->version) {
      *at = std::move(*v);
    } else {
      versions_.insert(at, std::move(*v));
    }
  }
}

const PriceVersion* PriceBook::inForceLocked(int64_t unix_us) const {
  const PriceVersion* best = nullptr;
  for (const PriceVersion& v : versions_) {
    if (v.effective_us <= unix_us && (best == nullptr || v.effective_us >= best->effective_us)) best = &v;
  }
  return best;
}

AppliedRates PriceBook::at(std::string_view model, int64_t unix_us) const {
  std::lock_guard lock(mu_);
  const PriceVersion* v = inForceLocked(unix_us);
  if (v == nullptr) return PriceTable{}.at(model, unix_us);
  AppliedRates out = v->table.at(model, unix_us);
  out.version = v->version;
  return out;
}

PriceVersion PriceBook::inForce(int64_t unix_us) const {
  std::lock_guard lock(mu_);
  const PriceVersion* v = inForceLocked(unix_us);
  return v != nullptr ? *v : PriceVersion{};
}

std::vector<PriceVersion> PriceBook::history() const {
  std::lock_guard lock(mu_);
  return versions_;
}

}  // namespace lg::billing

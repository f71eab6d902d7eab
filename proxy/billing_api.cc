#include "proxy/billing_api.h"

#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "proxy/budget_api.h"
#include "proxy/gateway.h"
#include "proxy/openai/api_error.h"
#include "proxy/proxy_log.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr int64_t kUsPerS = 1'000'000;

HttpHeaders jsonHeaders() { return {{"content-type", "application/json"}}; }

std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

std::string isoTime(int64_t unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

openai::ApiError badParam(std::string param, std::string message) {
  return openai::invalidRequest(std::move(param), "invalid_value", std::move(message));
}

// The counters as the usage API names them (costs: exact dollars).
json countersJson(const billing::Counters& c, json out = json::object()) {
  using namespace billing;
  out["requests"] = c[kRequests];
  out["completed_requests"] = c[kCompleted];
  out["cancelled_requests"] = c[kCancelled];
  out["failed_requests"] = c[kFailed];
  out["refused_requests"] = c[kRefused];
  out["prompt_tokens"] = c[kPromptTokens];
  out["prompt_cache_hit_tokens"] = c[kHitTokensTier0] + c[kHitTokensDisk];
  out["prompt_cache_hit_tokens_memory"] = c[kHitTokensTier0];
  out["prompt_cache_hit_tokens_disk"] = c[kHitTokensDisk];
  out["prompt_cache_miss_tokens"] = c[kMissTokens];
  out["completion_tokens"] = c[kOutputTokens];
  out["cost_input_cache_hit"] = usd(c[kCostHit]);
  out["cost_input_cache_miss"] = usd(c[kCostMiss]);
  out["cost_output"] = usd(c[kCostOutput]);
  out["cost_total"] = usd(costTotal(c));
  out["cache_savings"] = usd(static_cast<Int128>(c[kHitAtMissPrice]) - c[kCostHit]);
  return out;
}

// The CSV columns after the group's own, in countersJson's order.
constexpr std::string_view kCounterColumns[] = {
    "requests", "completed_requests", "cancelled_requests", "failed_requests", "refused_requests",
    "prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_hit_tokens_memory", "prompt_cache_hit_tokens_disk",
    "prompt_cache_miss_tokens", "completion_tokens", "cost_input_cache_hit", "cost_input_cache_miss", "cost_output",
    "cost_total", "cache_savings"};

std::string csvField(const json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

json versionJson(const billing::PriceVersion& v) {
  return json{{"version", v.version},
              {"effective_at", isoTime(v.effective_us / kUsPerS)},
              {"effective_us", v.effective_us},
              {"recorded_us", v.recorded_us},
              {"source", v.source.empty() ? json(nullptr) : json(v.source)},
              {"prices", json::parse(billing::priceTableJson(v.table))}};
}

// from/to/granularity of a usage query; false when it answered a 400.
bool parseRange(Exchange& exchange, const std::map<std::string, std::string>& q, billing::UsageQuery& out) {
  const int64_t now_s = nowUs() / kUsPerS;
  out.from_s = 0;
  out.to_s = now_s + 3600;
  for (const char* name : {"from", "to"}) {
    auto it = q.find(name);
    if (it == q.end() || it->second.empty()) continue;
    auto t = parseTimeParam(it->second);
    if (!t) {
      respondWithApiError(exchange, badParam(name, std::string("`") + name +
                                                       "` must be Unix seconds, a date (2026-01-31) or an RFC 3339 UTC "
                                                       "time (2026-01-31T12:00:00Z)"));
      return false;
    }
    (std::string_view(name) == "from" ? out.from_s : out.to_s) = *t;
  }
  if (out.to_s < out.from_s) {
    respondWithApiError(exchange, badParam("to", "`to` is before `from`"));
    return false;
  }
  if (auto it = q.find("granularity"); it != q.end() && !it->second.empty()) {
    if (it->second == "hour") {
      out.granularity_s = 3600;
    } else if (it->second == "day") {
      out.granularity_s = 86400;
    } else {
      respondWithApiError(exchange, badParam("granularity", "`granularity` must be hour or day"));
      return false;
    }
  }
  return true;
}

}  // namespace

std::map<std::string, std::string> parseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  const auto decode = [](std::string_view s) {
    const auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    std::string r;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        r += ' ';
      } else if (s[i] == '%' && i + 2 < s.size() && digit(s[i + 1]) >= 0 && digit(s[i + 2]) >= 0) {
        r += static_cast<char>(digit(s[i + 1]) * 16 + digit(s[i + 2]));
        i += 2;
      } else {
        r += s[i];
      }
    }
    return r;
  };
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    out.try_emplace(decode(part.substr(0, eq)), eq == std::string_view::npos ? "" : decode(part.substr(eq + 1)));
  }
  return out;
}

std::optional<int64_t> parseTimeParam(std::string_view text) {
  if (auto v = parseInt(text)) return v;
  struct tm tm {};
  const std::string s(text);
  const char* end = nullptr;
  if (s.size() == 10) {
    end = strptime(s.c_str(), "%Y-%m-%d", &tm);
  } else if (s.size() == 20 && s.back() == 'Z') {
    end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  if (end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(timegm(&tm));
}

BillingApi::BillingApi(billing::Ledger& ledger, billing::PriceBook& prices, billing::KeyStore& keys,
                       const billing::AdminKey& admin, const billing::BudgetView* budgets)
    : ledger_(ledger), prices_(prices), keys_(keys), admin_(admin), budgets_(budgets) {}

void BillingApi::addRoutes(Router& router) {
  router.add("PUT", "/admin/pricing", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { putPricing(r, e); });
  router.add("GET", "/admin/pricing", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { getPricing(r, e); });
  router.add("GET", "/admin/usage", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { usage(r, e, false); });
  router.add("GET", "/admin/usage.csv", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { usage(r, e, true); });
  router.add("GET", "/admin/ledger", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { ledgerEntries(r, e); });
  router.add("GET", "/admin/ledger/verify", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { verify(r, e); });
  router.add("GET", "/admin/ledger/stats", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { stats(r, e); });
  router.add("GET", "/v1/usage", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { keyUsage(r, e); });
  router.add("GET", "/user/balance", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { balance(r, e); });
}

bool BillingApi::isAdmin(Exchange& exchange) const { return requireAdminKey(exchange, admin_); }

// -------------------------------------------------------------------- pricing

void BillingApi::putPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  if (!isAdmin(*exchange)) return;
  const json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("prices")) {
    return respondWithApiError(*exchange, openai::invalidJsonBody(
        R"(expected {"prices": {"<model>" | "*": {"input_cache_hit": "0.028", "input_cache_miss": "0.28", "output": "0.42"}}, "effective_at": <optional>})"));
  }
  for (const auto& [name, v] : body.items()) {
    if (name != "prices" && name != "effective_at") {
      return respondWithApiError(*exchange, openai::invalidRequest(name, "unknown_parameter", "Unknown parameter: `" + name + "`."));
    }
  }
  auto table = billing::parsePriceTableJson(body["prices"].dump(), "prices");
  if (!table.isOk()) return respondWithApiError(*exchange, badParam("prices", table.status().message()));
  const int64_t now = nowUs();
  int64_t effective = now;
  if (body.contains("effective_at") && !body["effective_at"].is_null()) {
    const json& at = body["effective_at"];
    std::optional<int64_t> s;
    if (at.is_number_integer()) s = at.get<int64_t>();
    if (at.is_string()) s = parseTimeParam(at.get<std::string>());
    if (!s || *s < 0 || *s > (int64_t{1} << 40)) {
      return respondWithApiError(*exchange, badParam("effective_at", "`effective_at` must be Unix seconds or an RFC 3339 UTC time"));
    }
    // A time in the current second means now (clients send whole seconds).
    effective = std::max(*s * kUsPerS, now);
    if (*s * kUsPerS + kUsPerS <= now) {
      return respondWithApiError(*exchange, badParam("effective_at", "`effective_at` is in the past: requests already priced keep their "
                                                                     "prices. Schedule a change from now on."));
    }
  }
  auto version = prices_.schedule(*table, effective, now, "admin");
  if (!version.isOk()) {
    if (version.status().code() == StatusCode::kInvalidArgument) {
      return respondWithApiError(*exchange, badParam("effective_at", version.status().message()));
    }
    proxyLog()->error("recording prices failed: {}", version.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  proxyLog()->info("admin scheduled prices version {} effective {}", version->version, isoTime(effective / kUsPerS));
  exchange->respond(200, jsonHeaders(), dumped(versionJson(*version)));
}

void BillingApi::getPricing(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  if (!isAdmin(*exchange)) return;
  json history = json::array();
  for (const billing::PriceVersion& v : prices_.history()) history.push_back(versionJson(v));
  const billing::PriceVersion now = prices_.inForce(nowUs());
  json in_force = versionJson(now);
  if (now.version == 0) in_force["prices"] = json::object();  // the built-in defaults: DeepSeek's list
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"object", "pricing"},
                                {"unit", "USD per 1M tokens"},
                                {"default", json{{"input_cache_hit", billing::usd(billing::kDeepSeekRates.input_cache_hit * 1'000'000)},
                                                 {"input_cache_miss", billing::usd(billing::kDeepSeekRates.input_cache_miss * 1'000'000)},
                                                 {"output", billing::usd(billing::kDeepSeekRates.output * 1'000'000)}}},
                                {"in_force", in_force},
                                {"history", history}}));
}

// ---------------------------------------------------------------------- usage

void BillingApi::usage(const HttpRequest& request, std::shared_ptr<Exchange> exchange, bool csv) {
  if (!isAdmin(*exchange)) return;
  const auto q = parseQuery(request.query);
  billing::UsageQuery query;
  if (auto it = q.find("group_by"); it != q.end() && !it->second.empty()) {
    auto g = billing::parseGroupBy(it->second);
    if (!g) return respondWithApiError(*exchange, badParam("group_by", "`group_by` must be key, team, model or system_prompt"));
    query.group_by = *g;
  }
  if (!parseRange(*exchange, q, query)) return;
  if (auto it = q.find("key_id"); it != q.end()) query.key_id = it->second;
  if (auto it = q.find("team"); it != q.end()) query.team = it->second;
  auto rows = ledger_.usage(query);
  if (!rows.isOk()) {
    if (rows.status().code() == StatusCode::kInvalidArgument) {
      return respondWithApiError(*exchange, badParam("group_by", rows.status().message()));
    }
    proxyLog()->error("usage query failed: {}", rows.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  std::unordered_map<std::string, std::string> key_names;
  if (query.group_by == billing::GroupBy::kKey) {
    for (const billing::ApiKeyInfo& k : keys_.list()) key_names[k.id] = k.name;
  }
  billing::Counters totals{};
  json data = json::array();
  for (const billing::UsageRow& r : *rows) {
    billing::addCounters(totals, r.counters);
    json row = json::object();
    switch (query.group_by) {
      case billing::GroupBy::kKey: {
        row["key_id"] = r.group;
        row["team"] = r.team;
        auto it = key_names.find(r.group);
        row["key_name"] = it == key_names.end() ? json(nullptr) : json(it->second);  // null: revoked
        break;
      }
      case billing::GroupBy::kTeam: row["team"] = r.group; break;
      case billing::GroupBy::kModel: row["model"] = r.group; break;
      case billing::GroupBy::kSystemPrompt:
        row["system_prompt"] = r.group.empty() ? json(nullptr) : json(r.group);
        row["team"] = r.team;
        break;
      case billing::GroupBy::kNone: break;
    }
    if (query.granularity_s > 0) {
      row["period_start"] = r.period_start_s;
      row["period"] = isoTime(r.period_start_s);
    }
    data.push_back(countersJson(r.counters, std::move(row)));
  }
  const int64_t from_hour_s = std::max<int64_t>(query.from_s, 0) / 3600 * 3600;
  const int64_t to_hour_s = (std::max<int64_t>(query.to_s, 0) + 3599) / 3600 * 3600;
  if (csv) {
    std::string out;
    std::vector<std::string> columns;
    if (!data.empty()) {
      for (const auto& [k, v] : data[0].items()) {
        if (std::find(std::begin(kCounterColumns), std::end(kCounterColumns), k) == std::end(kCounterColumns)) columns.push_back(k);
      }
    }
    for (std::string_view c : kCounterColumns) columns.emplace_back(c);
    for (size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + columns[i];
    out += "\r\n";
    for (const json& row : data) {
      for (size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + csvField(row.value(columns[i], json(nullptr)));
      out += "\r\n";
    }
    HttpHeaders h{{"content-type", "text/csv; charset=utf-8"}};
    h.add("content-disposition", "attachment; filename=\"usage.csv\"");
    return exchange->respond(200, std::move(h), std::move(out));
  }
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"object", "list"},
                                {"group_by", query.group_by == billing::GroupBy::kNone ? json(nullptr)
                                                                                       : json(billing::groupByName(query.group_by))},
                                {"granularity", query.granularity_s == 3600 ? json("hour")
                                                : query.granularity_s == 86400 ? json("day") : json(nullptr)},
                                {"from", from_hour_s},
                                {"to", to_hour_s},
                                {"currency", "USD"},
                                {"data", std::move(data)},
                                {"totals", countersJson(totals)}}));
}

// --------------------------------------------------------------------- ledger

void BillingApi::ledgerEntries(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  if (!isAdmin(*exchange)) return;
  const auto q = parseQuery(request.query);
  json data = json::array();
  if (auto it = q.find("request_id"); it != q.end()) {
    auto found = ledger_.find(it->second);
    if (!found.isOk()) {
      proxyLog()->error("ledger lookup failed: {}", found.status().toString());
      return respondWithApiError(*exchange, openai::internalError());
    }
    if (*found) data.push_back(json::parse(billing::entryJson(**found)));
    return exchange->respond(200, jsonHeaders(), dumped(json{{"object", "list"}, {"data", data}, {"has_more", false}}));
  }
  int64_t limit = 100;
  if (auto it = q.find("limit"); it != q.end()) {
    auto v = parseInt(it->second);
    if (!v || *v < 1 || *v > 10000) return respondWithApiError(*exchange, badParam("limit", "`limit` must be 1..10000"));
    limit = *v;
  }
  billing::UsageQuery range;
  if (!parseRange(*exchange, q, range)) return;
  // `after`: the `next` of a previous page ("<start_us>/<request id>").
  int64_t after_us = -1;
  std::string after_id;
  if (auto it = q.find("after"); it != q.end() && !it->second.empty()) {
    const size_t slash = it->second.find('/');
    auto us = parseInt(std::string_view(it->second).substr(0, slash));
    if (slash == std::string::npos || !us) return respondWithApiError(*exchange, badParam("after", "`after` must be a `next` value"));
    after_us = *us;
    after_id = it->second.substr(slash + 1);
  }
  std::optional<billing::EntryStatus> status;
  if (auto it = q.find("status"); it != q.end() && !it->second.empty()) {
    status = billing::parseEntryStatus(it->second);
    if (!status) return respondWithApiError(*exchange, badParam("status", "`status` must be completed, cancelled, failed or refused"));
  }
  const std::string key_id = q.contains("key_id") ? q.at("key_id") : "";
  const std::string team = q.contains("team") ? q.at("team") : "";
  bool more = false;
  std::string next;
  const int64_t from_us = std::max(range.from_s * kUsPerS, after_us);
  Status s = ledger_.scanEntries(from_us, range.to_s * kUsPerS, [&](const billing::LedgerEntry& e) {
    if (e.start_us == after_us && e.request_id <= after_id) return true;
    if ((!key_id.empty() && e.key_id != key_id) || (!team.empty() && e.team != team) || (status && e.status != *status)) {
      return true;
    }
    if (static_cast<int64_t>(data.size()) == limit) {
      more = true;
      return false;
    }
    data.push_back(json::parse(billing::entryJson(e)));
    next = std::to_string(e.start_us) + "/" + e.request_id;
    return true;
  });
  if (!s.isOk()) {
    proxyLog()->error("ledger scan failed: {}", s.toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  json out{{"object", "list"}, {"data", std::move(data)}, {"has_more", more}};
  if (more) out["next"] = next;
  exchange->respond(200, jsonHeaders(), dumped(out));
}

void BillingApi::verify(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  if (!isAdmin(*exchange)) return;
  auto report = ledger_.verify();
  if (!report.isOk()) {
    proxyLog()->error("ledger verification failed: {}", report.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"ok", report->ok()},
                                {"entries", report->entries},
                                {"aggregate_keys", report->aggregate_keys},
                                {"mismatches", report->mismatches}}));
}

void BillingApi::stats(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  if (!isAdmin(*exchange)) return;
  const billing::LedgerStats st = ledger_.stats();
  const auto hist = [](const Histogram& h) {
    return json{{"count", h.count}, {"mean", h.count ? h.sum / static_cast<double>(h.count) : 0.0},
                {"p50", h.quantile(0.5)}, {"p90", h.quantile(0.9)}, {"p99", h.quantile(0.99)}, {"max", h.max}};
  };
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"entries", st.entries}, {"batches", st.batches}, {"failed", st.failed},
                                {"commit_ms", hist(st.commit_ms)}, {"batch_size", hist(st.batch_size)}}));
}

// -------------------------------------------------------- a key's own usage

void BillingApi::keyUsage(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  const auto header = exchange->request().headers.get("authorization");
  const auto who = header ? keys_.authenticate(billing::bearerToken(*header)) : std::nullopt;
  if (!who) return respondWithApiError(*exchange, openai::invalidApiKey());
  const auto q = parseQuery(request.query);
  billing::UsageQuery query;
  if (!parseRange(*exchange, q, query)) return;
  query.key_id = who->key_id;
  auto rows = ledger_.usage(query);
  if (!rows.isOk()) {
    proxyLog()->error("usage query failed: {}", rows.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  billing::Counters totals{};
  json data = json::array();
  for (const billing::UsageRow& r : *rows) {
    billing::addCounters(totals, r.counters);
    if (query.granularity_s > 0) {
      data.push_back(countersJson(r.counters, json{{"period_start", r.period_start_s}, {"period", isoTime(r.period_start_s)}}));
    }
  }
  json budget = nullptr;
  if (budgets_ != nullptr) {
    if (auto b = budgets_->budgetOf(*who, nowUs() / kUsPerS)) {
      budget = budgetStatusJson(*b);
    }
  }
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"object", "usage"},
                                {"key_id", who->key_id},
                                {"team", who->team},
                                {"from", std::max<int64_t>(query.from_s, 0) / 3600 * 3600},
                                {"to", (std::max<int64_t>(query.to_s, 0) + 3599) / 3600 * 3600},
                                {"currency", "USD"},
                                {"totals", countersJson(totals)},
                                {"data", std::move(data)},
                                {"budget", budget}}));
}

void BillingApi::balance(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  const auto header = exchange->request().headers.get("authorization");
  const auto who = header ? keys_.authenticate(billing::bearerToken(*header)) : std::nullopt;
  if (!who) return respondWithApiError(*exchange, openai::invalidApiKey());
  // Without a budget a key may spend without limit: available, and no
  // prepaid balance to show. With one, its remaining amount is the balance.
  bool available = true;
  std::string balance = "0.00";
  if (budgets_ != nullptr) {
    if (auto b = budgets_->budgetOf(*who, nowUs() / kUsPerS)) {
      available = b->remaining() > 0;
      balance = billing::usdCents(std::max<Int128>(b->remaining(), 0));
    }
  }
  exchange->respond(200, jsonHeaders(),
                    dumped(json{{"is_available", available},
                                {"balance_infos", json::array({json{{"currency", "USD"},
                                                                    {"total_balance", balance},
                                                                    {"granted_balance", "0.00"},
                                                                    {"topped_up_balance", balance}}})}}));
}

}  // namespace lg::proxy

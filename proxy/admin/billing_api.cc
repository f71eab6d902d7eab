#include "proxy/admin/billing_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/unix_time.h"
#include "proxy/admin/budget_api.h"
#include "proxy/admin/control_errors.h"
#include "proxy/http/http_errors.h"
#include "proxy/openai/api_error.h"
#include "proxy/openai/sse.h"  // jsonText
#include "proxy/http/proxy_log.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr int64_t kUsPerS = 1'000'000;

// The CSV columns after the group's own, in countersJson's order.
constexpr std::string_view kCounterColumns[] = {
    "requests", "completed_requests", "cancelled_requests", "failed_requests", "refused_requests",
    "prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_hit_tokens_memory", "prompt_cache_hit_tokens_disk",
    "prompt_cache_miss_tokens", "completion_tokens", "cost_input_cache_hit", "cost_input_cache_miss", "cost_output",
    "cost_total", "cache_savings"};

// The CSV's last columns, after kCounterColumns: countersJson's
// miss_tokens_by_cause and miss_tokens_by_first_region flattened, one
// column per cause and per region ("miss_tokens_by_cause_evicted").
const std::vector<std::string>& missCsvColumns() {
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> c;
    for (size_t i = 0; i < billing::kMissCauses; ++i) {
      c.push_back("miss_tokens_by_cause_" + std::string(billing::missCauseName(static_cast<billing::MissCause>(i))));
    }
    for (size_t i = 1; i < billing::kPromptRegions; ++i) {
      c.push_back("miss_tokens_by_first_region_" +
                  std::string(billing::promptRegionName(static_cast<billing::PromptRegion>(i))));
    }
    return c;
  }();
  return columns;
}

// A usage row's nested miss objects as missCsvColumns' flat fields.
void flattenMissFields(json& row) {
  for (const char* nested : {"miss_tokens_by_cause", "miss_tokens_by_first_region"}) {
    if (!row.contains(nested)) continue;
    for (const auto& [name, tokens] : row[nested].items()) row[std::string(nested) + "_" + name] = tokens;
    row.erase(nested);
  }
}

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

}  // namespace

BillingApi::BillingApi(const billing::LedgerReads& reads, const billing::Ledger& local, billing::PriceBook& prices,
                       const billing::KeyStore& keys, const Admission& admission, const billing::BudgetView* budgets)
    : reads_(reads), local_(local), prices_(prices), keys_(keys), admission_(admission), budgets_(budgets) {}

void BillingApi::addRoutes(Router& router) const {
  auto admin = [this](void (BillingApi::*method)(const HttpRequest&, std::shared_ptr<Exchange>) const) {
    return admission_.forAdmin(
        [this, method](const HttpRequest& r, std::shared_ptr<Exchange> e) { (this->*method)(r, std::move(e)); });
  };
  auto key = [this](void (BillingApi::*method)(const HttpRequest&, std::shared_ptr<Exchange>,
                                               const billing::Principal&) const) {
    return admission_.forKey([this, method](const HttpRequest& r, std::shared_ptr<Exchange> e,
                                            const billing::Principal& who) { (this->*method)(r, std::move(e), who); });
  };
  router.add("PUT", "/admin/pricing", admin(&BillingApi::putPricing), Runs::kBlocking);
  router.add("GET", "/admin/pricing", admin(&BillingApi::getPricing));
  router.add("GET", "/admin/usage", admin(&BillingApi::usageJson), Runs::kBlocking);
  router.add("GET", "/admin/usage.csv", admin(&BillingApi::usageCsv), Runs::kBlocking);
  router.add("GET", "/admin/ledger", admin(&BillingApi::ledgerEntries), Runs::kBlocking);
  router.add("GET", "/admin/ledger/verify", admin(&BillingApi::verify), Runs::kBlocking);
  router.add("GET", "/admin/ledger/stats", admin(&BillingApi::stats));
  router.add("GET", "/v1/usage", key(&BillingApi::keyUsage), Runs::kBlocking);
  router.add("GET", "/user/balance", key(&BillingApi::balance), Runs::kBlocking);
}

// -------------------------------------------------------------------- pricing

void BillingApi::putPricing(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
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
  const int64_t now = unixMicros();
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
    return respondWithApiError(*exchange, controlPlaneError(version.status(), "recording prices"));
  }
  proxyLog()->info("admin scheduled prices version {} effective {}", version->version, isoTime(effective / kUsPerS));
  exchange->respond(200, jsonHeaders(), openai::jsonText(versionJson(*version)));
}

void BillingApi::getPricing(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  json history = json::array();
  for (const billing::PriceVersion& v : prices_.history()) history.push_back(versionJson(v));
  const billing::PriceVersion now = prices_.inForce(unixMicros());
  json in_force = versionJson(now);
  if (now.version == 0) in_force["prices"] = json::object();  // the built-in defaults: DeepSeek's list
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"object", "pricing"},
                                {"unit", "USD per 1M tokens"},
                                {"default", json{{"input_cache_hit", billing::usd(billing::kDeepSeekRates.input_cache_hit * 1'000'000)},
                                                 {"input_cache_miss", billing::usd(billing::kDeepSeekRates.input_cache_miss * 1'000'000)},
                                                 {"output", billing::usd(billing::kDeepSeekRates.output * 1'000'000)}}},
                                {"in_force", in_force},
                                {"history", history}}));
}

// ---------------------------------------------------------------------- usage

void BillingApi::usageJson(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  usage(request, std::move(exchange), false);
}

void BillingApi::usageCsv(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  usage(request, std::move(exchange), true);
}

void BillingApi::usage(const HttpRequest& request, std::shared_ptr<Exchange> exchange, bool csv) const {
  const auto q = parseQuery(request.query);
  billing::UsageQuery query;
  // group_by=miss_cause pivots the rows the same filters read ungrouped (the
  // key rows with a key, else the team rows, or a system prompt's rows): it
  // is no dimension of the stores, so both answer it alike.
  bool by_miss_cause = false;
  if (auto it = q.find("group_by"); it != q.end() && !it->second.empty()) {
    auto g = billing::parseGroupBy(it->second);
    by_miss_cause = it->second == "miss_cause";
    if (!g && !by_miss_cause) {
      return respondWithApiError(*exchange,
                                 badParam("group_by", "`group_by` must be key, team, model, system_prompt or miss_cause"));
    }
    if (g) query.group_by = *g;
  }
  if (auto e = parseUsageRange(q, query)) return respondWithApiError(*exchange, *e);
  if (auto it = q.find("key_id"); it != q.end()) query.key_id = it->second;
  if (auto it = q.find("team"); it != q.end()) query.team = it->second;
  const std::string system_prompt = q.contains("system_prompt") ? q.at("system_prompt") : "";
  auto rows = readUsage(reads_, query, system_prompt);
  if (!rows.isOk()) {
    if (rows.status().code() == StatusCode::kInvalidArgument) {
      return respondWithApiError(*exchange, badParam(system_prompt.empty() ? "group_by" : "system_prompt",
                                                     rows.status().message()));
    }
    return respondWithApiError(*exchange, ledgerReadError(reads_, rows.status(), "usage query"));
  }
  KeyNames key_names;
  if (query.group_by == billing::GroupBy::kKey) {
    for (const billing::ApiKeyInfo& k : keys_.list()) key_names[k.id] = k.name;
  }
  UsageList list = usageList(*rows, query, key_names);
  if (by_miss_cause) list.data = missCauseRowsJson(*rows, query);
  json& data = list.data;
  if (csv) {
    std::vector<std::string> columns;
    if (by_miss_cause) {
      if (query.granularity_s > 0) columns = {"period", "period_start"};
      columns.insert(columns.end(), {"miss_cause", "prompt_cache_miss_tokens", "share"});
    } else {
      // The group's own columns (the first row's other fields), then the
      // counters, then the miss counters flattened.
      for (json& row : data) flattenMissFields(row);
      const std::vector<std::string>& miss_columns = missCsvColumns();
      if (!data.empty()) {
        for (const auto& [k, v] : data[0].items()) {
          if (std::find(std::begin(kCounterColumns), std::end(kCounterColumns), k) == std::end(kCounterColumns) &&
              std::find(miss_columns.begin(), miss_columns.end(), k) == miss_columns.end()) {
            columns.push_back(k);
          }
        }
      }
      for (std::string_view c : kCounterColumns) columns.emplace_back(c);
      columns.insert(columns.end(), miss_columns.begin(), miss_columns.end());
    }
    std::string out;
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
  markDeletedTeams(data, keys_);
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"object", "list"},
                                {"group_by", by_miss_cause ? json("miss_cause")
                                             : query.group_by == billing::GroupBy::kNone
                                                 ? json(nullptr)
                                                 : json(billing::groupByName(query.group_by))},
                                {"granularity", granularityJson(query.granularity_s)},
                                {"from", usageFromS(query)},
                                {"to", usageToS(query)},
                                {"currency", "USD"},
                                {"data", std::move(data)},
                                {"totals", countersJson(list.totals)}}));
}

// --------------------------------------------------------------------- ledger

void BillingApi::ledgerEntries(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const auto q = parseQuery(request.query);
  json data = json::array();
  if (auto it = q.find("request_id"); it != q.end()) {
    auto found = reads_.find(it->second);
    if (!found.isOk()) return respondWithApiError(*exchange, ledgerReadError(reads_, found.status(), "ledger lookup"));
    if (*found) data.push_back(ledgerEntryJson(**found));
    return exchange->respond(200, jsonHeaders(), openai::jsonText(json{{"object", "list"}, {"data", data}, {"has_more", false}}));
  }
  int64_t limit = 100;
  if (auto it = q.find("limit"); it != q.end()) {
    auto v = parseIntParam(it->second);
    if (!v || *v < 1 || *v > 10000) return respondWithApiError(*exchange, badParam("limit", "`limit` must be 1..10000"));
    limit = *v;
  }
  billing::UsageQuery range;
  if (auto e = parseUsageRange(q, range)) return respondWithApiError(*exchange, *e);
  // `after`: the `next` of a previous page ("<start_us>/<request id>").
  int64_t after_us = -1;
  std::string after_id;
  if (auto it = q.find("after"); it != q.end() && !it->second.empty()) {
    const size_t slash = it->second.find('/');
    auto us = parseIntParam(std::string_view(it->second).substr(0, slash));
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
  std::map<std::string, billing::TeamInfo> teams;
  for (billing::TeamInfo& t : keys_.teams()) teams.emplace(t.id, std::move(t));
  const int64_t from_us = std::max(range.from_s * kUsPerS, after_us);
  Status s = reads_.scanEntries(from_us, range.to_s * kUsPerS, [&](const billing::LedgerEntry& e) {
    if (e.start_us == after_us && e.request_id <= after_id) return true;
    if ((!key_id.empty() && e.key_id != key_id) || (!team.empty() && e.team != team) || (status && e.status != *status)) {
      return true;
    }
    if (static_cast<int64_t>(data.size()) == limit) {
      more = true;
      return false;
    }
    json entry = ledgerEntryJson(e);
    // The entry of a deleted team (or of an earlier owner of a reused id)
    // stays for accounting, marked (issue 21, item 10).
    const auto t = teams.find(e.team);
    entry["team_deleted"] = t != teams.end() && t->second.deletedAt(e.start_us);
    data.push_back(std::move(entry));
    next = std::to_string(e.start_us) + "/" + e.request_id;
    return true;
  });
  if (!s.isOk()) return respondWithApiError(*exchange, ledgerReadError(reads_, s, "ledger scan"));
  json out{{"object", "list"}, {"data", std::move(data)}, {"has_more", more}};
  if (more) out["next"] = next;
  exchange->respond(200, jsonHeaders(), openai::jsonText(out));
}

void BillingApi::verify(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  auto report = reads_.verify();
  if (!report.isOk()) return respondWithApiError(*exchange, ledgerReadError(reads_, report.status(), "ledger verification"));
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"ok", report->ok()},
                                {"source", reads_.source()},
                                {"entries", report->entries},
                                {"aggregate_keys", report->aggregate_keys},
                                {"mismatches", report->mismatches}}));
}

void BillingApi::stats(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  // This replica's group commit, whatever answers the reads: each replica
  // commits locally first.
  const billing::LedgerStats st = local_.stats();
  const auto hist = [](const Histogram& h) {
    return json{{"count", h.count}, {"mean", h.count ? h.sum / static_cast<double>(h.count) : 0.0},
                {"p50", h.quantile(0.5)}, {"p90", h.quantile(0.9)}, {"p99", h.quantile(0.99)}, {"max", h.max}};
  };
  json out{{"entries", st.entries}, {"batches", st.batches}, {"failed", st.failed},
           {"commit_ms", hist(st.commit_ms)}, {"batch_size", hist(st.batch_size)}};
  // With PostgreSQL: what this replica committed that is not there yet.
  if (local_.options().outbox) out["outbox_entries"] = local_.outboxDepth();
  exchange->respond(200, jsonHeaders(), openai::jsonText(out));
}

// -------------------------------------------------------- a key's own usage

void BillingApi::setKeyQueryLimit(int64_t per_minute) {
  if (per_minute <= 0) {
    query_limiter_.reset();
    return;
  }
  billing::RateLimitOptions o;
  o.per_key.requests_per_minute = per_minute;
  query_limiter_ = std::make_unique<billing::RateLimiter>(o);
}

std::optional<ApiError> BillingApi::overQueryLimit(const billing::Principal& who) const {
  if (query_limiter_ == nullptr) return std::nullopt;
  // Charged before the query reads anything: a flood costs the store nothing
  // past the limit (the blocking pool bounds how many wait, per team).
  const billing::RateDecision d = query_limiter_->admit(who.key_id, who.team, 0);
  if (d.allowed) return std::nullopt;
  ApiError e;
  e.http_status = 429;
  e.type = "rate_limit_error";
  e.code = "rate_limit_exceeded";
  e.message = "Usage queries of this key are limited to " +
              std::to_string(query_limiter_->options().per_key.requests_per_minute) +
              " a minute (limits.key_usage_queries_per_minute); retry later.";
  e.retry_after_s = static_cast<int32_t>(std::max(1.0, std::ceil(d.retry_after_s)));
  return e;
}

void BillingApi::keyUsage(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                          const billing::Principal& caller) const {
  const billing::Principal* who = &caller;
  if (auto e = overQueryLimit(caller)) return respondWithApiError(*exchange, *e);
  const auto q = parseQuery(request.query);
  billing::UsageQuery query;
  if (auto e = parseUsageRange(q, query)) return respondWithApiError(*exchange, *e);
  query.key_id = who->key_id;
  auto rows = reads_.usage(query);
  if (!rows.isOk()) return respondWithApiError(*exchange, ledgerReadError(reads_, rows.status(), "usage query"));
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
    if (auto b = budgets_->budgetOf(*who, unixMicros() / kUsPerS)) {
      budget = budgetStatusJson(*b);
    }
  }
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"object", "usage"},
                                {"key_id", who->key_id},
                                {"team", who->team},
                                {"from", usageFromS(query)},
                                {"to", usageToS(query)},
                                {"currency", "USD"},
                                {"totals", countersJson(totals)},
                                {"data", std::move(data)},
                                {"budget", budget}}));
}

void BillingApi::balance(const HttpRequest&, std::shared_ptr<Exchange> exchange, const billing::Principal& caller) const {
  const billing::Principal* who = &caller;
  if (auto e = overQueryLimit(caller)) return respondWithApiError(*exchange, *e);
  // Without a budget a key may spend without limit: available, and no
  // prepaid balance to show. With one, its remaining amount is the balance.
  bool available = true;
  std::string balance = "0.00";
  if (budgets_ != nullptr) {
    if (auto b = budgets_->budgetOf(*who, unixMicros() / kUsPerS)) {
      // With limits.redis_url and Redis unreachable, this replica's count is
      // all there is, which would overstate the balance; DeepSeek's shape has
      // no room to say so, and admission refuses budgeted requests meanwhile.
      if (b->counted == billing::BudgetCounted::kReplicaOnly) {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.code = "budget_store_unavailable";
        e.message = "The store that keeps budgets shared by the replicas is unreachable, so the balance is not "
                    "known. Try again shortly.";
        e.retry_after_s = 1;
        return respondWithApiError(*exchange, e);
      }
      available = b->remaining() > 0;
      balance = billing::usdCents(std::max<Int128>(b->remaining(), 0));
    }
  }
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"is_available", available},
                                {"balance_infos", json::array({json{{"currency", "USD"},
                                                                    {"total_balance", balance},
                                                                    {"granted_balance", "0.00"},
                                                                    {"topped_up_balance", balance}}})}}));
}

}  // namespace lg::proxy

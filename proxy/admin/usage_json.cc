#include "proxy/admin/usage_json.h"

#include <time.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "billing/prices.h"
#include "common/unix_time.h"
#include "proxy/http/http_message.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

// A ratio to 4 decimals: what a share needs, without a double's tail (0.30000000000000004).
double rounded4(double v) { return std::round(v * 10000.0) / 10000.0; }

}  // namespace

json missAnatomyJson(const billing::MissAnatomy& m) {
  using namespace billing;
  if (!m.recorded()) return nullptr;
  json causes = json::object();
  for (size_t i = 0; i < kMissCauses; ++i) causes[std::string(missCauseName(static_cast<MissCause>(i)))] = m.tokens_by_cause[i];
  json out{{"tokens_by_cause", std::move(causes)},
           {"first_miss_token", m.first_miss_token},
           {"first_miss_message", m.first_miss_message >= 0 ? json(m.first_miss_message) : json(nullptr)},
           {"first_miss_region", m.first_miss_region != PromptRegion::kNone ? json(promptRegionName(m.first_miss_region))
                                                                              : json(nullptr)},
           {"first_miss_cause", missCauseName(m.first_miss_cause)}};
  if (m.first_miss_cause == MissCause::kEvicted) {
    out["evicted_tier"] = m.evicted_tier;
    out["evicted_ago_ms"] = m.evicted_ago_ms;
  }
  return out;
}

json ledgerEntryJson(const billing::LedgerEntry& e) {
  return json{{"request_id", e.request_id},
              {"response_id", e.response_id},
              {"key_id", e.key_id},
              {"team", e.team},
              {"model", e.model},
              {"requested_model", e.requested_model},
              {"endpoint", e.endpoint},
              {"system_prompt", e.system_prompt},
              {"idempotency_key", e.idempotency_key},
              {"start_us", e.start_us},
              {"end_us", e.end_us},
              {"ttft_us", e.ttft_us},
              {"prompt_tokens", e.prompt_tokens},
              {"hit_tokens_tier0", e.hit_tokens_tier0},
              {"hit_tokens_disk", e.hit_tokens_disk},
              {"miss_tokens", e.miss_tokens},
              {"output_tokens", e.output_tokens},
              {"choices", e.choices},
              {"rates", json{{"input_cache_hit", e.prices.rates.input_cache_hit},
                             {"input_cache_miss", e.prices.rates.input_cache_miss},
                             {"output", e.prices.rates.output}}},
              {"price_version", e.prices.version},
              {"priced_as", e.prices.priced_as},
              {"price_window", e.prices.window},
              {"cost", json{{"input_cache_hit", e.cost.input_cache_hit},
                            {"input_cache_miss", e.cost.input_cache_miss},
                            {"output", e.cost.output}}},
              {"cost_total", billing::usd(e.cost.total())},  // as /admin/usage writes costs: exact dollars
              {"start", isoTime(e.start_us / 1'000'000)},
              {"status", billing::entryStatusName(e.status)},
              {"finish_reason", e.finish_reason},
              {"miss", missAnatomyJson(e.miss)}};
}

json countersJson(const billing::Counters& c, json out) {
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
  out["cache_savings"] = usd(cacheSavings(c));
  json by_cause = json::object();
  for (size_t i = 0; i < kMissCauses; ++i) {
    const auto cause = static_cast<MissCause>(i);
    by_cause[std::string(missCauseName(cause))] = c[missCauseSlot(cause)];
  }
  out["miss_tokens_by_cause"] = std::move(by_cause);
  json by_region = json::object();
  for (size_t i = 1; i < kPromptRegions; ++i) {
    const auto region = static_cast<PromptRegion>(i);
    by_region[std::string(promptRegionName(region))] = c[firstMissSlot(region)];
  }
  out["miss_tokens_by_first_region"] = std::move(by_region);
  return out;
}

json missCauseRowsJson(const std::vector<billing::UsageRow>& rows, const billing::UsageQuery& query) {
  using namespace billing;
  std::map<int64_t, Counters> by_period;  // ordered: the periods in time order
  for (const UsageRow& r : rows) addCounters(by_period[r.period_start_s], r.counters);
  json out = json::array();
  for (const auto& [period, c] : by_period) {
    uint64_t with_cause = 0;
    for (size_t i = 0; i < kMissCauses; ++i) with_cause += c[missCauseSlot(static_cast<MissCause>(i))];
    for (size_t i = 0; i < kMissCauses; ++i) {
      const auto cause = static_cast<MissCause>(i);
      const uint64_t tokens = c[missCauseSlot(cause)];
      json row{{"miss_cause", missCauseName(cause)},
               {"prompt_cache_miss_tokens", tokens},
               {"share", with_cause == 0 ? 0.0 : rounded4(static_cast<double>(tokens) / static_cast<double>(with_cause))}};
      if (query.granularity_s > 0) {
        row["period_start"] = period;
        row["period"] = isoTime(period);
      }
      out.push_back(std::move(row));
    }
  }
  return out;
}

Result<std::vector<billing::UsageRow>> readUsage(const billing::LedgerReads& reads, const billing::UsageQuery& query,
                                                 const std::string& system_prompt) {
  using billing::GroupBy;
  if (system_prompt.empty()) return reads.usage(query);
  if (!query.key_id.empty()) return invalidArgument("usage of a system prompt cannot be limited to a key");
  if (query.group_by != GroupBy::kNone && query.group_by != GroupBy::kSystemPrompt) {
    return invalidArgument("usage of a system prompt can be grouped by system_prompt or miss_cause only");
  }
  billing::UsageQuery by_prompt = query;
  by_prompt.group_by = GroupBy::kSystemPrompt;
  LG_ASSIGN_OR_RETURN(std::vector<billing::UsageRow> rows, reads.usage(by_prompt));
  std::erase_if(rows, [&](const billing::UsageRow& r) { return r.group != system_prompt; });
  if (query.group_by == GroupBy::kSystemPrompt) return rows;
  // Ungrouped: one row per period, as the team rows give it.
  std::map<int64_t, billing::Counters> by_period;
  for (const billing::UsageRow& r : rows) billing::addCounters(by_period[r.period_start_s], r.counters);
  std::vector<billing::UsageRow> out;
  for (const auto& [period, c] : by_period) out.push_back(billing::UsageRow{"", query.team, period, c});
  return out;
}

json usageRowJson(const billing::UsageRow& r, const billing::UsageQuery& query, const KeyNames& names) {
  json row = json::object();
  switch (query.group_by) {
    case billing::GroupBy::kKey: {
      row["key_id"] = r.group;
      row["team"] = r.team;
      auto it = names.find(r.group);
      row["key_name"] = it == names.end() ? json(nullptr) : json(it->second);  // null: revoked
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
  return countersJson(r.counters, std::move(row));
}

UsageList usageList(const std::vector<billing::UsageRow>& rows, const billing::UsageQuery& query,
                    const KeyNames& names) {
  UsageList list;
  for (const billing::UsageRow& r : rows) {
    billing::addCounters(list.totals, r.counters);
    list.data.push_back(usageRowJson(r, query, names));
  }
  return list;
}

int64_t usageFromS(const billing::UsageQuery& query) { return std::max<int64_t>(query.from_s, 0) / 3600 * 3600; }
int64_t usageToS(const billing::UsageQuery& query) { return (std::max<int64_t>(query.to_s, 0) + 3599) / 3600 * 3600; }

void markDeletedTeams(json& rows, const billing::KeyStore& keys) {
  std::map<std::string, bool> deleted;
  for (const billing::TeamInfo& t : keys.teams()) deleted[t.id] = t.deleted();
  for (json& row : rows) {
    if (!row.is_object() || !row.contains("team") || !row["team"].is_string()) continue;
    const auto it = deleted.find(row["team"].get<std::string>());
    row["team_deleted"] = it != deleted.end() && it->second;
  }
}

json granularityJson(int64_t granularity_s) {
  return granularity_s == 3600 ? json("hour") : granularity_s == 86400 ? json("day") : json(nullptr);
}

std::string isoTime(int64_t unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<ApiError> parseUsageRange(const std::map<std::string, std::string>& q, billing::UsageQuery& out) {
  const int64_t now_s = unixSeconds();
  out.from_s = 0;
  out.to_s = now_s + 3600;
  for (const char* name : {"from", "to"}) {
    auto it = q.find(name);
    if (it == q.end() || it->second.empty()) continue;
    auto t = parseTimeParam(it->second);
    if (!t) {
      return badParam(name, std::string("`") + name +
                                "` must be Unix seconds, a date (2026-01-31) or an RFC 3339 UTC time (2026-01-31T12:00:00Z)");
    }
    // Bounded before any arithmetic: the hour rounding and the conversion to
    // microseconds (x 1,000,000) of a time near INT64_MAX overflowed.
    if (*t < 0 || *t > kMaxTimeParamS) {
      return badParam(name, std::string("`") + name + "` must be between 1970-01-01 and 9999-12-31 (Unix seconds 0.." +
                                std::to_string(kMaxTimeParamS) + ")");
    }
    (std::string_view(name) == "from" ? out.from_s : out.to_s) = *t;
  }
  if (out.to_s < out.from_s) {
    return badParam("to", "`to` is before `from`");
  }
  if (auto it = q.find("granularity"); it != q.end() && !it->second.empty()) {
    if (it->second == "hour") {
      out.granularity_s = 3600;
    } else if (it->second == "day") {
      out.granularity_s = 86400;
    } else {
      return badParam("granularity", "`granularity` must be hour or day");
    }
  }
  return std::nullopt;
}

std::map<std::string, std::string> parseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    out.try_emplace(percentDecode(part.substr(0, eq), true),
                    eq == std::string_view::npos ? "" : percentDecode(part.substr(eq + 1), true));
  }
  return out;
}

std::optional<int64_t> parseTimeParam(std::string_view text) {
  if (auto v = parseIntParam(text)) return v;
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

std::optional<int64_t> parseIntParam(std::string_view text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

ApiError badParam(std::string param, std::string message) {
  return openai::invalidRequest(std::move(param), "invalid_value", std::move(message));
}

ApiError ledgerReadError(const billing::LedgerReads& reads, const Status& status, std::string_view what) {
  // The RocksDB store reports its I/O errors as Unavailable too: those stay
  // the 500 they always were.
  if (status.code() != StatusCode::kUnavailable || reads.source() != "postgresql") {
    proxyLog()->error("{} failed ({}): {}", what, reads.source(), status.toString());
    return openai::internalError();
  }
  // An outage the drain reports too: each refused read at warning level.
  proxyLog()->warn("{} failed ({}): {}", what, reads.source(), status.toString());
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = "ledger_unavailable";
  e.message = "Usage and ledger reads come from the ledger of record (PostgreSQL), which cannot be reached now. "
              "Requests are still served and billed; retry later.";
  e.retry_after_s = 5;
  return e;
}

}  // namespace lg::proxy

// Usage as JSON: the one place that turns the ledger's counters, usage rows
// and entries into the usage API's fields (docs/billing.md): the API's own
// view, not the ledger's storage encoding, shared by the usage API
// (billing_api.h: /admin/usage, /v1/usage) and the dashboard (dashboard.h),
// so that both show the same numbers as the same strings by construction
// (budgets: budgetStatusJson, budget_api.h).
// Also the query parameters both read (from, to, granularity).
//
// Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "billing/key_store.h"
#include "billing/ledger.h"
#include "proxy/http/api_error.h"

namespace lg::proxy {

// The counters as the usage API names them, added to `out`: request counts
// by status, tokens by kind, costs and cache_savings as exact decimal dollar
// strings ("0.000001792"), and why the miss tokens missed:
// miss_tokens_by_cause ({"new": n, "evicted": n, ...}, every cause) and
// miss_tokens_by_first_region ({"system": n, "tools": n, "history": n,
// "input": n}: the miss tokens of the requests whose first computed token
// lies there). Entries without a miss anatomy count in neither, so either
// may add up to less than prompt_cache_miss_tokens.
nlohmann::json countersJson(const billing::Counters& c, nlohmann::json out = nlohmann::json::object());

// group_by=miss_cause: the miss tokens of `rows` (any grouping; summed per
// period) pivoted into one row per cause and period, every cause in
// billing::MissCause order, periods in order: {"miss_cause", period fields
// when the query has a granularity, "prompt_cache_miss_tokens", "share"}.
// `share` is the cause's part of the period's miss tokens that have a cause
// (0 when none has), a number rounded to 4 decimals.
nlohmann::json missCauseRowsJson(const std::vector<billing::UsageRow>& rows, const billing::UsageQuery& query);

// What the usage API and the dashboard read: `query`'s rows, or with a
// system prompt fingerprint those of that prompt alone, read from the
// system-prompt rows (grouped by system prompt: its rows; otherwise summed
// per period, as the team rows would be). The system-prompt rows have no
// key: a key filter with a system prompt is InvalidArgument, as are the
// groupings by key, team or model.
Result<std::vector<billing::UsageRow>> readUsage(const billing::LedgerReads& reads, const billing::UsageQuery& query,
                                                 const std::string& system_prompt);

// Key id -> the key's name, for key rows (a key not in it was revoked: null).
using KeyNames = std::unordered_map<std::string, std::string>;

// One row of /admin/usage: the group's fields (key_id, team and key_name;
// team; model; system_prompt and team), the period when the query has a
// granularity, then countersJson.
nlohmann::json usageRowJson(const billing::UsageRow& row, const billing::UsageQuery& query, const KeyNames& names);

// A ledger entry as GET /admin/ledger shows it: its ids, times (Unix
// microseconds, and `start` in RFC 3339), tokens by kind, the rates
// (pico-dollars per token, integers) and their version, the cost per kind
// (pico-dollars) and in total (`cost_total`, exact dollars as the usage rows
// write it), the status and finish reason, and `miss` (missAnatomyJson).
// Built from the entry, never from its storage encoding, so that the ledger
// may change how it stores entries.
nlohmann::json ledgerEntryJson(const billing::LedgerEntry& entry);

// An entry's miss anatomy as the ledger routes and the dashboard show it:
// tokens_by_cause (every cause), first_miss_token, first_miss_message and
// first_miss_region (null when none: not a chat request), first_miss_cause,
// and for an eviction evicted_tier ("pool" or "disk") and evicted_ago_ms;
// null when the entry has none (written before anatomies).
nlohmann::json missAnatomyJson(const billing::MissAnatomy& anatomy);

struct UsageList {
  nlohmann::json data = nlohmann::json::array();  // usageRowJson of each row, in the ledger's order
  billing::Counters totals{};                     // the rows summed
};
UsageList usageList(const std::vector<billing::UsageRow>& rows, const billing::UsageQuery& query,
                    const KeyNames& names);

// The hours a query covers, as its response states them: from rounded down,
// to rounded up to whole hours (the counters are hourly).
int64_t usageFromS(const billing::UsageQuery& query);
int64_t usageToS(const billing::UsageQuery& query);

// Adds "team_deleted" to every row of `rows` that names a team: whether the
// team is deleted now (issue 21, item 10). Its entries and counters stay in
// the ledger for accounting; this is how the views say whose they were.
void markDeletedTeams(nlohmann::json& rows, const billing::KeyStore& keys);

// "hour", "day" or null.
nlohmann::json granularityJson(int64_t granularity_s);

// "2026-01-01T00:00:00Z".
std::string isoTime(int64_t unix_s);

// The latest time a usage route accepts: 9999-12-31T23:59:59Z. Times are
// bounded to [0, this] so that rounding to hours and converting to
// microseconds can never overflow an int64.
inline constexpr int64_t kMaxTimeParamS = 253'402'300'799;

// from/to/granularity of a usage query into `out` (defaults: from 0, to an
// hour from now, no granularity); otherwise the 400 to answer, naming the
// parameter (a time outside [0, kMaxTimeParamS] too).
std::optional<ApiError> parseUsageRange(const std::map<std::string, std::string>& query, billing::UsageQuery& out);

// Query-string parameters, percent-decoded ('+' is a space); the first
// occurrence of each name wins.
std::map<std::string, std::string> parseQuery(std::string_view query);

// A time parameter: Unix seconds ("1767225600"), a UTC date ("2026-01-01") or
// an RFC 3339 UTC time ("2026-01-01T12:00:00Z"); nullopt otherwise.
std::optional<int64_t> parseTimeParam(std::string_view text);

// A whole decimal integer parameter ("42", "-7"); nullopt otherwise.
std::optional<int64_t> parseIntParam(std::string_view text);

// The 400 for a bad query or body parameter: invalid_value, naming it.
ApiError badParam(std::string param, std::string message);

// The answer to a usage or ledger read that failed, which it logs with
// `what` and the store's message: 503 server_error `ledger_unavailable`,
// with Retry-After, when the reads come from PostgreSQL and it cannot be
// reached (requests are still served and billed; each replica's outbox keeps
// its entries until PostgreSQL is back), 500 for anything else. A replica
// never answers with its own numbers instead: they would differ from the
// other replicas' without saying so.
ApiError ledgerReadError(const billing::LedgerReads& reads, const Status& status, std::string_view what);

}  // namespace lg::proxy

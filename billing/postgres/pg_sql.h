// Internal to lg_billing_postgres: the SQL that the writer and the reader
// share, so that the rollups a batch adds and the rollups verify()
// recomputes from the entries are the same expression.
#pragma once

#include <string>
#include <vector>

#include "billing/ledger.h"
#include "common/check.h"

namespace lg::billing::pg {

// The entry columns of ledger_entries, in LedgerEntry's order; `miss` is
// the anatomy as jsonb (encodeMissAnatomy), NULL when not recorded.
inline constexpr const char* kEntryColumns =
    "request_id, response_id, key_id, team, model, requested_model, endpoint, system_prompt, idempotency_key, "
    "start_us, end_us, ttft_us, prompt_tokens, hit_tokens_tier0, hit_tokens_disk, miss_tokens, output_tokens, "
    "choices, rate_hit, rate_miss, rate_output, price_version, priced_as, price_window, cost_hit, cost_miss, "
    "cost_output, status, finish_reason, miss";

// A rollup counter of usage_hourly: its column and the aggregate that sums
// it over entries `s` exactly as billing::countersOf counts one entry.
struct CounterColumn {
  std::string name;
  std::string rollup;
};

// Every counter column of usage_hourly, one per billing::CounterSlot, in its
// order: the one list the writer (insert and upsert), the reader (usage and
// verify) and the rollup below are built from. The columns themselves are
// made by the schema's migrations (pg_schema.cc), which never change.
inline const std::vector<CounterColumn>& counterColumns() {
  static const std::vector<CounterColumn> columns = [] {
    std::vector<CounterColumn> c = {
        {"requests", "count(*)::numeric"},
        {"completed", "count(*) FILTER (WHERE s.status = 'completed')::numeric"},
        {"cancelled", "count(*) FILTER (WHERE s.status = 'cancelled')::numeric"},
        {"failed", "count(*) FILTER (WHERE s.status = 'failed')::numeric"},
        {"refused", "count(*) FILTER (WHERE s.status = 'refused')::numeric"},
        {"prompt_tokens", "sum(s.prompt_tokens)"},
        {"hit_tokens_tier0", "sum(s.hit_tokens_tier0)"},
        {"hit_tokens_disk", "sum(s.hit_tokens_disk)"},
        {"miss_tokens", "sum(s.miss_tokens)"},
        {"output_tokens", "sum(s.output_tokens)"},
        {"cost_hit", "sum(s.cost_hit)"},
        {"cost_miss", "sum(s.cost_miss)"},
        {"cost_output", "sum(s.cost_output)"},
        // The hit tokens at the miss rate, only when billable.
        {"hit_at_miss_price",
         "coalesce(sum((s.hit_tokens_tier0::numeric + s.hit_tokens_disk::numeric) * s.rate_miss)"
         " FILTER (WHERE s.status IN ('completed', 'cancelled')), 0)"},
    };
    // Miss tokens by cause: the anatomy's tokens_by_cause (a cause with none
    // is absent from it; countersOf counts a negative count as none).
    for (size_t i = 0; i < kMissCauses; ++i) {
      const std::string cause(missCauseName(static_cast<MissCause>(i)));
      c.push_back({"miss_" + cause,
                   "coalesce(sum(greatest((s.miss->'tokens_by_cause'->>'" + cause + "')::numeric, 0)), 0)"});
    }
    // The miss tokens of the entries whose first computed token lies in each region.
    for (size_t i = 1; i < kPromptRegions; ++i) {
      const std::string region(promptRegionName(static_cast<PromptRegion>(i)));
      c.push_back({"first_miss_" + region,
                   "coalesce(sum(s.miss_tokens) FILTER (WHERE s.miss->>'first_miss_region' = '" + region + "'), 0)"});
    }
    LG_CHECK(c.size() == kCounterSlots, "usage_hourly has ", c.size(), " counter columns for ", kCounterSlots, " slots");
    return c;
  }();
  return columns;
}

// "requests, completed, ...": the counter columns as a list.
inline std::string counterColumnList() {
  std::string s;
  for (const CounterColumn& c : counterColumns()) s += (s.empty() ? "" : ", ") + c.name;
  return s;
}

// SELECT dimension, hour_s, team, value, <counters> FROM `source` (a relation
// with the entry columns) grouped per rollup row, exactly as
// billing::countersOf and aggregateKeys count an entry: every entry in one
// row of each dimension, tokens whatever its status, costs as recorded
// (zero unless billable), the hit tokens at the miss rate only when billable.
inline std::string rollupSelect(const std::string& source) {
  std::string sums;
  for (const CounterColumn& c : counterColumns()) sums += ", " + c.rollup + " AS " + c.name;
  return "SELECT d.dimension, greatest(s.start_us, 0) / 3600000000 * 3600 AS hour_s, d.team, d.value" + sums +
         " FROM " + source + " AS s CROSS JOIN LATERAL (VALUES ('key', s.team, s.key_id), ('team', s.team, s.team),"
         " ('model', '', s.model), ('system_prompt', s.team, s.system_prompt)) AS d(dimension, team, value)"
         " GROUP BY 1, 2, 3, 4";
}

}  // namespace lg::billing::pg

// Internal to lg_billing_postgres: the SQL that the writer and the reader
// share, so that the rollups a batch adds and the rollups verify()
// recomputes from the entries are the same expression.
#pragma once

#include <string>

namespace lg::billing::pg {

// The entry columns of ledger_entries, in LedgerEntry's order.
inline constexpr const char* kEntryColumns =
    "request_id, response_id, key_id, team, model, requested_model, endpoint, system_prompt, idempotency_key, "
    "start_us, end_us, ttft_us, prompt_tokens, hit_tokens_tier0, hit_tokens_disk, miss_tokens, output_tokens, "
    "choices, rate_hit, rate_miss, rate_output, price_version, priced_as, price_window, cost_hit, cost_miss, "
    "cost_output, status, finish_reason";

// The rollup counters of usage_hourly, in billing::CounterSlot order.
inline constexpr const char* kCounterColumns =
    "requests, completed, cancelled, failed, refused, prompt_tokens, hit_tokens_tier0, hit_tokens_disk, "
    "miss_tokens, output_tokens, cost_hit, cost_miss, cost_output, hit_at_miss_price";

// SELECT dimension, hour_s, team, value, <counters> FROM `source` (a relation
// with the entry columns) grouped per rollup row, exactly as
// billing::countersOf and aggregateKeys count an entry: every entry in one
// row of each dimension, tokens whatever its status, costs as recorded
// (zero unless billable), the hit tokens at the miss rate only when billable.
inline std::string rollupSelect(const std::string& source) {
  return "SELECT d.dimension, greatest(s.start_us, 0) / 3600000000 * 3600 AS hour_s, d.team, d.value,"
         " count(*)::numeric AS requests,"
         " count(*) FILTER (WHERE s.status = 'completed')::numeric AS completed,"
         " count(*) FILTER (WHERE s.status = 'cancelled')::numeric AS cancelled,"
         " count(*) FILTER (WHERE s.status = 'failed')::numeric AS failed,"
         " count(*) FILTER (WHERE s.status = 'refused')::numeric AS refused,"
         " sum(s.prompt_tokens) AS prompt_tokens, sum(s.hit_tokens_tier0) AS hit_tokens_tier0,"
         " sum(s.hit_tokens_disk) AS hit_tokens_disk, sum(s.miss_tokens) AS miss_tokens,"
         " sum(s.output_tokens) AS output_tokens,"
         " sum(s.cost_hit) AS cost_hit, sum(s.cost_miss) AS cost_miss, sum(s.cost_output) AS cost_output,"
         " coalesce(sum((s.hit_tokens_tier0::numeric + s.hit_tokens_disk::numeric) * s.rate_miss)"
         " FILTER (WHERE s.status IN ('completed', 'cancelled')), 0) AS hit_at_miss_price"
         " FROM " + source + " AS s CROSS JOIN LATERAL (VALUES ('key', s.team, s.key_id), ('team', s.team, s.team),"
         " ('model', '', s.model), ('system_prompt', s.team, s.system_prompt)) AS d(dimension, team, value)"
         " GROUP BY 1, 2, 3, 4";
}

}  // namespace lg::billing::pg

#include "billing/postgres/pg_ledger_writer.h"

#include <nlohmann/json.hpp>

#include <string>

#include "billing/postgres/pg_session.h"
#include "billing/postgres/pg_sql.h"

namespace lg::billing::pg {
namespace {

// The batch's one statement. jsonb_to_recordset turns the JSON array into
// typed rows (bigint columns from JSON numbers exactly: PostgreSQL reads
// them as numeric text, never as a double); the insert returns the rows
// that were new; the rollups are summed from those alone and upserted in
// primary-key order, so two replicas' batches lock shared rows in the same
// order (a deadlock is still possible in principle and is retried).
std::string batchStatement() {
  const std::string record_types =
      "request_id text, response_id text, key_id text, team text, model text, requested_model text, "
      "endpoint text, system_prompt text, idempotency_key text, start_us bigint, end_us bigint, ttft_us bigint, "
      "prompt_tokens bigint, hit_tokens_tier0 bigint, hit_tokens_disk bigint, miss_tokens bigint, "
      "output_tokens bigint, choices integer, rate_hit bigint, rate_miss bigint, rate_output bigint, "
      "price_version bigint, priced_as text, price_window integer, cost_hit bigint, cost_miss bigint, "
      "cost_output bigint, status text, finish_reason text, miss jsonb";
  std::string updates;
  for (const CounterColumn& c : counterColumns()) {
    if (!updates.empty()) updates += ", ";
    updates += c.name + " = usage_hourly." + c.name + " + EXCLUDED." + c.name;
  }
  return std::string("WITH batch AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS b(") + record_types + ")),"
         " ins AS (INSERT INTO ledger_entries (" + kEntryColumns + ") SELECT " + kEntryColumns +
         " FROM batch ORDER BY request_id COLLATE \"C\" ON CONFLICT (request_id) DO NOTHING RETURNING " + kEntryColumns + "),"
         " up AS (INSERT INTO usage_hourly (dimension, hour_s, team, value, " + counterColumnList() + ")"
         " SELECT * FROM (" + rollupSelect("ins") + ") AS a ORDER BY dimension, hour_s, team, value"
         " ON CONFLICT (dimension, hour_s, team, value) DO UPDATE SET " + updates + " RETURNING 1)"
         " SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM up)";
}

Status checkText(const LedgerEntry& e) {
  for (const std::string* s : {&e.request_id, &e.response_id, &e.key_id, &e.team, &e.model, &e.requested_model,
                               &e.endpoint, &e.system_prompt, &e.idempotency_key, &e.prices.priced_as,
                               &e.finish_reason, &e.miss.evicted_tier}) {
    if (s->find('\0') != std::string::npos) {
      return invalidArgument("ledger entry " + quoteValue(e.request_id) + " has a NUL byte, which PostgreSQL text cannot hold");
    }
  }
  return Status::ok();
}

nlohmann::json entryJson(const LedgerEntry& e) {
  return {{"request_id", e.request_id},
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
          {"rate_hit", e.prices.rates.input_cache_hit},
          {"rate_miss", e.prices.rates.input_cache_miss},
          {"rate_output", e.prices.rates.output},
          {"price_version", e.prices.version},
          {"priced_as", e.prices.priced_as},
          {"price_window", e.prices.window},
          {"cost_hit", e.cost.input_cache_hit},
          {"cost_miss", e.cost.input_cache_miss},
          {"cost_output", e.cost.output},
          {"status", std::string(entryStatusName(e.status))},
          {"finish_reason", e.finish_reason},
          // The stored entry's "miss" field as it is (null: not recorded).
          {"miss", nlohmann::json::parse(encodeMissAnatomy(e.miss))}};
}

}  // namespace

PgLedgerWriter::PgLedgerWriter(PostgresOptions options) : session_(std::make_unique<Session>(std::move(options))) {}

PgLedgerWriter::~PgLedgerWriter() = default;

Result<WriteResult> PgLedgerWriter::write(const std::vector<LedgerEntry>& entries) {
  WriteResult result;
  if (entries.empty()) return result;
  nlohmann::json batch = nlohmann::json::array();
  for (const LedgerEntry& e : entries) {
    LG_RETURN_IF_ERROR(checkText(e));
    batch.push_back(entryJson(e));
  }
  std::string text;
  try {
    text = batch.dump();  // strict: invalid UTF-8 throws
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(std::string("a ledger entry's text is not UTF-8: ") + e.what());
  }
  static const std::string statement = batchStatement();
  LG_RETURN_IF_ERROR(session_->run("writing a ledger batch", [&](pqxx::connection& c) {
    pqxx::work tx(c);
    const pqxx::result r = tx.exec_params(statement, text);
    const auto inserted = r[0][0].as<int64_t>();
    tx.commit();
    result.inserted = static_cast<size_t>(inserted);
    result.duplicates = entries.size() - result.inserted;
  }));
  return result;
}

}  // namespace lg::billing::pg

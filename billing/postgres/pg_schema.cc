#include "billing/postgres/pg_schema.h"

#include <string>

#include "billing/postgres/pg_session.h"

namespace lg::billing::pg {
namespace {

// Version 1: the entries and their hourly rollups. Entry columns mirror
// LedgerEntry (billing/ledger.h) one to one; money is pico-dollars in
// bigint, exactly as the ledger holds it. Rollup counters are numeric(40,0):
// one entry's cost per kind may reach ~2.1e18 (a rate of at most 10^9
// pico-dollars per token times < 2^31 tokens), so a few in one hour would
// overflow a bigint sum, and an overflow there would abort every later batch.
constexpr std::string_view kV1 = R"sql(
CREATE TABLE ledger_entries (
  request_id        text PRIMARY KEY,
  response_id       text NOT NULL,
  key_id            text NOT NULL,
  team              text NOT NULL,
  model             text NOT NULL,
  requested_model   text NOT NULL,
  endpoint          text NOT NULL,
  system_prompt     text NOT NULL,  -- fingerprint; '' when none
  idempotency_key   text NOT NULL,  -- SHA-256 hex; '' when none
  start_us          bigint NOT NULL,
  end_us            bigint NOT NULL,
  ttft_us           bigint NOT NULL,
  prompt_tokens     bigint NOT NULL,
  hit_tokens_tier0  bigint NOT NULL,
  hit_tokens_disk   bigint NOT NULL,
  miss_tokens       bigint NOT NULL,
  output_tokens     bigint NOT NULL,
  choices           integer NOT NULL,
  rate_hit          bigint NOT NULL,  -- pico-dollars per token
  rate_miss         bigint NOT NULL,
  rate_output       bigint NOT NULL,
  price_version     bigint NOT NULL,
  priced_as         text NOT NULL,
  price_window      integer NOT NULL,
  cost_hit          bigint NOT NULL,  -- pico-dollars
  cost_miss         bigint NOT NULL,
  cost_output       bigint NOT NULL,
  status            text NOT NULL CHECK (status IN ('completed', 'cancelled', 'failed', 'refused')),
  finish_reason     text NOT NULL,
  committed_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_entries_start ON ledger_entries (start_us);
CREATE INDEX ledger_entries_team_start ON ledger_entries (team, start_us);

CREATE TABLE usage_hourly (
  dimension          text NOT NULL CHECK (dimension IN ('key', 'team', 'model', 'system_prompt')),
  hour_s             bigint NOT NULL,  -- Unix seconds of the hour's start (of the entries' start_us)
  team               text NOT NULL,    -- the entries' team; '' for the model dimension
  value              text NOT NULL,    -- key id, team, model or fingerprint ('' when none)
  requests           numeric(40,0) NOT NULL,
  completed          numeric(40,0) NOT NULL,
  cancelled          numeric(40,0) NOT NULL,
  failed             numeric(40,0) NOT NULL,
  refused            numeric(40,0) NOT NULL,
  prompt_tokens      numeric(40,0) NOT NULL,
  hit_tokens_tier0   numeric(40,0) NOT NULL,
  hit_tokens_disk    numeric(40,0) NOT NULL,
  miss_tokens        numeric(40,0) NOT NULL,
  output_tokens      numeric(40,0) NOT NULL,
  cost_hit           numeric(40,0) NOT NULL,
  cost_miss          numeric(40,0) NOT NULL,
  cost_output        numeric(40,0) NOT NULL,
  hit_at_miss_price  numeric(40,0) NOT NULL,
  PRIMARY KEY (dimension, hour_s, team, value)
);
)sql";

// Version 2: the control records shared by every replica (docs/billing.md,
// "The control plane"): one row per record of the billing store's control
// prefixes (key/, team/, budget/, price/, resppurge/, snippets/), its value as the
// store holds it, NULL once erased (the row stays, so that every replica
// learns of the erasure). `seq` is control_seq's value of the transaction
// that wrote the row last; writers take kControlLock first and draw it
// inside that lock, so seq order is commit order and a follower that has
// read every row up to seq s has seen every commit up to s.
constexpr std::string_view kV2 = R"sql(
CREATE SEQUENCE control_seq;
CREATE TABLE control_records (
  record_key  text PRIMARY KEY,
  value       bytea,                  -- NULL: erased
  seq         bigint NOT NULL,        -- control_seq of the last write
  replica     text NOT NULL,          -- the replica that wrote it last
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX control_records_seq ON control_records (seq);
)sql";

// Version 3: the index of stored responses (billing/response_index.h): which
// replica holds each API key's stored response, until it expires; `deleted`
// is final (a deleted response never comes back).
constexpr std::string_view kV3 = R"sql(
CREATE TABLE stored_responses (
  key_id       text NOT NULL,
  response_id  text NOT NULL,
  replica      text NOT NULL,     -- whose billing store holds the record
  expires_s    bigint NOT NULL,   -- Unix seconds
  deleted      boolean NOT NULL,
  PRIMARY KEY (key_id, response_id)
);
CREATE INDEX stored_responses_expires ON stored_responses (expires_s);
)sql";

// Version 4: secrets every replica must share, one row each, written once
// by the first replica that offers one (INSERT ... ON CONFLICT DO NOTHING) and
// never changed. "system-prompt": the system prompt fingerprint's HMAC key
// (pg_fingerprint_key.h). No CHECK on `value`: a violated constraint's
// message quotes the failing row, and the key must reach no log; its length
// is checked by the reader.
constexpr std::string_view kV4 = R"sql(
CREATE TABLE cluster_secrets (
  name        text PRIMARY KEY,
  value       bytea NOT NULL,
  replica     text NOT NULL,      -- the replica that offered it
  created_at  timestamptz NOT NULL DEFAULT now()
);
)sql";

// Version 5: why requests missed (billing/ledger.h, MissAnatomy). `miss`
// holds an entry's anatomy as the RocksDB entry's "miss" field holds it
// (encodeMissAnatomy), NULL for entries without one (all those written
// before it); usage_hourly gains the counters the anatomy feeds: miss tokens
// by cause, and the miss tokens of entries by the region of their first
// computed token. Rows already there had no anatomy: 0 is their exact value.
constexpr std::string_view kV5 = R"sql(
ALTER TABLE ledger_entries ADD COLUMN miss jsonb;
ALTER TABLE usage_hourly
  ADD COLUMN miss_new            numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_evicted        numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_model_changed  numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_in_flight      numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_recomputed     numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_partial_block  numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN miss_uncached       numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN first_miss_system   numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN first_miss_tools    numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN first_miss_history  numeric(40,0) NOT NULL DEFAULT 0,
  ADD COLUMN first_miss_input    numeric(40,0) NOT NULL DEFAULT 0;
)sql";

Status ensureMigrationsTable(pqxx::work& tx) {
  tx.exec(
      "CREATE TABLE IF NOT EXISTS schema_migrations ("
      " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
  return Status::ok();
}

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "ledger entries and hourly usage rollups", kV1},
      {2, "control records shared by the replicas", kV2},
      {3, "the index of stored responses", kV3},
      {4, "secrets shared by the replicas", kV4},
      {5, "miss anatomy of entries and miss counters of usage rollups", kV5},
  };
  return kMigrations;
}

Result<MigrationReport> migrate(const PostgresOptions& options) {
  Session session(options);
  MigrationReport report;
  Status refused;
  for (const Migration& m : migrations()) {
    bool applied = false;
    LG_RETURN_IF_ERROR(session.run("schema migration " + std::to_string(m.version), [&](pqxx::connection& c) {
      applied = false;
      pqxx::work tx(c);
      // Held until this transaction ends: concurrent starts apply each
      // migration once, in turn, and the CREATE TABLE IF NOT EXISTS below
      // never races another (which it would, on pg_type's unique index).
      tx.exec("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLock) + ")");
      (void)ensureMigrationsTable(tx);
      const pqxx::result r = tx.exec_params("SELECT name FROM schema_migrations WHERE version = $1", m.version);
      if (!r.empty()) {
        if (r[0][0].as<std::string>() != m.name) {
          refused = dataLoss("schema migration " + std::to_string(m.version) + " is recorded as " +
                             quoteValue(r[0][0].as<std::string>()) + ", this binary's is " + quoteValue(std::string(m.name)));
        }
        tx.abort();
        return;
      }
      tx.exec(std::string(m.sql));
      tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, std::string(m.name));
      tx.commit();
      applied = true;
    }));
    LG_RETURN_IF_ERROR(refused);
    if (applied) report.applied.push_back(m.version);
  }
  LG_RETURN_IF_ERROR(session.run("schema version", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    report.version = tx.exec("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0].as<int>();
  }));
  return report;
}

}  // namespace lg::billing::pg

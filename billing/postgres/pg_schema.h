// The ledger of record's schema in PostgreSQL and its versioned migrations
// (docs/billing.md, "The ledger of record in PostgreSQL").
//
// Tables:
//   schema_migrations(version, name, applied_at)    one row per migration applied
//   ledger_entries(request_id PRIMARY KEY, ...)     one row per LedgerEntry; money and
//                                                   tokens bigint, as billing/ledger.h
//   usage_hourly(dimension, hour_s, team, value, <counters>)
//                                                   the hourly rollups per key, team,
//                                                   model and system prompt; counters
//                                                   numeric(40,0), which no sum overflows
//   control_records(record_key PRIMARY KEY, value, seq, replica, updated_at)
//                                                   keys, teams, budgets, prices and purges
//                                                   shared by the replicas (pg_control_plane.h)
//   stored_responses(key_id, response_id PRIMARY KEY, replica, expires_s, deleted)
//                                                   which replica holds each stored
//                                                   response (pg_response_index.h)
//   cluster_secrets(name PRIMARY KEY, value, replica, created_at)
//                                                   secrets the replicas share, written once:
//                                                   the system prompt fingerprint's key
//                                                   (pg_fingerprint_key.h)
//
// migrate() applies, in order, each migration that schema_migrations lacks,
// each in its own transaction that first takes a transaction-level advisory
// lock (kMigrationLock), so replicas that start together apply each one
// exactly once and wait for one another; a migration that fails rolls back
// whole. A database that already holds a migration this binary lacks (a
// newer replica ran first) is accepted: migrations only add. A recorded
// migration whose name differs from this binary's is refused (an edited
// migration).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "billing/postgres/postgres_options.h"
#include "common/status.h"

namespace lg::billing::pg {

// pg_advisory_xact_lock's key for migrations ("LGSCHEMA" in ASCII).
inline constexpr int64_t kMigrationLock = 0x4c47534348454d41;
// pg_advisory_xact_lock's key for every write of control_records ("LGCONTRL"):
// writes are serialized, so their seq order is their commit order.
inline constexpr int64_t kControlLock = 0x4c47434f4e54524c;

struct Migration {
  int version = 0;  // 1, 2, ...: the order they run in
  std::string_view name;
  std::string_view sql;  // one or more statements
};
// Every migration this binary knows, by version.
const std::vector<Migration>& migrations();

struct MigrationReport {
  std::vector<int> applied;  // the versions this call applied (empty: already current)
  int version = 0;           // the highest version recorded afterwards
};

// Brings the database at options.url up to this binary's schema.
Result<MigrationReport> migrate(const PostgresOptions& options);

}  // namespace lg::billing::pg

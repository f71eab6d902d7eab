// PgLedgerReader: reads the ledger of record in PostgreSQL: an entry by
// request id, usage per dimension and hour range from the hourly rollups
// (the same rows and order as billing::Ledger::usage gives for the same
// entries), and verify(), which recomputes every rollup from the entries.
//
// The connection is made on first use and again after a failure; a read
// while PostgreSQL is away fails with Unavailable.
//
// Thread-safety: every method may be called from any thread (one connection,
// calls serialized).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "billing/ledger.h"
#include "billing/postgres/postgres_options.h"
#include "common/status.h"

namespace lg::billing::pg {

class Session;

class PgLedgerReader {
 public:
  explicit PgLedgerReader(PostgresOptions options);
  ~PgLedgerReader();
  PgLedgerReader(const PgLedgerReader&) = delete;
  PgLedgerReader& operator=(const PgLedgerReader&) = delete;

  Result<std::optional<LedgerEntry>> find(const std::string& request_id);
  Result<int64_t> entryCount();
  // As Ledger::usage: rows per group (and period, with a granularity),
  // sorted by (group, team, period). OutOfRange when a sum exceeds the
  // uint64 of Counters (PostgreSQL holds it exactly; this type cannot).
  Result<std::vector<UsageRow>> usage(const UsageQuery& query);
  // Recomputes usage_hourly from ledger_entries; mismatches name the row
  // (dimension/hour_s/team/value) and both sets of counters.
  Result<VerifyReport> verify();

 private:
  std::mutex mu_;
  std::unique_ptr<Session> session_;  // guarded by mu_
};

}  // namespace lg::billing::pg

// PgLedgerWriter: writes batches of ledger entries to the ledger of record
// in PostgreSQL (docs/billing.md). One batch is one transaction: the
// entries are inserted with request_id as the idempotency key (ON CONFLICT
// DO NOTHING), and the hourly rollups (usage_hourly) are added from exactly
// the rows that insert returned, in the same statement. A batch written
// twice (a drain that crashed after the commit and before it forgot the
// batch) therefore adds nothing the second time, and the rollups only ever
// count committed rows.
//
// The schema must be current (pg_schema.h: migrate()). The connection is
// made on first use and made again after a failure, so a writer outlives
// PostgreSQL being away: a write then fails with Unavailable and the caller
// keeps the batch for later.
//
// Thread-safety: one thread at a time (the drainer's); use one writer per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "billing/ledger.h"
#include "billing/postgres/postgres_options.h"
#include "common/status.h"

namespace lg::billing::pg {

class Session;

struct WriteResult {
  size_t inserted = 0;    // entries new to PostgreSQL
  size_t duplicates = 0;  // entries whose request_id it already held (or repeated in the batch)
};

class PgLedgerWriter {
 public:
  explicit PgLedgerWriter(PostgresOptions options);
  ~PgLedgerWriter();
  PgLedgerWriter(const PgLedgerWriter&) = delete;
  PgLedgerWriter& operator=(const PgLedgerWriter&) = delete;

  // Inserts `entries` in one transaction and returns after its commit.
  // Unavailable: PostgreSQL could not be reached, or the connection broke
  // during the commit (its outcome unknown; writing the batch again is
  // safe). InvalidArgument: an entry PostgreSQL cannot hold (a NUL byte or
  // invalid UTF-8 in a string), before anything is sent. Nothing is written
  // unless the result is OK.
  Result<WriteResult> write(const std::vector<LedgerEntry>& entries);

 private:
  std::unique_ptr<Session> session_;
};

}  // namespace lg::billing::pg

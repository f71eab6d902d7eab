// PgLedgerReader: reads the ledger of record in PostgreSQL, as
// billing::LedgerReads (billing/ledger.h) with the same answers as the
// RocksDB ledger gives for the same entries: an entry by request id, entries
// by start time (pages in the RocksDB ledger's key order), the newest
// entries, usage per dimension and hour range from the hourly rollups, and
// verify(), which recomputes every rollup from the entries. With
// billing.postgres_url the usage API and the dashboard read through it, so
// every replica shows the same numbers (docs/billing.md).
//
// The connection is made on first use and again after a failure; a read
// while PostgreSQL is away fails with Unavailable. Error messages never
// carry the URL's password.
//
// Thread-safety: every method may be called from any thread (one connection,
// statements serialized; scanEntries runs its callback between pages,
// outside the lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/ledger.h"
#include "billing/postgres/postgres_options.h"
#include "common/status.h"

namespace lg::billing::pg {

class Session;

class PgLedgerReader final : public LedgerReads {
 public:
  explicit PgLedgerReader(PostgresOptions options);
  ~PgLedgerReader() override;
  PgLedgerReader(const PgLedgerReader&) = delete;
  PgLedgerReader& operator=(const PgLedgerReader&) = delete;

  std::string_view source() const override { return "postgresql"; }
  Result<std::optional<LedgerEntry>> find(const std::string& request_id) const override;
  // Pages of kScanPage entries, each its own statement, ordered by
  // (start_us, request_id COLLATE "C"): the RocksDB ledger's key order. An
  // entry a replica drains during the scan appears if it sorts after the page
  // being read.
  Status scanEntries(int64_t from_us, int64_t to_us, const std::function<bool(const LedgerEntry&)>& fn) const override;
  // The index by (team, start_us) answers a team's newest entries without a
  // bound: `max_examined` is not needed here and is ignored.
  Result<std::vector<LedgerEntry>> recentEntries(size_t limit, std::string_view team, int64_t from_us, int64_t to_us,
                                                 size_t max_examined) const override;
  // As Ledger::usage: rows per group (and period, with a granularity),
  // sorted by (group, team, period). OutOfRange when a sum exceeds the
  // uint64 of Counters (PostgreSQL holds it exactly; this type cannot).
  Result<std::vector<UsageRow>> usage(const UsageQuery& query) const override;
  // Recomputes usage_hourly from ledger_entries; mismatches name the row
  // (dimension/hour_s/team/value) and both sets of counters.
  Result<VerifyReport> verify() const override;

  Result<int64_t> entryCount() const;

  static constexpr size_t kScanPage = 1000;

 private:
  // `s` with the URL's password hidden (libpq may quote the connection string).
  Status redacted(Status s) const;

  mutable std::mutex mu_;
  std::unique_ptr<Session> session_;  // guarded by mu_
};

}  // namespace lg::billing::pg

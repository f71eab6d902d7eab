// How LatentGate reaches the PostgreSQL that holds the ledger of record
// (docs/billing.md, "The ledger of record in PostgreSQL").
#pragma once

#include <string>

namespace lg::billing::pg {

struct PostgresOptions {
  // A libpq connection URL or key=value string
  // ("postgresql://user@host:5432/db?sslmode=verify-full").
  std::string url;
  // Added to the URL unless it names its own: libpq's default is to wait
  // forever for a host that does not answer.
  int connect_timeout_s = 5;
  // Tries of a batch that PostgreSQL aborted for a deadlock or a
  // serialization failure (safe: the batch is idempotent), >= 1.
  int max_attempts = 3;
  // Added to the URL (libpq's `options=-c statement_timeout=...`) when > 0
  // and the URL sets no `options` of its own: a statement that waits longer
  // (a lock held elsewhere, a server that stopped answering) fails instead
  // of holding its caller (the drain's shutdown) indefinitely.
  int statement_timeout_ms = 0;
};

}  // namespace lg::billing::pg

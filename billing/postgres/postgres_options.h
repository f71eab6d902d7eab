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
};

}  // namespace lg::billing::pg

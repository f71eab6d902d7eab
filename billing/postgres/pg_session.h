// Internal to lg_billing_postgres (only its .cc files include it): one
// libpqxx connection, made on first use and dropped after a failure so that
// the next call connects again, and the translation of libpqxx's exceptions
// into Status at the edge of this library.
//
// Thread-safety: none; each owner serializes its calls.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <pqxx/pqxx>

#include "billing/postgres/postgres_options.h"
#include "common/status.h"

namespace lg::billing::pg {

// The URL with connect_timeout added when it names none.
std::string connectionString(const PostgresOptions& options);

// What a libpqxx exception means for the caller: Unavailable for a lost or
// refused connection and for a commit whose outcome is unknown (a retry is
// safe: every write here is idempotent), Aborted-like Unavailable for a
// deadlock or serialization failure, Unavailable for tables not migrated
// yet, Internal for the rest, each with
// `context` and the server's message (and SQLSTATE when there is one).
Status statusOf(const std::exception& e, std::string_view context);
// Whether statusOf's exception is worth retrying at once (deadlock, serialization failure).
bool retryableAtOnce(const std::exception& e);

class Session {
 public:
  explicit Session(PostgresOptions options);
  ~Session();

  // Runs fn on the connection (connecting first when there is none); any
  // exception becomes a Status, and a broken connection is dropped. A kept
  // connection found broken is replaced and fn run once more; deadlocks and
  // serialization failures are retried up to max_attempts.
  Status run(std::string_view context, const std::function<void(pqxx::connection&)>& fn);

  const PostgresOptions& options() const { return options_; }

 private:
  PostgresOptions options_;
  std::string conninfo_;
  std::unique_ptr<pqxx::connection> conn_;
};

}  // namespace lg::billing::pg

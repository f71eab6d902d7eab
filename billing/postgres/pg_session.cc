#include "billing/postgres/pg_session.h"

#include <utility>

namespace lg::billing::pg {

std::string connectionString(const PostgresOptions& options) {
  std::string s = options.url;
  const bool is_url = s.rfind("postgresql://", 0) == 0 || s.rfind("postgres://", 0) == 0;
  const auto add = [&](const std::string& url_param, const std::string& key_value) {
    if (is_url) {
      s += (s.find('?') == std::string::npos ? "?" : "&") + url_param;
    } else {
      s = s.empty() ? key_value : s + " " + key_value;
    }
  };
  if (s.find("connect_timeout") == std::string::npos && options.connect_timeout_s > 0) {
    const std::string t = "connect_timeout=" + std::to_string(options.connect_timeout_s);
    add(t, t);
  }
  if (s.find("options=") == std::string::npos && options.statement_timeout_ms > 0) {
    const std::string ms = std::to_string(options.statement_timeout_ms);
    add("options=-c%20statement_timeout%3D" + ms, "options='-c statement_timeout=" + ms + "'");
  }
  return s;
}

Status statusOf(const std::exception& e, std::string_view context) {
  const std::string where(context);
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e) != nullptr) {
    return unavailable(where + ": the connection was lost during the commit, whose outcome is unknown: " + e.what());
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) {
    return unavailable(where + ": PostgreSQL unreachable: " + e.what());
  }
  // libpqxx 6.4 derives these from pqxx::failure, not sql_error: no SQLSTATE.
  if (dynamic_cast<const pqxx::deadlock_detected*>(&e) != nullptr ||
      dynamic_cast<const pqxx::serialization_failure*>(&e) != nullptr) {
    return unavailable(where + ": aborted by PostgreSQL (deadlock or serialization failure), retry: " + e.what());
  }
  if (dynamic_cast<const pqxx::statement_completion_unknown*>(&e) != nullptr) {
    return unavailable(where + ": the statement's outcome is unknown: " + e.what());
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string state = sql->sqlstate();
    // Class 08 (connection exception), 57P01..03 (shutdown): the server, not the statement.
    if (state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0) {
      return unavailable(where + ": PostgreSQL unavailable (SQLSTATE " + state + "): " + e.what());
    }
    if (state == "40001" || state == "40P01") {
      return unavailable(where + ": aborted (SQLSTATE " + state + "), retry: " + e.what());
    }
    // Undefined table: a database the drain has not migrated yet (it does at
    // start, once PostgreSQL answers): not there for now, like a server away.
    if (state == "42P01") {
      return unavailable(where + ": the ledger's tables are not in this database yet (SQLSTATE 42P01): " + e.what());
    }
    return internalError(where + ": SQLSTATE " + state + ": " + e.what());
  }
  return internalError(where + ": " + e.what());
}

bool retryableAtOnce(const std::exception& e) {
  if (dynamic_cast<const pqxx::deadlock_detected*>(&e) != nullptr ||
      dynamic_cast<const pqxx::serialization_failure*>(&e) != nullptr) {
    return true;
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    return sql->sqlstate() == "40001" || sql->sqlstate() == "40P01";
  }
  return false;
}

Session::Session(PostgresOptions options) : options_(std::move(options)), conninfo_(connectionString(options_)) {}

Session::~Session() = default;

Status Session::run(std::string_view context, const std::function<void(pqxx::connection&)>& fn) {
  const int attempts = std::max(options_.max_attempts, 1);
  bool reconnected = false;
  for (int attempt = 1;; ++attempt) {
    bool reused = false;
    try {
      if (conn_ == nullptr || !conn_->is_open()) {
        conn_.reset();
        conn_ = std::make_unique<pqxx::connection>(conninfo_);
      } else {
        reused = true;
      }
      fn(*conn_);
      return Status::ok();
    } catch (const std::exception& e) {
      const Status status = statusOf(e, context);
      // A connection PostgreSQL closed while it sat idle (a restart, an idle
      // timeout) fails on its next use: once more on a new one, or the first
      // read after every outage would fail. Safe for every caller here
      // (reads, and idempotent batches); an in-doubt commit is a distinct
      // error, left to the caller.
      if (reused && !reconnected && dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) {
        conn_.reset();
        reconnected = true;
        --attempt;
        continue;
      }
      const bool retry = retryableAtOnce(e);
      if (retry && attempt < attempts) continue;
      // A statement's own error or an aborted transaction leaves the
      // connection usable; after anything else its state is unknown, so
      // the next call starts afresh.
      const bool statement_error = dynamic_cast<const pqxx::sql_error*>(&e) != nullptr &&
                                   status.code() != StatusCode::kUnavailable;
      if (!retry && !statement_error) conn_.reset();
      return status;
    }
  }
}

}  // namespace lg::billing::pg

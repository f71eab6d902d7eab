// One private PostgreSQL (postgres_server.h) for a whole test binary: a
// global GoogleTest environment, registered by linking lg_test_postgres,
// starts it before the first test and stops it (by pid) after the last; each
// test takes a fresh database of its own.
//
// Thread-safety: the tests' main thread (setup and teardown).
#pragma once

#include <optional>
#include <string>

#include "tests/support/postgres_server.h"

namespace lg::test {

// The binary's server; null before the environment set it up, or when that
// failed (the environment's failure says why).
PostgresServer* sharedPostgres();

// CREATE DATABASE `<prefix><n>` (n counts up in this process) on the shared
// server, started again first when a test stopped it: its URL, or nothing
// with the reason in `error`.
std::optional<std::string> freshPostgresDatabase(const std::string& prefix, std::string* error);

}  // namespace lg::test

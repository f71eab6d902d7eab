// A private PostgreSQL 15 for tests: its own cluster (initdb) in a private
// temporary directory, listening on a free 127.0.0.1 port and on a unix
// socket inside that directory, never on the default port or a system-wide
// instance. As root, initdb and postgres run as the `postgres` account (the
// directory is chowned to it). fsync is off: a test's data need not survive
// a power loss.
//
// stop() shuts down exactly the postmaster it started (by pid: SIGINT, the
// fast shutdown that disconnects clients, then SIGKILL after a bounded
// wait); start() runs it again on the same data directory and port, so a
// test can take PostgreSQL away for a while. The destructor stops it and
// removes the directory.
//
// Thread-safety: one thread at a time (a test's setup and teardown).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "tests/support/server_process.h"

namespace lg::test {

class PostgresServer {
 public:
  // initdb + start; nullptr with `error` set (and nothing left behind) on failure.
  static std::unique_ptr<PostgresServer> create(std::string* error);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Starts the postmaster on the existing cluster and waits until it accepts
  // connections. True at once when it runs.
  bool start(std::string* error);
  // Fast shutdown of the postmaster this object started; waits for it.
  void stop();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

  // A libpq URL for `database` as the cluster's superuser over TCP.
  std::string url(const std::string& database = "postgres") const;
  // CREATE DATABASE `name` (a plain identifier); false with `error` set.
  bool createDatabase(const std::string& name, std::string* error);

 private:
  PostgresServer() = default;
  std::string dir_;
  std::string data_dir_;
  std::string log_path_;
  std::optional<RunAs> run_as_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace lg::test

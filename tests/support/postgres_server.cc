#include "tests/support/postgres_server.h"

#include <libpq-fe.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

namespace lg::test {
namespace {

constexpr const char* kBinDir = "/usr/lib/postgresql/15/bin";
constexpr const char* kSuperuser = "lg";

bool chownTree(const std::string& path, const RunAs& as) {
  if (chown(path.c_str(), as.uid, as.gid) != 0) return false;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec)) {
    if (lchown(e.path().c_str(), as.uid, as.gid) != 0) return false;
  }
  return !ec;
}

}  // namespace

std::unique_ptr<PostgresServer> PostgresServer::create(std::string* error) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  if (!postgresAccount(&server->run_as_, error)) return nullptr;
  server->dir_ = makePrivateDir("lg_pg");
  if (server->dir_.empty()) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  server->data_dir_ = server->dir_ + "/data";
  server->log_path_ = server->dir_ + "/postgres.log";
  if (server->run_as_ && !chownTree(server->dir_, *server->run_as_)) {
    *error = "chown " + server->dir_ + " to postgres failed";
    return nullptr;
  }
  const std::string initdb_log = server->dir_ + "/initdb.log";
  const int rc = runLogged({std::string(kBinDir) + "/initdb", "-D", server->data_dir_, "-U", kSuperuser, "-A", "trust",
                            "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"},
                           initdb_log, server->run_as_, error);
  if (rc != 0) {
    *error = "initdb failed (" + std::to_string(rc) + "): " + fileTail(initdb_log);
    return nullptr;
  }
  if (!server->start(error)) return nullptr;
  return server;
}

PostgresServer::~PostgresServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool PostgresServer::start(std::string* error) {
  if (pid_ > 0) return true;
  ServerLaunch launch;
  launch.name = "postgres";
  launch.spawn = [&](int port, std::string* why) {
    return spawnLogged({std::string(kBinDir) + "/postgres", "-D", data_dir_, "-p", std::to_string(port), "-c",
                        "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir_, "-c", "fsync=off", "-c",
                        "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=64", "-c",
                        "shared_buffers=32MB", "-c", "logging_collector=off"},
                       log_path_, run_as_, why);
  };
  launch.ready = [](int port) {
    const std::string conninfo =
        "host=127.0.0.1 port=" + std::to_string(port) + " user=" + kSuperuser + " dbname=postgres connect_timeout=2";
    return PQping(conninfo.c_str()) == PQPING_OK;
  };
  launch.log = [&] { return fileTail(log_path_); };
  launch.timeout = std::chrono::seconds(60);
  launch.poll = std::chrono::milliseconds(20);
  // SIGINT is PostgreSQL's fast shutdown (stop() below).
  launch.stop_signal = SIGINT;
  // A port another process took between our probe and the postmaster's bind
  // fails the start: startServer tries others, keeping the one that worked
  // for restarts.
  return startServer(launch, &port_, &pid_, error);
}

void PostgresServer::stop() {
  if (pid_ <= 0) return;
  // SIGINT is PostgreSQL's fast shutdown: it ends the sessions and
  // checkpoints. SIGTERM (smart) would wait for clients to leave.
  stopChild(pid_, SIGINT, 15'000);
  pid_ = -1;
}

std::string PostgresServer::url(const std::string& database) const {
  return "postgresql://" + std::string(kSuperuser) + "@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

bool PostgresServer::createDatabase(const std::string& name, std::string* error) {
  PGconn* conn = PQconnectdb((url() + "?connect_timeout=5").c_str());
  bool ok = PQstatus(conn) == CONNECTION_OK;
  if (ok) {
    PGresult* r = PQexec(conn, ("CREATE DATABASE \"" + name + "\"").c_str());
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) *error = PQresultErrorMessage(r);
    PQclear(r);
  } else {
    *error = PQerrorMessage(conn);
  }
  PQfinish(conn);
  return ok;
}

}  // namespace lg::test

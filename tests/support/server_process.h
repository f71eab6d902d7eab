// Child server processes for tests that need a real PostgreSQL or Redis
// (postgres_server.h, redis_server.h): a free loopback port, a process
// started (as another user when asked) with its output in a log file, and a
// stop that signals exactly that process id and reaps it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace lg::test {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released). Another process may take it before the caller binds it; the
// servers retry with a new one when theirs fails to start.
int freeLoopbackPort();

struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;
};
// The `postgres` account when this process runs as root (PostgreSQL refuses
// to run as root), nothing otherwise. False with `error` set when root has
// no such account.
bool postgresAccount(std::optional<RunAs>* account, std::string* error);

// Starts argv[0] (a path) with stdin from /dev/null and stdout and stderr
// appended to `log_path`, in its own process group, as `as` when given
// (setgid + setuid in the child before exec). Returns the child's pid, or -1
// with `error` set.
pid_t spawnLogged(const std::vector<std::string>& argv, const std::string& log_path, const std::optional<RunAs>& as,
                  std::string* error);

// Whether `pid` (our child) has exited; reaps it when it has (exit code in *status).
bool exited(pid_t pid, int* status = nullptr);

// Sends `signal` to `pid` (our child), waits up to `grace_ms` for it to
// exit, then sends SIGKILL and reaps it. Returns true when it exited within
// the grace period. Never signals anything but `pid`.
bool stopChild(pid_t pid, int signal, int grace_ms);

// Runs argv to completion as `as` (output to `log_path`); its exit code, or -1.
int runLogged(const std::vector<std::string>& argv, const std::string& log_path, const std::optional<RunAs>& as,
              std::string* error);

// How a test server is started and found ready (startServer).
struct ServerLaunch {
  std::string name;  // for errors: "redis-server"
  // Starts the server listening on `port`: its pid, or -1 with `error` set.
  std::function<pid_t(int port, std::string* error)> spawn;
  // Whether it answers on `port` yet.
  std::function<bool(int port)> ready;
  // Its log's tail, for errors.
  std::function<std::string()> log;
  std::chrono::milliseconds timeout{30'000};
  std::chrono::milliseconds poll{10};
  int stop_signal = SIGTERM;  // when it never became ready
};
// Starts a server on a free loopback port and waits until it is ready. A
// port another process took between the probe and the server's bind makes
// it exit: up to five attempts, each on a new port, except that a *port set
// before (a restart) is tried first. True with *port and *pid set; false
// with `error` set and nothing left running.
bool startServer(const ServerLaunch& launch, int* port, pid_t* pid, std::string* error);

// The last `max_bytes` of a file (a server's log, for error messages).
std::string fileTail(const std::string& path, size_t max_bytes = 2000);

// A fresh private directory /tmp/<prefix>_XXXXXX (0700); empty on failure.
std::string makePrivateDir(const std::string& prefix);

}  // namespace lg::test

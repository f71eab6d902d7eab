// A private redis-server for tests: a free 127.0.0.1 port, its working
// directory and unix socket in a private temporary directory, no
// persistence (no RDB, no AOF). The destructor stops exactly the process it
// started (SIGTERM, then SIGKILL after a bounded wait) and removes the
// directory; stop() and start() take it away and bring it back (empty) on
// the same port.
//
// Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace lg::test {

class RedisServer {
 public:
  // nullptr with `error` set on failure.
  static std::unique_ptr<RedisServer> create(std::string* error);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts redis-server and waits until it answers PING.
  bool start(std::string* error);
  void stop();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  RedisServer() = default;
  std::string dir_;
  std::string log_path_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace lg::test

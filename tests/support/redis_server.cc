#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/support/server_process.h"

namespace lg::test {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

// Whether 127.0.0.1:port answers an inline PING with +PONG.
bool pong(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && write(fd, "PING\r\n", 6) == 6) {
    char buf[16] = {};
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    ok = n >= 5 && std::string(buf, 5) == "+PONG";
  }
  close(fd);
  return ok;
}

}  // namespace

std::unique_ptr<RedisServer> RedisServer::create(std::string* error) {
  std::unique_ptr<RedisServer> server(new RedisServer());
  server->dir_ = makePrivateDir("lg_redis");
  if (server->dir_.empty()) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  server->log_path_ = server->dir_ + "/redis.log";
  if (!server->start(error)) return nullptr;
  return server;
}

RedisServer::~RedisServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool RedisServer::start(std::string* error) {
  if (pid_ > 0) return true;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (port_ <= 0 || attempt > 0) port_ = freeLoopbackPort();
    if (port_ <= 0) {
      *error = "no free port";
      return false;
    }
    pid_ = spawnLogged({kRedisServer, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir", dir_,
                        "--unixsocket", dir_ + "/redis.sock", "--unixsocketperm", "700", "--save", "", "--appendonly",
                        "no", "--daemonize", "no", "--protected-mode", "yes"},
                       log_path_, std::nullopt, error);
    if (pid_ < 0) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int status = 0;
    bool died = false;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pong(port_)) return true;
      if (exited(pid_, &status)) {
        died = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!died) {
      stop();
      *error = "redis-server did not answer PING within 30 s: " + fileTail(log_path_);
      return false;
    }
    pid_ = -1;
    *error = "redis-server exited (" + std::to_string(status) + "): " + fileTail(log_path_);
  }
  return false;
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  stopChild(pid_, SIGTERM, 10'000);
  pid_ = -1;
}

}  // namespace lg::test

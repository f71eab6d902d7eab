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
  ServerLaunch launch;
  launch.name = "redis-server";
  launch.spawn = [&](int port, std::string* why) {
    return spawnLogged({kRedisServer, "--port", std::to_string(port), "--bind", "127.0.0.1", "--dir", dir_,
                        "--unixsocket", dir_ + "/redis.sock", "--unixsocketperm", "700", "--save", "", "--appendonly",
                        "no", "--daemonize", "no", "--protected-mode", "yes"},
                       log_path_, std::nullopt, why);
  };
  launch.ready = pong;
  launch.log = [&] { return fileTail(log_path_); };
  return startServer(launch, &port_, &pid_, error);
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  stopChild(pid_, SIGTERM, 10'000);
  pid_ = -1;
}

}  // namespace lg::test

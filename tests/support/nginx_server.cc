#include "tests/support/nginx_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/server_process.h"

namespace lg::test {
namespace {

constexpr const char* kNginx = "/usr/sbin/nginx";

std::string configText(const NginxOptions& o, const std::string& dir, int port) {
  std::string upstreams;
  for (int p : o.upstream_ports) upstreams += "    server 127.0.0.1:" + std::to_string(p) + " max_fails=0;\n";
  // As root the workers would drop to `nobody`, which cannot enter the
  // private directory; they stay root (a test's nginx, on loopback only).
  const std::string user = geteuid() == 0 ? "user root root;\n" : "";
  return user +
         "daemon off;\n"
         "master_process on;\n"
         "worker_processes 1;\n"
         "pid " + dir + "/nginx.pid;\n"
         "error_log " + dir + "/error.log warn;\n"
         "events { worker_connections 1024; }\n"
         "http {\n"
         "  access_log " + dir + "/access.log;\n"
         "  client_body_temp_path " + dir + "/body;\n"
         "  proxy_temp_path " + dir + "/proxy;\n"
         "  fastcgi_temp_path " + dir + "/fastcgi;\n"
         "  uwsgi_temp_path " + dir + "/uwsgi;\n"
         "  scgi_temp_path " + dir + "/scgi;\n"
         "  upstream latentgate {\n"
         "    hash $http_authorization consistent;\n" +
         upstreams +
         "    keepalive 32;\n"
         "  }\n"
         "  server {\n"
         "    listen 127.0.0.1:" + std::to_string(port) + " ssl;\n"
         "    ssl_certificate " + o.tls_cert + ";\n"
         "    ssl_certificate_key " + o.tls_key + ";\n"
         "    client_max_body_size 64m;\n"
         "    location / {\n"
         "      proxy_pass https://latentgate;\n"
         "      proxy_http_version 1.1;\n"
         "      proxy_set_header Connection \"\";\n"
         "      proxy_set_header Host $host;\n"
         "      proxy_ssl_verify on;\n"
         "      proxy_ssl_trusted_certificate " + o.upstream_ca + ";\n"
         "      proxy_ssl_name localhost;\n"
         "      proxy_ssl_server_name on;\n"
         "      proxy_buffering off;\n"
         "      proxy_request_buffering off;\n"
         "      proxy_read_timeout 300s;\n"
         "      proxy_next_upstream error timeout;\n"
         "    }\n"
         "  }\n"
         "}\n";
}

}  // namespace

bool acceptsConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

std::unique_ptr<NginxServer> NginxServer::create(const NginxOptions& options, std::string* error) {
  std::unique_ptr<NginxServer> server(new NginxServer());
  server->dir_ = makePrivateDir("lg_nginx");
  if (server->dir_.empty()) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  server->log_path_ = server->dir_ + "/nginx.out";
  if (!server->start(options, error)) return nullptr;
  return server;
}

NginxServer::~NginxServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool NginxServer::start(const NginxOptions& options, std::string* error) {
  ServerLaunch launch;
  launch.name = "nginx";
  launch.spawn = [&](int port, std::string* why) -> pid_t {
    const std::string conf = dir_ + "/nginx.conf";
    std::ofstream out(conf, std::ios::trunc);
    out << configText(options, dir_, port);
    out.close();
    if (!out) {
      *why = "cannot write " + conf;
      return -1;
    }
    return spawnLogged({kNginx, "-e", dir_ + "/error.log", "-p", dir_, "-c", conf}, log_path_, std::nullopt, why);
  };
  launch.ready = acceptsConnections;
  launch.log = [&] { return fileTail(dir_ + "/error.log") + fileTail(log_path_); };
  launch.stop_signal = SIGQUIT;
  port_ = -1;  // a new port each start
  return startServer(launch, &port_, &pid_, error);
}

void NginxServer::stop() {
  if (pid_ <= 0) return;
  stopChild(pid_, SIGQUIT, 10'000);
  pid_ = -1;
}

}  // namespace lg::test

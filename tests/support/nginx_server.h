// A private nginx for tests: the load balancer in front of several
// LatentGate replicas, as docs/deploy.md sets it up. Its configuration, pid
// file, logs and temporary files are in a private temporary directory; it
// listens with TLS on a free 127.0.0.1 port and spreads requests over the
// upstreams with consistent hashing on the Authorization header (one API key
// keeps landing on one replica, where its prefixes are), proxying to them
// over TLS with their certificate verified, streams unbuffered.
//
// The destructor stops exactly the master process it started (SIGQUIT, the
// graceful stop, then SIGKILL after a bounded wait) and removes the
// directory.
//
// Thread-safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace lg::test {

struct NginxOptions {
  std::vector<int> upstream_ports;  // replicas on 127.0.0.1, HTTPS
  std::string tls_cert;             // PEM chain for the listener (and the name the upstreams present)
  std::string tls_key;
  std::string upstream_ca;          // the CA that signed the replicas' certificates
};

class NginxServer {
 public:
  // nullptr with `error` set on failure.
  static std::unique_ptr<NginxServer> create(const NginxOptions& options, std::string* error);
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

 private:
  NginxServer() = default;
  bool start(const NginxOptions& options, std::string* error);
  void stop();
  std::string dir_;
  std::string log_path_;
  int port_ = -1;
  pid_t pid_ = -1;
};

// Whether 127.0.0.1:port accepts a TCP connection now.
bool acceptsConnections(int port);

}  // namespace lg::test

// A deliberately low-level client for the server tests that real clients
// cannot act out: a socket that sends half a header and waits, random bytes
// instead of a TLS handshake, a connection dropped mid-stream. Blocking POSIX
// sockets and OpenSSL directly, with deadlines on every wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace lg::proxy::testing {

class RawClient {
 public:
  // A TCP connection to 127.0.0.1:port; null when it fails.
  static std::unique_ptr<RawClient> connect(uint16_t port);
  // The same from a source address of its own ("127.0.0.2": on Linux all of
  // 127.0.0.0/8 is loopback), to act as another client.
  static std::unique_ptr<RawClient> connectFrom(uint16_t port, const std::string& source);
  ~RawClient();

  // TLS handshake trusting `ca_file`; false when it fails.
  bool startTls(const std::string& ca_file);
  bool send(std::string_view bytes);
  // Reads until `text` appears in what was read (or, with an empty `text`,
  // until anything arrives), the peer closes, or `timeout` passes.
  std::string readUntil(std::string_view text, std::chrono::milliseconds timeout);
  // Reads until the peer closes or `timeout` passes; true when it closed.
  bool waitClosed(std::chrono::milliseconds timeout);
  bool closedByPeer() const { return peer_closed_; }
  // Everything read so far.
  const std::string& received() const { return received_; }
  // Drops the connection at once (no TLS close_notify).
  void abort();

 private:
  explicit RawClient(int fd) : fd_(fd) {}
  // One read; false on timeout. Sets peer_closed_ on EOF or error.
  bool readOnce(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool peer_closed_ = false;
  std::string received_;
};

}  // namespace lg::proxy::testing

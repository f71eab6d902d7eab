#include "tests/proxy/http/test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>

namespace lg::proxy::testing {

using Clock = std::chrono::steady_clock;

std::unique_ptr<RawClient> RawClient::connect(uint16_t port) { return connectFrom(port, ""); }

std::unique_ptr<RawClient> RawClient::connectFrom(uint16_t port, const std::string& source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_port = 0;
    if (::inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd);
      return nullptr;
    }
  }
  // A blocked send gives up rather than hanging a test.
  const timeval send_timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return nullptr;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<RawClient>(new RawClient(fd));
}

RawClient::~RawClient() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

bool RawClient::startTls(const std::string& ca_file) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (ctx_ == nullptr || SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr) != 1) return false;
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  ssl_ = SSL_new(ctx_);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return false;
  SSL_set_tlsext_host_name(ssl_, "localhost");
  SSL_set1_host(ssl_, "localhost");
  const bool ok = SSL_connect(ssl_) == 1;
  ERR_clear_error();
  return ok;
}

bool RawClient::send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
      if (n <= 0) {
        ERR_clear_error();
        return false;
      }
    } else {
      n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool RawClient::readOnce(Clock::time_point deadline) {
  if (peer_closed_) return false;
  char buf[16384];
  for (;;) {
    if (ssl_ == nullptr || SSL_pending(ssl_) == 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
    }
    if (ssl_ != nullptr) {
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) {
        received_.append(buf, static_cast<size_t>(n));
        return true;
      }
      const int err = SSL_get_error(ssl_, n);
      ERR_clear_error();
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) continue;  // a TLS record that was not data
      peer_closed_ = true;
      return true;
    }
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      received_.append(buf, static_cast<size_t>(n));
      return true;
    }
    peer_closed_ = true;  // EOF or reset
    return true;
  }
}

std::string RawClient::readUntil(std::string_view text, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const size_t start = received_.size();
  while (!peer_closed_) {
    if (text.empty() ? received_.size() > start : received_.find(text, start) != std::string::npos) break;
    if (!readOnce(deadline)) break;
  }
  return received_.substr(start);
}

bool RawClient::waitClosed(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!peer_closed_ && readOnce(deadline)) {
  }
  return peer_closed_;
}

void RawClient::abort() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  peer_closed_ = true;
}

}  // namespace lg::proxy::testing

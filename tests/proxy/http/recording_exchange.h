// RecordingExchange: an Exchange without a connection, recording what a
// handler did with it (responses, stream pieces, the end), for tests of
// routes and handlers without a server.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "proxy/http/exchange.h"

namespace lg::proxy::testing {

class RecordingExchange : public Exchange {
 public:
  explicit RecordingExchange(HttpRequest r) : request_(std::move(r)) {}
  const HttpRequest& request() const override { return request_; }
  void respond(int status, HttpHeaders h, std::string b) override {
    statuses.push_back(status);
    headers = std::move(h);
    body = std::move(b);
  }
  void startStream(int status, HttpHeaders h) override {
    statuses.push_back(status);
    headers = std::move(h);
  }
  void send(std::string data) override { sent += data; }
  void end() override { ended = true; }
  void onDisconnect(std::function<void(DisconnectCause)> cb) override { on_disconnect = std::move(cb); }
  bool disconnected() const override { return false; }

  int status() const { return statuses.empty() ? 0 : statuses.back(); }

  std::vector<int> statuses;
  HttpHeaders headers;
  std::string body;
  std::string sent;
  bool ended = false;
  std::function<void(DisconnectCause)> on_disconnect;

 private:
  HttpRequest request_;
};

}  // namespace lg::proxy::testing

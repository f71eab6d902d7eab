// Server: the composition root of `latentgate serve` (docs/architecture.md,
// "The server object"). From the Config and the engine side that the caller
// loaded (cli/engine_loader.h: tokenizer, chat template, backend, prefix
// cache), it builds and owns everything else: the scheduler, the billing
// store with its keys, prices, ledger, budgets and stored responses (and,
// with billing.postgres_url, the control plane that shares keys, teams,
// budgets and prices with the other replicas and the ledger's drain), the
// per-minute limits (counted with the budgets in the Redis the replicas
// share when limits.redis_url is set), admission, the generation call, the
// data plane (proxy/gateway/), the admin API (proxy/admin/), the dashboard
// (proxy/dashboard/), /metrics, the router with its blocking pool, and the
// HTTPS server. `serve` and the integration tests (tests/integration/) build
// the same object; a benchmark may hand it a backend of its own.
//
// Lifetime: stop() (or the destructor) stops the HTTP server and the
// scheduler first, so that no sink or handler outlives what it uses, then
// flushes the ledger's pending commits and, with billing.postgres_url, makes
// the drain's final attempt, so that PostgreSQL holds every entry a client
// saw complete when it is up at shutdown; the billing objects go last (the
// ledger's final commits settle budgets). The engine parts must outlive the
// server.
//
// Thread-safety: start() and stop() from one thread; the accessors are for
// wiring and tests, and return thread-safe objects.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "billing/billing_db.h"
#include "billing/budgets.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/metering.h"
#include "billing/rate_limiter.h"
#include "cache/prefix_cache.h"
#include "common/status.h"
#include "config/options.h"
#include "engine/backend.h"
#include "proxy/dashboard/dashboard_sessions.h"
#include "proxy/gateway/response_store.h"
#include "proxy/http/http_server.h"
#include "proxy/http/tls_material.h"
#include "serving/scheduler.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy {

// The engine side, loaded by the caller; everything must outlive the server.
struct EngineParts {
  std::string model_id;  // what /v1/models lists (the model directory's name)
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat_template = nullptr;
  engine::Backend* backend = nullptr;
  cache::PrefixCache* cache = nullptr;  // null: the prefix cache is off
  // The scheduler's options; nullopt: serving.* and the model's
  // end-of-sequence ids (serving::schedulerOptions). Tests set their own.
  std::optional<serving::SchedulerOptions> scheduler;
};

// What tests may change that no configuration should.
struct ServerHooks {
  std::function<int64_t()> clock_us;  // Unix microseconds (dashboard sessions); empty: the system clock
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> start(const Config& config, EngineParts engine, ServerHooks hooks = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Refuses new requests, lets running ones finish until `grace` has passed
  // (then cancels them), and stops the HTTP server. Idempotent.
  void stop(std::chrono::milliseconds grace);

  uint16_t port() const;
  // "https://127.0.0.1:8443" (http:// with server.plain_http).
  std::string url() const;
  const TlsMaterial& tls() const;
  bool plainHttp() const;
  // Where the admin key is, and whether this start made it.
  const std::string& adminKeyPath() const;
  bool adminKeyCreated() const;

  // For wiring and tests.
  serving::Scheduler& scheduler();
  billing::KeyStore& keys();
  billing::Ledger& ledger();
  billing::Budgets& budgets();
  billing::PriceBook& prices();
  ResponseStore& responses();
  billing::RateLimiter& rateLimiter();
  const billing::Metering& metering() const;
  DashboardSessions& dashboardSessions();
  HttpServerStats httpStats() const;

  struct Parts;  // everything it owns (server.cc)

 private:
  explicit Server(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace lg::proxy

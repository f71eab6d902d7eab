// Admission: the one step where the edge decides who a caller is and whether
// its request may run (docs/gateway.md, "Admission").
//
// Authentication. Every route that needs credentials is registered through a
// guard (forKey, forAdmin, forMetrics, forAnyCredential): the guard reads the bearer token,
// authenticates it (an API key's SHA-256 looked up in the key store; the
// admin key and the metrics token compared in constant time) and calls the
// handler only for a caller it accepts; anyone else gets 401
// invalid_api_key. No handler reads credentials itself. The dashboard, which
// also signs in with a key posted in a form, asks identify().
// A guard is a GuardedHandler (proxy/http/preflight.h): the router runs its
// header check as soon as the request's header is complete, so a caller
// without valid credentials gets its 401 before the server reads the body
// or sends 100 Continue (issue 21 item 4); the handler checks again, as it
// needs the caller and must stay safe without a preflight.
//
// Admission of a generation request, after its prompt was rendered and its
// tokens counted (their number is what the limits and the budget need):
//   1. the Idempotency-Key claim (billing::Metering): a replay of the first
//      response, or a refusal (400, 409), ends it here;
//   2. the budget reservation, the most the request may cost (429
//      insufficient_quota when a budget cannot hold it);
//   3. the per-minute limits of the key and its team, requests and tokens
//      (429 rate_limit_exceeded with Retry-After);
// and the request's metering starts. The result is a Ticket, which the
// generation call (generation.h) settles, or the answer to send instead.
// Whatever a later step refuses, the earlier ones are given back.
// Steps 2 and 3 are one question to billing::AdmissionLimits: this replica's
// budgets and buckets (LocalLimits, decided inline), or counters the
// replicas share in Redis (limits.redis_url; decided on the store's thread,
// one Lua script for both, 503 budget_store_unavailable when a budget
// applies and Redis cannot be reached).
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "billing/admission_limits.h"
#include "billing/key_store.h"
#include "billing/metering.h"
#include "billing/rate_limiter.h"
#include "common/status.h"
#include "proxy/http/api_error.h"
#include "proxy/http/exchange.h"
#include "proxy/http/preflight.h"

namespace lg::proxy {

// Who presented the credentials of a request.
struct Caller {
  enum class Kind : uint8_t { kNobody, kAdmin, kKey };
  Kind kind = Kind::kNobody;
  billing::Principal who;  // kKey
};

// What admission granted one generation request, until the generation call
// settles it: the per-minute tokens charged, the metering (and with it the
// budget reservation and the Idempotency-Key claim).
struct Ticket {
  billing::Principal who;
  std::shared_ptr<billing::MeteredRequest> metered;  // null: nothing is metered (no ledger)
  int64_t rate_tokens = 0;                           // charged to the per-minute limits
  billing::RateCharge rate_charge;                   // where they were charged
  HttpHeaders headers;                               // x-ratelimit-*, for the response
};

// A request admission refused, and the headers to send with the error.
struct Refused {
  ApiError error;
  HttpHeaders headers;
};
// The response an earlier request with the same Idempotency-Key left.
struct Replayed {
  HttpHeaders headers;
  std::string body;
};
using Admitted = std::variant<Ticket, Refused, Replayed>;

// What a generation request asks of its limits and budget.
struct AdmissionAsk {
  std::string served_model;     // what prices name
  std::string requested_model;  // as the client named it
  std::string response_id;
  std::string system_prompt;    // fingerprint; empty: none
  bool stream = false;
  struct Choice {
    int64_t prompt_tokens = 0;
    int64_t max_tokens = 0;
  };
  std::vector<Choice> choices;  // one per scheduler request
};

class Admission {
 public:
  // Everything must outlive the admission. `metrics_token`: the bearer token
  // that may read /metrics besides the admin key (nullopt: none). With a
  // RateLimiter, the limits are this replica's (LocalLimits over it and the
  // metering's budgets); with AdmissionLimits, whatever it implements.
  Admission(const billing::KeyStore& keys, const billing::AdminKey& admin,
            std::optional<billing::AdminKey> metrics_token, billing::RateLimiter& rate_limiter,
            const billing::Metering& metering);
  Admission(const billing::KeyStore& keys, const billing::AdminKey& admin,
            std::optional<billing::AdminKey> metrics_token, billing::AdmissionLimits& limits,
            const billing::Metering& metering);

  // server.metrics_token as a credential: empty is none; one whose entropy
  // estimate is below 128 bits is refused, like the admin key
  // (common/secret_strength.h).
  static Result<std::optional<billing::AdminKey>> metricsToken(std::string_view configured);

  using KeyHandler =
      std::function<void(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who)>;
  // Route guards: the handler runs only for an API key (forKey), the admin
  // key (forAdmin), the admin key or the metrics token (forMetrics), or any
  // of the three (forAnyCredential: the render routes, which a router calls
  // with the client's key or with the token it scrapes /metrics with; they
  // reveal no tenant's data and charge nothing, so no caller is needed).
  GuardedHandler forKey(KeyHandler handler) const;
  GuardedHandler forAdmin(Handler handler) const;
  GuardedHandler forMetrics(Handler handler) const;
  GuardedHandler forAnyCredential(Handler handler) const;

  // The caller a presented key names (the admin key, an API key, or nobody),
  // and the caller of a request's Authorization header.
  Caller identify(std::string_view presented_key) const;
  Caller identify(const HttpRequest& request) const;

  // Admits a generation request of `who` (authenticated by forKey): `done`
  // runs once with the outcome, inline (this replica's limits) or later from
  // the shared store's thread; it must be quick and must not throw.
  void admit(const HttpRequest& request, const billing::Principal& who, const AdmissionAsk& ask,
             std::function<void(Admitted)> done) const;
  // The same, waiting for the outcome (tests, benchmarks).
  Admitted admit(const HttpRequest& request, const billing::Principal& who, const AdmissionAsk& ask) const;
  // Gives back the per-minute tokens a ticket charged but its request did not
  // use. Never blocks (the engine thread calls it).
  void settle(const Ticket& ticket, int64_t used_tokens) const;

  const billing::Metering& metering() const { return metering_; }

 private:
  // Each guard's check of a request's credentials: nullopt accepts, else the 401.
  std::optional<ApiError> checkAdmin(const HttpRequest& request) const;
  std::optional<ApiError> checkMetrics(const HttpRequest& request) const;
  std::optional<ApiError> checkAnyCredential(const HttpRequest& request) const;

  const billing::KeyStore& keys_;
  const billing::AdminKey& admin_;
  const std::optional<billing::AdminKey> metrics_token_;
  std::unique_ptr<billing::LocalLimits> local_;  // made by the RateLimiter constructor
  billing::AdmissionLimits& limits_;
  const billing::Metering& metering_;
};

}  // namespace lg::proxy

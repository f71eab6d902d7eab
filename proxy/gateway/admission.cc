#include "proxy/gateway/admission.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <utility>

#include "common/secret_strength.h"
#include "common/unix_time.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {
namespace {

// The token an Authorization header presents ("Bearer X"), or empty.
std::string_view presentedKey(const HttpRequest& request) {
  const auto header = request.headers.get("authorization");
  return header ? billing::bearerToken(*header) : std::string_view();
}

ApiError unauthorized(std::string message = "") {
  ApiError e = openai::invalidApiKey();
  if (!message.empty()) e.message = std::move(message);
  return e;
}

ApiError idempotencyError(int status, std::string code, std::string message) {
  ApiError e = openai::invalidRequest("", std::move(code), std::move(message));
  e.http_status = status;
  return e;
}

}  // namespace

Admission::Admission(const billing::KeyStore& keys, const billing::AdminKey& admin,
                     std::optional<billing::AdminKey> metrics_token, billing::RateLimiter& rate_limiter,
                     const billing::Metering& metering)
    : keys_(keys),
      admin_(admin),
      metrics_token_(std::move(metrics_token)),
      local_(std::make_unique<billing::LocalLimits>(metering.services().budgets, rate_limiter)),
      limits_(*local_),
      metering_(metering) {}

Admission::Admission(const billing::KeyStore& keys, const billing::AdminKey& admin,
                     std::optional<billing::AdminKey> metrics_token, billing::AdmissionLimits& limits,
                     const billing::Metering& metering)
    : keys_(keys), admin_(admin), metrics_token_(std::move(metrics_token)), limits_(limits), metering_(metering) {}

Result<std::optional<billing::AdminKey>> Admission::metricsToken(std::string_view configured) {
  if (configured.empty()) return std::optional<billing::AdminKey>();
  LG_RETURN_IF_ERROR(checkSecretStrength(configured, "server.metrics_token"));
  LG_ASSIGN_OR_RETURN(billing::AdminKey token, billing::AdminKey::loadOrCreate(configured, "", nullptr));
  return std::optional<billing::AdminKey>(std::move(token));
}

// ------------------------------------------------------------ authentication

Caller Admission::identify(std::string_view presented) const {
  Caller c;
  if (presented.empty()) return c;
  if (admin_.matches(presented)) {
    c.kind = Caller::Kind::kAdmin;
  } else if (auto who = keys_.authenticate(presented)) {
    c.kind = Caller::Kind::kKey;
    c.who = std::move(*who);
  }
  return c;
}

Caller Admission::identify(const HttpRequest& request) const { return identify(presentedKey(request)); }

std::optional<ApiError> Admission::checkAdmin(const HttpRequest& request) const {
  if (admin_.matches(presentedKey(request))) return std::nullopt;
  return unauthorized("This endpoint needs the admin key as a Bearer token.");
}

std::optional<ApiError> Admission::checkMetrics(const HttpRequest& request) const {
  const std::string_view presented = presentedKey(request);
  if (admin_.matches(presented) || (metrics_token_ && metrics_token_->matches(presented))) return std::nullopt;
  return unauthorized("This endpoint needs the admin key or the metrics token as a Bearer token.");
}

std::optional<ApiError> Admission::checkAnyCredential(const HttpRequest& request) const {
  const std::string_view presented = presentedKey(request);
  // The two constant-time comparisons first: a router's token never costs a
  // key-store lookup.
  if (admin_.matches(presented) || (metrics_token_ && metrics_token_->matches(presented))) return std::nullopt;
  if (keys_.authenticate(presented)) return std::nullopt;
  return unauthorized("This endpoint needs an API key, the admin key or the metrics token as a Bearer token.");
}

GuardedHandler Admission::forKey(KeyHandler handler) const {
  GuardedHandler g;
  g.handler = [this, handler = std::move(handler)](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    auto who = keys_.authenticate(presentedKey(request));
    if (!who) return respondWithApiError(*exchange, unauthorized());
    handler(request, std::move(exchange), *who);
  };
  // At header time too (one SHA-256 and a lookup more per request): a caller
  // without a key is refused before its body is read.
  g.guard = [this](const HttpRequest& head) -> std::optional<ApiError> {
    if (keys_.authenticate(presentedKey(head))) return std::nullopt;
    return unauthorized();
  };
  return g;
}

GuardedHandler Admission::forAdmin(Handler handler) const {
  GuardedHandler g;
  g.handler = [this, handler = std::move(handler)](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    if (auto refused = checkAdmin(request)) return respondWithApiError(*exchange, *refused);
    handler(request, std::move(exchange));
  };
  g.guard = [this](const HttpRequest& head) { return checkAdmin(head); };
  return g;
}

GuardedHandler Admission::forMetrics(Handler handler) const {
  GuardedHandler g;
  g.handler = [this, handler = std::move(handler)](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    if (auto refused = checkMetrics(request)) return respondWithApiError(*exchange, *refused);
    handler(request, std::move(exchange));
  };
  g.guard = [this](const HttpRequest& head) { return checkMetrics(head); };
  return g;
}

GuardedHandler Admission::forAnyCredential(Handler handler) const {
  GuardedHandler g;
  g.handler = [this, handler = std::move(handler)](const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    if (auto refused = checkAnyCredential(request)) return respondWithApiError(*exchange, *refused);
    handler(request, std::move(exchange));
  };
  g.guard = [this](const HttpRequest& head) { return checkAnyCredential(head); };
  return g;
}

// ----------------------------------------------------------------- admission

namespace {

void reportRateLimits(const billing::RateDecision& d, HttpHeaders& headers) {
  auto report = [&headers](const char* kind, const billing::RateLimitState& s) {
    if (s.limit == 0) return;
    headers.add(std::string("x-ratelimit-limit-") + kind, std::to_string(s.limit));
    headers.add(std::string("x-ratelimit-remaining-") + kind, std::to_string(s.remaining));
    headers.add(std::string("x-ratelimit-reset-") + kind, billing::resetDuration(s.reset_s));
  };
  report("requests", d.requests);
  report("tokens", d.tokens);
}

Refused rateLimited(const std::string& request_id, const billing::RateDecision& d,
                    const billing::RateLimitOptions& options) {
  HttpHeaders headers;
  reportRateLimits(d, headers);
  ApiError e;
  e.http_status = 429;
  e.type = d.exhausted;  // "requests" or "tokens", as OpenAI's rate-limit errors say
  e.code = "rate_limit_exceeded";
  e.message = billing::RateLimiter::describe(d, options);
  // A request that can never fit gets no Retry-After: waiting would not help.
  if (d.retry_after_s >= 0) e.retry_after_s = std::max(1, static_cast<int>(std::ceil(d.retry_after_s)));
  proxyLog()->info("request {}: rate limited ({} per minute of the {})", request_id, d.exhausted, d.subject);
  return Refused{std::move(e), std::move(headers)};
}

Refused overBudget(const std::string& request_id, const billing::BudgetRefusal& refused,
                   const billing::Principal& who) {
  const billing::BudgetStatus& b = refused.budget;
  proxyLog()->info("request {}: refused by the {} budget of {} ({} period)", request_id, b.scope,
                   b.scope == "key" ? who.key_id : who.team, b.period);
  ApiError e;
  e.http_status = 429;
  e.type = "insufficient_quota";
  e.code = "insufficient_quota";
  e.message = billing::quotaMessage(refused, who);
  // Retrying cannot help until the budget changes: the openai SDKs honour this.
  return Refused{std::move(e), HttpHeaders{{"x-should-retry", "false"}}};
}

Refused storeUnavailable(const std::string& request_id, const billing::LimitsUnavailable& u) {
  proxyLog()->warn("request {}: refused, its budget cannot be checked: {}", request_id, u.message);
  ApiError e;
  e.http_status = 503;
  // OpenAI's 503s (and the scheduler's here) are server_error; clients act on
  // the status and the code.
  e.type = "server_error";
  e.code = "budget_store_unavailable";
  e.message =
      "A budget applies to this request and the store that keeps budgets is unreachable, so it was not run. "
      "Try again shortly.";
  e.retry_after_s = std::max(1, u.retry_after_s);
  return Refused{std::move(e), {}};
}

}  // namespace

void Admission::admit(const HttpRequest& request, const billing::Principal& who, const AdmissionAsk& ask,
                      std::function<void(Admitted)> done) const {
  const int64_t start_us = unixMicros();
  std::optional<billing::IdempotencyClaim> claim;
  if (auto header = request.headers.get("idempotency-key"); header && metering_.enabled()) {
    using Kind = billing::IdempotencyDecision::Kind;
    auto decided = metering_.claimIdempotencyKey(who, *header, request.path, request.body);
    if (!decided.isOk()) {
      proxyLog()->error("request {}: reading an idempotency record failed: {}", request.id, decided.status().toString());
      return done(Refused{openai::internalError(), {}});
    }
    switch (decided->kind) {
      case Kind::kClaimed:
        claim = std::move(decided->claim);
        break;
      case Kind::kInvalidKey:
        return done(Refused{idempotencyError(400, "invalid_idempotency_key", decided->message()), {}});
      case Kind::kInFlight: {
        ApiError e = idempotencyError(409, "idempotency_key_in_use", decided->message());
        e.retry_after_s = 1;
        return done(Refused{std::move(e), {}});
      }
      case Kind::kReused:
        return done(Refused{idempotencyError(400, "idempotency_key_reused", decided->message()), {}});
      case Kind::kSpent:
        return done(Refused{idempotencyError(409, "idempotency_key_used", decided->message()), {}});
      case Kind::kReplay: {
        HttpHeaders h{{"content-type", decided->record->content_type}};
        h.add("x-latentgate-idempotent-replay", decided->record->request_id);
        return done(Replayed{std::move(h), std::move(decided->record->body)});
      }
    }
  }

  billing::AppliedRates rates = metering_.ratesFor(ask.served_model, start_us);
  int64_t max_cost = 0, tokens = 0;
  for (const AdmissionAsk::Choice& c : ask.choices) {
    max_cost += billing::maxCost(rates.rates, c.prompt_tokens, c.max_tokens);
    tokens += c.prompt_tokens + c.max_tokens;
  }
  billing::LimitAsk limit_ask;
  limit_ask.who = who;
  limit_ask.request_id = request.id;
  if (metering_.enabled()) limit_ask.cost = max_cost;  // budgets settle through the ledger
  limit_ask.tokens = tokens;
  limit_ask.now_s = start_us / 1'000'000;

  // What the metering needs once the limits granted; copied, since the
  // outcome may come from another thread after the caller's frame is gone.
  billing::MeteredRequest::Info info;
  info.request_id = request.id;
  info.response_id = ask.response_id;
  info.who = who;
  info.model = ask.served_model;
  info.requested_model = ask.requested_model;
  info.endpoint = request.path;
  info.system_prompt = ask.system_prompt;
  info.stream = ask.stream;
  info.start_us = start_us;
  const size_t choices = ask.choices.size();
  limits_.admit(std::move(limit_ask), [this, info = std::move(info), rates = std::move(rates), choices, tokens,
                                       claim = std::move(claim), done = std::move(done)](billing::LimitOutcome outcome) mutable {
    auto release_claim = [&] {
      if (claim) metering_.releaseIdempotencyKey(info.who, *claim);
    };
    if (auto* refused = std::get_if<billing::BudgetRefusal>(&outcome)) {
      release_claim();
      return done(overBudget(info.request_id, *refused, info.who));
    }
    if (auto* limited = std::get_if<billing::RateDecision>(&outcome)) {
      release_claim();
      return done(rateLimited(info.request_id, *limited, limits_.rateOptions()));
    }
    if (auto* away = std::get_if<billing::LimitsUnavailable>(&outcome)) {
      release_claim();
      return done(storeUnavailable(info.request_id, *away));
    }
    billing::LimitGrant grant = std::get<billing::LimitGrant>(std::move(outcome));
    Ticket ticket;
    ticket.who = info.who;
    ticket.rate_tokens = tokens;
    ticket.rate_charge = grant.charge;
    reportRateLimits(grant.rate, ticket.headers);
    ticket.metered = metering_.start(std::move(info), std::move(rates), choices, std::move(claim),
                                     std::move(grant.reservation));
    done(std::move(ticket));
  });
}

Admitted Admission::admit(const HttpRequest& request, const billing::Principal& who, const AdmissionAsk& ask) const {
  std::promise<Admitted> outcome;
  std::future<Admitted> decided = outcome.get_future();
  admit(request, who, ask, [&outcome](Admitted a) { outcome.set_value(std::move(a)); });
  return decided.get();
}

void Admission::settle(const Ticket& ticket, int64_t used_tokens) const {
  limits_.giveBack(ticket.who, ticket.rate_charge, used_tokens);
}

}  // namespace lg::proxy

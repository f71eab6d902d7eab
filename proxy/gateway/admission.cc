#include "proxy/gateway/admission.h"

#include <algorithm>
#include <cmath>

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
      rate_limiter_(rate_limiter),
      metering_(metering) {}

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

// ----------------------------------------------------------------- admission

std::optional<Refused> Admission::chargeRateLimits(const HttpRequest& request, const billing::Principal& who,
                                                   int64_t tokens, HttpHeaders& headers) const {
  const billing::RateDecision d = rate_limiter_.admit(who.key_id, who.team, tokens);
  auto report = [&headers](const char* kind, const billing::RateLimitState& s) {
    if (s.limit == 0) return;
    headers.add(std::string("x-ratelimit-limit-") + kind, std::to_string(s.limit));
    headers.add(std::string("x-ratelimit-remaining-") + kind, std::to_string(s.remaining));
    headers.add(std::string("x-ratelimit-reset-") + kind, billing::resetDuration(s.reset_s));
  };
  report("requests", d.requests);
  report("tokens", d.tokens);
  if (d.allowed) return std::nullopt;
  ApiError e;
  e.http_status = 429;
  e.type = d.exhausted;  // "requests" or "tokens", as OpenAI's rate-limit errors say
  e.code = "rate_limit_exceeded";
  e.message = billing::RateLimiter::describe(d, rate_limiter_.options());
  // A request that can never fit gets no Retry-After: waiting would not help.
  if (d.retry_after_s >= 0) e.retry_after_s = std::max(1, static_cast<int>(std::ceil(d.retry_after_s)));
  proxyLog()->info("request {}: rate limited ({} per minute of the {})", request.id, d.exhausted, d.subject);
  return Refused{std::move(e), headers};
}

Admitted Admission::admit(const HttpRequest& request, const billing::Principal& who, const AdmissionAsk& ask) const {
  const int64_t start_us = unixMicros();
  std::optional<billing::IdempotencyClaim> claim;
  if (auto header = request.headers.get("idempotency-key"); header && metering_.enabled()) {
    using Kind = billing::IdempotencyDecision::Kind;
    auto decided = metering_.claimIdempotencyKey(who, *header, request.path, request.body);
    if (!decided.isOk()) {
      proxyLog()->error("request {}: reading an idempotency record failed: {}", request.id, decided.status().toString());
      return Refused{openai::internalError(), {}};
    }
    switch (decided->kind) {
      case Kind::kClaimed:
        claim = std::move(decided->claim);
        break;
      case Kind::kInvalidKey:
        return Refused{idempotencyError(400, "invalid_idempotency_key", decided->message()), {}};
      case Kind::kInFlight: {
        ApiError e = idempotencyError(409, "idempotency_key_in_use", decided->message());
        e.retry_after_s = 1;
        return Refused{std::move(e), {}};
      }
      case Kind::kReused:
        return Refused{idempotencyError(400, "idempotency_key_reused", decided->message()), {}};
      case Kind::kSpent:
        return Refused{idempotencyError(409, "idempotency_key_used", decided->message()), {}};
      case Kind::kReplay: {
        HttpHeaders h{{"content-type", decided->record->content_type}};
        h.add("x-latentgate-idempotent-replay", decided->record->request_id);
        return Replayed{std::move(h), std::move(decided->record->body)};
      }
    }
  }
  auto release_claim = [&] {
    if (claim) metering_.releaseIdempotencyKey(who, *claim);
  };

  const billing::AppliedRates rates = metering_.ratesFor(ask.served_model, start_us);
  int64_t max_cost = 0, tokens = 0;
  for (const AdmissionAsk::Choice& c : ask.choices) {
    max_cost += billing::maxCost(rates.rates, c.prompt_tokens, c.max_tokens);
    tokens += c.prompt_tokens + c.max_tokens;
  }
  billing::BudgetReservation reservation;
  if (metering_.enabled()) {
    auto held = metering_.reserve(who, max_cost, start_us / 1'000'000);
    if (auto* refused = std::get_if<billing::QuotaRefusal>(&held)) {
      release_claim();
      const billing::BudgetStatus& b = refused->refusal.budget;
      proxyLog()->info("request {}: refused by the {} budget of {} ({} period)", request.id, b.scope,
                       b.scope == "key" ? who.key_id : who.team, b.period);
      ApiError e;
      e.http_status = 429;
      e.type = "insufficient_quota";
      e.code = "insufficient_quota";
      e.message = std::move(refused->message);
      // Retrying cannot help until the budget changes: the openai SDKs honour this.
      return Refused{std::move(e), HttpHeaders{{"x-should-retry", "false"}}};
    }
    reservation = std::get<billing::BudgetReservation>(std::move(held));
  }

  Ticket ticket;
  ticket.who = who;
  ticket.rate_tokens = tokens;
  if (auto refused = chargeRateLimits(request, who, tokens, ticket.headers)) {
    release_claim();
    return std::move(*refused);
  }
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
  ticket.metered = metering_.start(std::move(info), rates, ask.choices.size(), std::move(claim), std::move(reservation));
  return ticket;
}

void Admission::settle(const Ticket& ticket, int64_t used_tokens) const {
  rate_limiter_.settle(ticket.who.key_id, ticket.who.team, ticket.rate_tokens, used_tokens);
}

}  // namespace lg::proxy

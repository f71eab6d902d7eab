// Gateway: the OpenAI-compatible endpoints on top of the server (router.h),
// the OpenAI schema layer (proxy/openai/), the scheduler (serving/) and the
// API keys (billing/). docs/gateway.md describes the request path.
//
// Each handler runs on an I/O thread and never blocks: it authenticates the
// bearer key, parses and validates the body, renders and tokenizes the
// prompt, submits it to the scheduler and returns. The scheduler's events
// arrive on the engine thread, where the request's responder turns them into
// SSE chunks or the final JSON body and hands them to the exchange (which
// posts them to the connection's strand). A client that goes away cancels its
// request within one engine step.
//
// With a ledger (BillingServices), every generation request gets one ledger
// entry, and the end of its response (the part with usage and usage.cost)
// reaches the client only once the entry is durable (request_billing.h);
// with budgets, it is admitted only if its most possible cost fits them.
//
// Thread-safety: routes may run on every I/O thread at once; the gateway's
// state is immutable after construction, except the key store, the response
// store and the ledger (all thread-safe).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "billing/key_store.h"
#include "billing/rate_limiter.h"
#include "cache/namespace.h"
#include "proxy/openai/api_error.h"
#include "proxy/openai/prompt_encoder.h"
#include "proxy/openai/request_types.h"
#include "proxy/openai_error.h"  // respondWithApiError
#include "proxy/request_billing.h"
#include "proxy/metrics.h"
#include "proxy/response_store.h"
#include "proxy/router.h"
#include "serving/scheduler.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy {

struct GatewayOptions {
  std::string model_id;                 // what /v1/models lists and responses name
  std::vector<std::string> aliases;     // other names clients may use (deepseek-chat, ...)
  int32_t max_context = 0;
  openai::ParseLimits limits;
  openai::RetryAfter retry;
  billing::RateLimitOptions rate_limits;  // per key and team, per minute; unlimited by default
  // Shared cache namespaces each team may read (an admin's grants).
  std::map<std::string, std::vector<cache::SharedNamespace>> shared_namespaces;
  // Told every generation's final event on the engine thread (latency
  // histograms, tokens by kind: metrics.h); null: none. Must outlive the
  // scheduler's engine thread.
  GenerationMetrics* metrics = nullptr;
};

class Gateway {
 public:
  // Everything passed by reference must outlive the gateway and the server;
  // `responses` (stored responses; null: none are kept, previous_response_id
  // is refused) must also outlive the scheduler's engine thread, which
  // records finished responses.
  // `billing` (optional): the ledger and prices, which must outlive the
  // scheduler's engine thread too (it commits entries).
  Gateway(GatewayOptions options, serving::Scheduler& scheduler, const text::Tokenizer& tokenizer,
          const openai::PromptEncoder& encoder, billing::KeyStore& keys, const billing::AdminKey& admin,
          ResponseStore* responses = nullptr, BillingServices billing = {});

  void addRoutes(Router& router);

  // The per-minute limits' buckets, to read without charging (the dashboard).
  const billing::RateLimiter& rateLimiter() const { return rate_limiter_; }

 private:
  struct Caller;
  // The key's principal, or a 401 sent to the client (nullopt).
  std::optional<billing::Principal> authenticate(Exchange& exchange) const;
  bool authenticateAdmin(Exchange& exchange) const;
  bool knownModel(const std::string& model) const;
  serving::GenerationRequest newRequest(const billing::Principal& who) const;
  // Charges `tokens` (prompt + output cap) and one request to the caller's
  // per-minute limits and adds the x-ratelimit-* headers; false: a 429 with
  // Retry-After was sent and nothing was charged.
  bool admitRate(Exchange& exchange, const billing::Principal& who, int64_t tokens, HttpHeaders& headers);
  // Admission before any work: the budgets first (a reservation of
  // `max_cost`, held by `billed`), then the rate limits. False: refused with
  // a 429, the request's billing abandoned, nothing held or charged.
  bool admit(Exchange& exchange, const billing::Principal& who, int64_t tokens, RequestBilling* billed,
             int64_t max_cost, HttpHeaders& headers);

  // `on_done` (optional) runs on the engine thread once the responder is
  // done, before the client is sent the end of the response.
  template <class Responder>
  void submitOne(std::shared_ptr<Exchange> exchange, serving::GenerationRequest request,
                 std::shared_ptr<Responder> responder, bool stream, HttpHeaders headers,
                 const openai::ParamNames& params, const billing::Principal& who, int64_t reserved,
                 std::shared_ptr<RequestBilling> billing,
                 std::function<void(const Responder&)> on_done = {});
  void chatCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void completions(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void responses(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void getResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void deleteResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void models(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void createKey(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void listKeys(const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  void deleteKey(const HttpRequest& request, std::shared_ptr<Exchange> exchange);

  const GatewayOptions options_;
  serving::Scheduler& scheduler_;
  const text::Tokenizer& tokenizer_;
  const openai::PromptEncoder& encoder_;
  billing::KeyStore& keys_;
  const billing::AdminKey& admin_;
  ResponseStore* const responses_;
  billing::RateLimiter rate_limiter_;
  const BillingServices billing_;
};

// True when the request carries the admin key as its Bearer token;
// otherwise answers 401 and returns false. For every admin route.
bool requireAdminKey(Exchange& exchange, const billing::AdminKey& admin);

// content-type: application/json, for the JSON answers of the API routes.
HttpHeaders jsonHeaders();

// "queue;dur=1.200, cache;dur=0.300, prefill;dur=40.100, ttft;dur=41.700,
// decode;dur=220.500, total;dur=262.200" (milliseconds; total: submit to the
// final event, the engine's share of what the client waited), then
// ", ledger;dur=0.900" when ledger_s >= 0 (the final event to its entry
// being durable: what billing added to the wait).
std::string serverTiming(const serving::Timing& timing, double ledger_s = -1);

}  // namespace lg::proxy

// Generation: the one way the edge runs generation requests (docs/gateway.md,
// "The request path"). Every endpoint parses and encodes its request into a
// GenerationPlan, one scheduler request per choice (a completions prompt, or
// one of n), and calls run(); the shared-prefix publisher calls runAsAdmin().
//
// run() does the rest, in this order:
//   1. admission (admission.h): Idempotency-Key, budget, per-minute limits;
//      a refusal or a replay is the whole response;
//   2. the responder is made, with the request's rates for usage.cost;
//   3. the choices are submitted to the scheduler as one group, admitted
//      whole or not at all (Scheduler::submitGroup): a refusal at submit is
//      the whole response, and no choice runs while another is refused in
//      the queue. What the sinks produce is held until the response has
//      started, whatever thread run() was called on;
//   4. the sinks (on the engine thread) feed the responder, record each
//      choice's end with the metering, and hand the client its bytes; when
//      the response ends early (a choice failed or was refused) the other
//      choices are cancelled at once;
//   5. after the last choice's final event: the per-minute limits are
//      settled, the ledger entry is committed, and the end of the response
//      (its usage and cost, and Server-Timing) is delivered from the
//      commit's callback (the ledger's committer thread): a client that saw
//      usage has an entry. Without a ledger it is delivered at once.
//   6. a client that goes away, or the server's own timeout, cancels every
//      choice within one engine step; the metering is told which it was
//      (the client's doing is billed, the server's is not). So does a
//      revocation of the request's key (cancelKey), billed for what ran.
//
// Thread-safety: run() is called on an I/O thread or the blocking pool; the
// sinks run on the engine thread; the state they share is guarded by one
// mutex per call. cancelKey() may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "billing/key_store.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/generation_metrics.h"
#include "proxy/gateway/prefix_breakers.h"
#include "proxy/http/exchange.h"
#include "proxy/openai/api_error.h"
#include "proxy/openai/prompt_layout.h"
#include "proxy/openai/responder.h"
#include "proxy/openai/usage.h"
#include "serving/scheduler.h"

namespace lg::proxy {

struct GenerationPlan {
  std::vector<serving::GenerationRequest> choices;  // at least one
  std::string served_model;                         // what prices name
  std::string requested_model;                      // as the client named it
  std::string response_id;
  std::string system_prompt;  // fingerprint, for the ledger; empty: none
  // Where a chat prompt's messages and parts lie, in token positions of its
  // ids (openai::inTokens): the miss anatomy names the first computed token
  // by them. Empty for completions.
  openai::PromptLayout layout;
  bool stream = false;
  openai::ParamNames params;  // names the refusals' parameters
  HttpHeaders headers;        // the response's (content type, notes)
  // Makes the responder once the request is admitted, with the hook that
  // prices its usage (empty when nothing is metered).
  std::function<std::shared_ptr<openai::Responder>(openai::UsageCostHook cost)> responder;
  // Optional: on the engine thread once the responder is done, before the
  // client is sent the end of the response (the Responses store).
  std::function<void(const openai::Responder&)> on_done;
  // Optional: every event of every choice, on the engine thread, just before
  // the responder gets it (chat replies' ids for the next turn: reply_ids.h).
  std::function<void(size_t choice, const serving::StreamEvent&)> observe;
};

class Generation {
 public:
  // Everything must outlive the scheduler's engine thread (the sinks use it);
  // `metrics` may be null.
  Generation(serving::Scheduler& scheduler, const Admission& admission, GenerationMetrics* metrics,
             openai::RetryAfter retry);

  // A caller's request: admitted, metered and rate limited.
  void run(std::shared_ptr<Exchange> exchange, const billing::Principal& who, GenerationPlan plan) const;
  // The admin's own work (publishing a shared prefix): neither admitted nor metered.
  void runAsAdmin(std::shared_ptr<Exchange> exchange, GenerationPlan plan) const;

  // Where admitted chat and Responses prompts are compared with their key's
  // previous one (prefix_breakers.h; null or disabled: they are not). Set
  // before the server starts; it must outlive it.
  void setPrefixBreakers(PrefixBreakers* breakers) { breakers_ = breakers; }

  // The Retry-After values of the scheduler's refusals, for the responders.
  const openai::RetryAfter& retry() const { return retry_; }

  // Cancels every running request of the API key `key_id` (it was revoked)
  // within one engine step; each is billed for what it computed. Returns how
  // many requests it cancelled.
  size_t cancelKey(const std::string& key_id) const;
  // How many requests of the key are still running (their last choice has
  // not ended): a team's deletion waits for none before purging its cache.
  size_t runningFor(const std::string& key_id) const;

  struct Call;  // one call's state (generation.cc)

 private:
  void start(std::shared_ptr<Exchange> exchange, std::optional<Ticket> ticket, GenerationPlan plan) const;
  void track(const std::shared_ptr<Call>& call) const;
  void untrack(const Call* call) const;

  serving::Scheduler& scheduler_;
  const Admission& admission_;
  GenerationMetrics* const metrics_;
  const openai::RetryAfter retry_;
  PrefixBreakers* breakers_ = nullptr;

  // The admitted calls still running, by the key that made them (for
  // cancelKey); a call leaves when its last choice ends.
  mutable std::mutex running_mu_;
  mutable std::unordered_multimap<std::string, std::weak_ptr<Call>> running_;  // guarded by running_mu_
};

// "queue;dur=1.200, cache;dur=0.300, prefill;dur=40.100, ttft;dur=41.700,
// decode;dur=220.500, total;dur=262.200" (milliseconds; total: submit to the
// final event, the engine's share of what the client waited), then
// ", ledger;dur=0.900" when ledger_s >= 0 (the final event to its entry
// being durable: what billing added to the wait).
std::string serverTiming(const serving::Timing& timing, double ledger_s = -1);

}  // namespace lg::proxy

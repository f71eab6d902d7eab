// RequestBilling: the ledger's side of one generation request (one HTTP
// request: a chat completion, a Responses request, or a completions request
// with its prompts as choices). docs/billing.md.
//
// The handler makes one on the I/O thread before submitting: it fixes the
// rates in force when the request arrived (the cost hook shows them to the
// client as usage.cost) and, with an Idempotency-Key, holds the key's claim.
// The scheduler's sink then reports each choice's final event (engine
// thread); after the last one the gateway commits the entry and hands the
// client the end of its response from the commit's callback (the ledger's
// committer thread). So a client that saw usage.cost has an entry, and the
// fsync runs on neither the engine thread nor an I/O thread.
//
// Thread-safety: clientGone() (I/O thread), submitted() (I/O thread),
// addFinal() and keep() (engine thread) and commit() may race; a mutex
// orders them. commit() runs once, after the last final event.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/budgets.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/prompt_fingerprint.h"
#include "proxy/exchange.h"
#include "proxy/openai/request_types.h"
#include "proxy/openai/usage.h"
#include "serving/events.h"

namespace lg::proxy {

// What the gateway bills with; a null ledger: no billing (tests, tools);
// null budgets: none are enforced.
struct BillingServices {
  billing::Ledger* ledger = nullptr;
  const billing::PriceBook* prices = nullptr;
  billing::Budgets* budgets = nullptr;
  const billing::SystemPromptFingerprinter* fingerprints = nullptr;  // with a ledger
};

// usage.cost: {"currency": "USD", "input_cache_hit", "input_cache_miss",
// "output", "total"}, exact decimal strings in dollars.
nlohmann::json costJson(const billing::Cost& cost);

// The fingerprint of the prompt's leading system and developer messages
// (billing/prompt_fingerprint.h); "" when it has none or nothing is billed.
std::string systemPromptOf(const BillingServices& services, const openai::ChatPrompt& prompt);

// An Idempotency-Key a request holds.
struct IdempotencyClaim {
  std::string key_hash;  // billing::idempotencyKeyHash
  std::string digest;    // billing::requestDigest of the request
};

class RequestBilling {
 public:
  struct Info {
    std::string request_id;
    std::string response_id;
    billing::Principal who;
    std::string model;            // the served model
    std::string requested_model;  // as named
    std::string endpoint;
    std::string system_prompt;
    bool stream = false;
    std::optional<IdempotencyClaim> idempotency;  // claimed by the caller
  };

  // The billing of the request `exchange` holds (null without a ledger),
  // made just before it is submitted; fills in the request id, the principal,
  // the served model and the endpoint. With an Idempotency-Key header it
  // claims the key; when the key is malformed, in use or used before, it
  // answers the client itself (a replay, 409 or 400) and returns null with
  // *answered set.
  static std::shared_ptr<RequestBilling> start(const BillingServices& services, Exchange& exchange,
                                               const billing::Principal& who, std::string_view served_model,
                                               Info info, size_t choices, bool* answered);

  // `choices`: the scheduler requests the response waits for.
  RequestBilling(const BillingServices& services, Info info, size_t choices, int64_t start_us);

  // The rates this request pays (fixed at its start).
  const billing::AppliedRates& rates() const { return rates_; }
  openai::UsageCostHook costHook() const;

  // The most a generation of `prompt_tokens` capped at `max_tokens` can cost
  // at this request's rates: the prompt at the higher of the hit and miss
  // rates (it is not yet known what the cache holds), the cap at the output rate.
  int64_t maxCost(int64_t prompt_tokens, int64_t max_tokens) const;
  // Holds `amount` (the maxCost of every choice) against the budgets of the
  // key and its team until the entry is committed (billing/budgets.h).
  // False: a budget cannot hold it, and the client was answered 429
  // insufficient_quota; the caller abandons the request.
  bool reserveBudget(Exchange& exchange, int64_t amount);

  // The client went away (before the response ended).
  void clientGone();
  // Only `n` of the choices were submitted (a later one was refused at
  // submit): the response waits for those, and the entry says refused.
  // Returns true when those already all finished (commit now).
  bool submitted(size_t n, serving::Refusal refusal);
  // The request will not be submitted after all (a budget or a rate limit
  // refused it): releases its Idempotency-Key claim and its budget
  // reservation; no entry is written.
  void abandon();
  // A choice's final event; true when it was the last.
  bool addFinal(const serving::StreamEvent& event);
  // Bytes sent to a streaming client, kept for Idempotency-Key replays.
  void keep(std::string_view bytes);

  // Commits the entry. `final_body` is the end of the response (kept for
  // replays with the rest); `then` (optional) runs once it is durable or
  // failed, on the committer thread, after the budget reservation was
  // released (the committed cost was counted as spent just before).
  void commit(std::string_view final_body, std::string content_type, std::function<void(Status)> then);

 private:
  billing::Ledger& ledger_;
  billing::Budgets* const budgets_;
  const Info info_;
  const int64_t start_us_;
  billing::AppliedRates rates_;
  billing::BudgetReservation reservation_;  // set on the I/O thread before submit; moved out by commit()

  std::mutex mu_;
  size_t expected_;             // guarded by mu_
  size_t finals_ = 0;           // guarded by mu_
  bool client_gone_ = false;    // guarded by mu_
  bool refused_at_submit_ = false;
  serving::Refusal refusal_ = serving::Refusal::kNone;
  serving::Usage usage_;        // summed; guarded by mu_
  double ttft_s_ = -1;
  int failed_ = 0, refused_ = 0, cancelled_ = 0;
  std::string finish_reason_;
  std::string transcript_;      // streams with an idempotency key
  bool transcript_overflow_ = false;
};

}  // namespace lg::proxy

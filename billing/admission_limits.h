// AdmissionLimits: the budgets and per-minute limits that one generation
// request must fit before it runs, decided and charged as one step
// (docs/billing.md, "Budgets" and "Budgets and limits shared by replicas").
//
// Two implementations:
//   LocalLimits  this replica's memory: Budgets (budgets.h) and the token
//                buckets of RateLimiter (rate_limiter.h), what a single
//                replica has always done; it decides inline.
//   RedisLimits  counters that replicas share in Redis, one Lua script per
//                request (billing/redis/redis_limits.h); it decides on its
//                own thread and calls back from there.
// Admission (proxy/gateway/admission.h) asks one of them and maps the outcome
// to HTTP; the request's id names its reservation in a shared store.
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "billing/budgets.h"
#include "billing/key_store.h"
#include "billing/rate_limiter.h"

namespace lg::billing {

// What a request asks of its limits.
struct LimitAsk {
  Principal who;
  std::string request_id;       // the x-request-id: the reservation's name where replicas share it
  std::optional<int64_t> cost;  // the most it may cost (maxCost), held against the budgets; nullopt: none are checked
  int64_t tokens = 0;           // prompt + output cap, charged to the per-minute token limits
  int64_t now_s = 0;            // Unix seconds of its start: the budget period it counts in
};

// Where a granted request's per-minute tokens were charged, so that what it
// does not use goes back there.
struct RateCharge {
  int64_t tokens = 0;
  bool shared = false;          // a shared fixed window (else a local bucket, or nothing)
  int64_t window_start_s = 0;   // shared: the window charged
};

struct LimitGrant {
  BudgetReservation reservation;  // empty when no budget applies
  RateDecision rate;              // allowed, with what the x-ratelimit-* headers report
  RateCharge charge;
};

// A budget applies and the store that holds it cannot be reached: the
// request is refused (503) rather than run unchecked.
struct LimitsUnavailable {
  std::string message;
  int32_t retry_after_s = 1;
};

// Granted; refused by a budget (nothing charged); refused by a per-minute
// limit (a RateDecision with allowed = false; nothing charged); or unavailable.
using LimitOutcome = std::variant<LimitGrant, BudgetRefusal, RateDecision, LimitsUnavailable>;

class AdmissionLimits {
 public:
  virtual ~AdmissionLimits() = default;
  // Decides `ask` and calls `done` once with the outcome, inline or later
  // from another thread; `done` must be quick and must not throw.
  virtual void admit(LimitAsk ask, std::function<void(LimitOutcome)> done) = 0;
  // Gives back the tokens a granted request charged beyond `used`. Never blocks.
  virtual void giveBack(const Principal& who, const RateCharge& charge, int64_t used) = 0;
  // The configured per-minute limits (the refusals' messages name them).
  virtual const RateLimitOptions& rateOptions() const = 0;
};

// This replica's memory: the budget first (a refusal charges nothing), then
// the per-minute limits (a refusal gives the budget reservation back). Both
// are decided inline, under their own locks.
class LocalLimits final : public AdmissionLimits {
 public:
  // `budgets` null: none are enforced. Both must outlive this.
  LocalLimits(Budgets* budgets, RateLimiter& limiter) : budgets_(budgets), limiter_(limiter) {}

  void admit(LimitAsk ask, std::function<void(LimitOutcome)> done) override;
  void giveBack(const Principal& who, const RateCharge& charge, int64_t used) override;
  const RateLimitOptions& rateOptions() const override { return limiter_.options(); }

 private:
  Budgets* const budgets_;
  RateLimiter& limiter_;
};

}  // namespace lg::billing

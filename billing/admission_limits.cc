#include "billing/admission_limits.h"

#include <utility>

namespace lg::billing {

void LocalLimits::admit(LimitAsk ask, std::function<void(LimitOutcome)> done) {
  BudgetReservation reservation;
  if (ask.cost && budgets_ != nullptr) {
    auto held = budgets_->reserve(ask.who, *ask.cost, ask.now_s);
    if (auto* refused = std::get_if<BudgetRefusal>(&held)) return done(std::move(*refused));
    reservation = std::get<BudgetReservation>(std::move(held));
  }
  RateDecision d = limiter_.admit(ask.who.key_id, ask.who.team, ask.tokens);
  if (!d.allowed) {
    reservation.release();
    return done(std::move(d));
  }
  LimitGrant grant;
  grant.reservation = std::move(reservation);
  grant.rate = d;
  grant.charge.tokens = ask.tokens;
  done(std::move(grant));
}

void LocalLimits::giveBack(const Principal& who, const RateCharge& charge, int64_t used) {
  limiter_.settle(who.key_id, who.team, charge.tokens, used);
}

}  // namespace lg::billing

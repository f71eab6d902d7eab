// Metering (billing/metering.h) over a real ledger and real budgets in a
// real RocksDB billing store: the reservation formula, every entry status
// rule per choice and per request (including a multi-choice request where
// some choices ran and some were refused, and a server timeout against a
// client that left), what each status is billed, budgets charged and
// released through the commit, and the Idempotency-Key protocol (claims,
// replays, conflicting bodies, spent keys, keys left free for a retry).
#include "billing/metering.h"

#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace lg::billing {
namespace {

constexpr int64_t kNowS = 1767225600;  // 2026-01-01T00:00:00Z
constexpr int64_t kNowUs = kNowS * 1'000'000;
const Rates kRates{28'000, 280'000, 420'000};  // DeepSeek's list, pico-dollars per token

const Principal kWho{"key_0123456789abcdef", "team-a", "alice"};

ChoiceUsage usage(int64_t hit, int64_t miss, int64_t output) {
  return ChoiceUsage{hit + miss, hit, 0, miss, output};
}
ChoiceResult completed(ChoiceUsage u, std::string reason = "stop") {
  return ChoiceResult{ChoiceEnd::kCompleted, std::move(reason), u, 0.01, {}};
}
ChoiceResult cancelled(ChoiceUsage u) { return ChoiceResult{ChoiceEnd::kCancelled, "cancelled", u, 0.01, {}}; }
ChoiceResult failed(ChoiceUsage u) { return ChoiceResult{ChoiceEnd::kFailed, "error", u, 0.01, {}}; }
ChoiceResult refused() { return ChoiceResult{ChoiceEnd::kRefused, "refused:queue_timeout", {}, -1, {}}; }

// ------------------------------------------------------ the pure rules

TEST(MeteringRules, MaxCostTakesTheHigherInputRateAndTheOutputCap) {
  EXPECT_EQ(maxCost(kRates, 1000, 100), 1000 * 280'000 + 100 * 420'000);
  // A table whose hit rate is above its miss rate (allowed by the config):
  // the reservation must still cover a request that hits on every block.
  const Rates odd{500'000, 100'000, 1};
  EXPECT_EQ(maxCost(odd, 1000, 10), 1000 * 500'000 + 10);
  EXPECT_EQ(maxCost(kRates, 0, 0), 0);
}

TEST(MeteringRules, ChoiceStatusFollowsTheEndAndWhoEndedTheResponse) {
  const ChoiceUsage u = usage(64, 10, 5);
  EXPECT_EQ(choiceStatus(completed(u), EarlyEnd::kNone), EntryStatus::kCompleted);
  EXPECT_EQ(choiceStatus(refused(), EarlyEnd::kNone), EntryStatus::kRefused);
  EXPECT_EQ(choiceStatus(failed(u), EarlyEnd::kClientLeft), EntryStatus::kFailed);
  // Cancellation is billed only when the client caused it, or a refused
  // sibling ended the response; the server's own cancellations are failures.
  EXPECT_EQ(choiceStatus(cancelled(u), EarlyEnd::kClientLeft), EntryStatus::kCancelled);
  EXPECT_EQ(choiceStatus(cancelled(u), EarlyEnd::kPartRefused), EntryStatus::kCancelled);
  EXPECT_EQ(choiceStatus(cancelled(u), EarlyEnd::kServerStopped), EntryStatus::kFailed);
  EXPECT_EQ(choiceStatus(cancelled(u), EarlyEnd::kNone), EntryStatus::kFailed);  // a deadline
  EXPECT_EQ(choiceStatus(cancelled(u), EarlyEnd::kRevoked), EntryStatus::kCancelled);
}

TEST(MeteringRules, RequestStatusFromItsChoices) {
  const ChoiceUsage u = usage(64, 10, 5);
  EXPECT_EQ(entryStatus({completed(u), completed(u, "length")}, EarlyEnd::kNone), EntryStatus::kCompleted);
  EXPECT_EQ(entryStatus({completed(u), cancelled(u)}, EarlyEnd::kClientLeft), EntryStatus::kCancelled);
  // Any failed choice makes the request failed: the server's failure is never billed.
  EXPECT_EQ(entryStatus({completed(u), failed(u)}, EarlyEnd::kNone), EntryStatus::kFailed);
  EXPECT_EQ(entryStatus({completed(u), cancelled(u)}, EarlyEnd::kServerStopped), EntryStatus::kFailed);
  // Refused only when nothing ran.
  EXPECT_EQ(entryStatus({refused(), refused()}, EarlyEnd::kNone), EntryStatus::kRefused);
  EXPECT_EQ(entryStatus({refused(), cancelled({})}, EarlyEnd::kPartRefused), EntryStatus::kRefused);
  EXPECT_EQ(entryStatus({completed(u), refused()}, EarlyEnd::kPartRefused), EntryStatus::kCancelled);
  EXPECT_EQ(entryStatus({cancelled(u), refused()}, EarlyEnd::kPartRefused), EntryStatus::kCancelled);
  // A client that left while everything was queued: cancelled, nothing computed.
  EXPECT_EQ(entryStatus({cancelled({}), cancelled({})}, EarlyEnd::kClientLeft), EntryStatus::kCancelled);
}

// ------------------------------------------- over a real ledger and budgets

class MeteringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = BillingDb::open(dir_.path() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto ledger = Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk()) << ledger.status().toString();
    ledger_ = std::move(ledger).value();
    BudgetSetting team_budget;
    team_budget.enabled = true;
    team_budget.limit = 1'000'000'000'000;  // $1
    team_budget.period = BudgetPeriodSetting::kTotal;
    team_budget.soft_limit = team_budget.limit;
    auto budgets = Budgets::open(*db_, *ledger_, BudgetOptions{{}, team_budget}, kNowS);
    ASSERT_TRUE(budgets.isOk()) << budgets.status().toString();
    budgets_ = std::move(budgets).value();
    metering_ = std::make_unique<Metering>(MeteringServices{ledger_.get(), nullptr, budgets_.get(), nullptr});
  }
  void TearDown() override {
    metering_.reset();
    ledger_.reset();  // its last callbacks release reservations
    budgets_.reset();
  }

  // A request admitted as the gateway admits one: rates, reservation, claim.
  std::shared_ptr<MeteredRequest> admit(const std::string& id, size_t choices, int64_t prompt, int64_t max_tokens,
                                        std::optional<IdempotencyClaim> claim = std::nullopt, bool stream = false) {
    AppliedRates rates{kRates, 0, "default", -1};
    const int64_t amount = maxCost(rates.rates, prompt, max_tokens) * static_cast<int64_t>(choices);
    auto held = metering_->reserve(kWho, amount, kNowS);
    EXPECT_TRUE(std::holds_alternative<BudgetReservation>(held));
    MeteredRequest::Info info;
    info.request_id = id;
    info.response_id = "cmpl-" + id;
    info.who = kWho;
    info.model = "demo";
    info.requested_model = "demo";
    info.endpoint = "/v1/completions";
    info.stream = stream;
    info.start_us = kNowUs;
    return metering_->start(std::move(info), rates, choices, std::move(claim),
                            std::get<BudgetReservation>(std::move(held)));
  }

  Status commit(MeteredRequest& r, std::string body = "{}") {
    std::promise<Status> done;
    r.commit(body, "application/json", [&](Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  LedgerEntry stored(const std::string& id) {
    auto found = ledger_->find(id);
    EXPECT_TRUE(found.isOk() && found->has_value()) << id;
    return found.isOk() && found->has_value() ? **found : LedgerEntry{};
  }

  Int128 teamReserved() { return budgets_->statusOf(BudgetScope::kTeam, kWho.team, kNowS)->reserved; }
  Int128 teamSpent() { return budgets_->statusOf(BudgetScope::kTeam, kWho.team, kNowS)->spent; }

  test::TempDir dir_{"lg_metering"};
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Budgets> budgets_;
  std::unique_ptr<Metering> metering_;
};

TEST_F(MeteringTest, ACompletedRequestIsBilledAndItsReservationBecomesSpent) {
  auto r = admit("req-completed", 1, 100, 20);
  EXPECT_EQ(teamReserved(), maxCost(kRates, 100, 20));
  EXPECT_TRUE(r->choiceEnded(0, completed(usage(64, 36, 20))));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-completed");
  EXPECT_EQ(e.status, EntryStatus::kCompleted);
  EXPECT_EQ(e.finish_reason, "stop");
  EXPECT_EQ(e.cost, costOf(kRates, 64, 36, 20));
  EXPECT_EQ(teamReserved(), 0);
  EXPECT_EQ(teamSpent(), e.cost.total());
}

TEST_F(MeteringTest, SomeChoicesRanAndSomeWereRefused_TheOnesThatRanAreBilled) {
  // 4 prompts: two ran and streamed text, one was refused in the queue
  // (which ended the response), and the last running one was cancelled.
  auto r = admit("req-partial", 4, 100, 50);
  r->endedEarly(EarlyEnd::kPartRefused);
  EXPECT_FALSE(r->choiceEnded(2, refused()));
  EXPECT_FALSE(r->choiceEnded(0, completed(usage(64, 36, 50), "length")));
  EXPECT_FALSE(r->choiceEnded(1, cancelled(usage(0, 100, 30))));
  EXPECT_TRUE(r->choiceEnded(3, refused()));
  EXPECT_EQ(r->choiceStatuses(), (std::vector<EntryStatus>{EntryStatus::kCompleted, EntryStatus::kCancelled,
                                                            EntryStatus::kRefused, EntryStatus::kRefused}));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-partial");
  EXPECT_EQ(e.status, EntryStatus::kCancelled);
  EXPECT_EQ(e.finish_reason, "refused:queue_timeout");
  EXPECT_EQ(e.choices, 4);
  EXPECT_EQ(e.output_tokens, 80);
  EXPECT_EQ(e.cost, costOf(kRates, 64, 136, 80));
  EXPECT_GT(e.cost.total(), 0);
  EXPECT_EQ(teamSpent(), e.cost.total());
  EXPECT_EQ(teamReserved(), 0);
}

TEST_F(MeteringTest, ARevokedKeysRequestIsBilledForWhatItComputed) {
  auto r = admit("req-revoked", 2, 10, 100);
  r->endedEarly(EarlyEnd::kRevoked);
  EXPECT_FALSE(r->choiceEnded(0, cancelled(usage(0, 10, 40))));
  EXPECT_TRUE(r->choiceEnded(1, cancelled(usage(0, 10, 38))));
  EXPECT_EQ(r->choiceStatuses(), std::vector<EntryStatus>(2, EntryStatus::kCancelled));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-revoked");
  EXPECT_EQ(e.status, EntryStatus::kCancelled);
  EXPECT_EQ(e.cost, costOf(kRates, 0, 20, 78));
  EXPECT_EQ(teamSpent(), e.cost.total());
}

TEST_F(MeteringTest, AGroupRefusedWholeIsRefusedAndCostsNothing) {
  auto r = admit("req-group-refused", 3, 10, 10);
  EXPECT_FALSE(r->choiceEnded(0, refused()));
  EXPECT_FALSE(r->choiceEnded(1, refused()));
  EXPECT_TRUE(r->choiceEnded(2, refused()));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-group-refused");
  EXPECT_EQ(e.status, EntryStatus::kRefused);
  EXPECT_EQ(e.finish_reason, "refused:queue_timeout");
  EXPECT_EQ(e.cost.total(), 0);
  EXPECT_EQ(teamReserved(), 0);
}

TEST_F(MeteringTest, NothingRanAndPartWasRefused_Refused) {
  auto r = admit("req-refused", 2, 10, 10);
  r->endedEarly(EarlyEnd::kPartRefused);
  EXPECT_FALSE(r->choiceEnded(1, refused()));
  EXPECT_TRUE(r->choiceEnded(0, cancelled({})));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-refused");
  EXPECT_EQ(e.status, EntryStatus::kRefused);
  EXPECT_EQ(e.finish_reason, "refused:queue_timeout");
  EXPECT_EQ(e.cost.total(), 0);
  EXPECT_EQ(teamSpent(), 0);
  EXPECT_EQ(teamReserved(), 0);
}

TEST_F(MeteringTest, ServerTimeoutIsFailedAndNotBilled_ClientThatLeftIsCancelledAndBilled) {
  // The same computation, ended by the server's request timeout...
  auto timed_out = admit("req-timeout", 1, 100, 900);
  timed_out->endedEarly(EarlyEnd::kServerStopped);
  timed_out->endedEarly(EarlyEnd::kClientLeft);  // the connection closing afterwards does not change the cause
  EXPECT_TRUE(timed_out->choiceEnded(0, cancelled(usage(0, 100, 816))));
  ASSERT_TRUE(commit(*timed_out).isOk());
  const LedgerEntry t = stored("req-timeout");
  EXPECT_EQ(t.status, EntryStatus::kFailed);
  EXPECT_EQ(t.output_tokens, 816);  // counted as computed...
  EXPECT_EQ(t.cost.total(), 0);     // ...and not billed
  // ...and by a client that closed its connection.
  auto left = admit("req-left", 1, 100, 900);
  left->endedEarly(EarlyEnd::kClientLeft);
  EXPECT_TRUE(left->choiceEnded(0, cancelled(usage(0, 100, 816))));
  ASSERT_TRUE(commit(*left).isOk());
  const LedgerEntry c = stored("req-left");
  EXPECT_EQ(c.status, EntryStatus::kCancelled);
  EXPECT_EQ(c.cost, costOf(kRates, 0, 100, 816));
  EXPECT_EQ(teamSpent(), c.cost.total());
}

TEST_F(MeteringTest, AnEngineErrorIsFailedAndNotBilled) {
  auto r = admit("req-error", 2, 10, 10);
  EXPECT_FALSE(r->choiceEnded(0, completed(usage(0, 10, 10))));
  EXPECT_TRUE(r->choiceEnded(1, failed(usage(0, 10, 3))));
  ASSERT_TRUE(commit(*r).isOk());
  const LedgerEntry e = stored("req-error");
  EXPECT_EQ(e.status, EntryStatus::kFailed);
  EXPECT_EQ(e.finish_reason, "error");
  EXPECT_EQ(e.cost.total(), 0);
}

TEST_F(MeteringTest, AbandonReleasesTheReservationAndTheClaimAndWritesNothing) {
  auto claimed = metering_->claimIdempotencyKey(kWho, "retry-1", "/v1/completions", "{}");
  ASSERT_TRUE(claimed.isOk());
  ASSERT_EQ(claimed->kind, IdempotencyDecision::Kind::kClaimed);
  auto r = admit("req-abandoned", 1, 100, 100, claimed->claim);
  EXPECT_GT(teamReserved(), 0);
  r->abandon();
  EXPECT_EQ(teamReserved(), 0);
  auto again = metering_->claimIdempotencyKey(kWho, "retry-1", "/v1/completions", "{}");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->kind, IdempotencyDecision::Kind::kClaimed);
  metering_->releaseIdempotencyKey(kWho, again->claim);
  auto found = ledger_->find("req-abandoned");
  ASSERT_TRUE(found.isOk());
  EXPECT_FALSE(found->has_value());
}

// Issue 21, item 12: a handler that throws after admission (the claim and
// the reservation made, the request never committed nor abandoned) used to
// leave its Idempotency-Key claimed, so every retry was answered 409 "in
// progress" until a restart. Destroying the request gives both back.
TEST_F(MeteringTest, AHandlerThatThrowsAfterTheClaimReleasesTheClaimAndTheReservation) {
  const std::string body = R"({"prompt":"hi"})";
  auto claimed = metering_->claimIdempotencyKey(kWho, "throws-1", "/v1/completions", body);
  ASSERT_TRUE(claimed.isOk());
  ASSERT_EQ(claimed->kind, IdempotencyDecision::Kind::kClaimed);
  const auto handler = [&] {
    auto r = admit("req-threw", 1, 100, 100, claimed->claim);
    EXPECT_GT(teamReserved(), 0);
    EXPECT_EQ(metering_->claimIdempotencyKey(kWho, "throws-1", "/v1/completions", body)->kind,
              IdempotencyDecision::Kind::kInFlight);
    throw std::runtime_error("the handler failed after admission");
  };
  EXPECT_THROW(handler(), std::runtime_error);
  EXPECT_EQ(teamReserved(), 0);
  auto retry = metering_->claimIdempotencyKey(kWho, "throws-1", "/v1/completions", body);
  ASSERT_TRUE(retry.isOk());
  EXPECT_EQ(retry->kind, IdempotencyDecision::Kind::kClaimed);
  metering_->releaseIdempotencyKey(kWho, retry->claim);
  auto found = ledger_->find("req-threw");
  ASSERT_TRUE(found.isOk());
  EXPECT_FALSE(found->has_value());
}

TEST_F(MeteringTest, QuotaRefusalHoldsNothingAndSaysWhy) {
  auto held = metering_->reserve(kWho, 2'000'000'000'000, kNowS);  // $2 against a $1 budget
  ASSERT_TRUE(std::holds_alternative<QuotaRefusal>(held));
  const QuotaRefusal& q = std::get<QuotaRefusal>(held);
  EXPECT_EQ(q.refusal.budget.scope, "team");
  EXPECT_NE(q.message.find("team team-a's total budget of $1 has $1 left"), std::string::npos) << q.message;
  EXPECT_NE(q.message.find("may cost up to $2"), std::string::npos) << q.message;
  EXPECT_EQ(teamReserved(), 0);
  // No budgets: an empty reservation.
  Metering unbudgeted(MeteringServices{ledger_.get(), nullptr, nullptr, nullptr});
  auto free = unbudgeted.reserve(kWho, 2'000'000'000'000, kNowS);
  ASSERT_TRUE(std::holds_alternative<BudgetReservation>(free));
  EXPECT_EQ(std::get<BudgetReservation>(free).amount(), 0);
}

TEST_F(MeteringTest, IdempotencyKeyProtocol) {
  using Kind = IdempotencyDecision::Kind;
  const std::string body = R"({"prompt":"hi"})";
  auto invalid = metering_->claimIdempotencyKey(kWho, "", "/v1/completions", body);
  ASSERT_TRUE(invalid.isOk());
  EXPECT_EQ(invalid->kind, Kind::kInvalidKey);
  EXPECT_EQ(metering_->claimIdempotencyKey(kWho, "bad\x01key", "/v1/completions", body)->kind, Kind::kInvalidKey);

  // First use: claimed; a concurrent retry finds it in flight.
  auto first = metering_->claimIdempotencyKey(kWho, "k-1", "/v1/completions", body);
  ASSERT_EQ(first->kind, Kind::kClaimed);
  EXPECT_EQ(metering_->claimIdempotencyKey(kWho, "k-1", "/v1/completions", body)->kind, Kind::kInFlight);
  auto r = admit("req-idem", 1, 10, 10, first->claim, /*stream=*/true);
  r->keep("data: a\n\n");
  EXPECT_TRUE(r->choiceEnded(0, completed(usage(0, 10, 10))));
  ASSERT_TRUE(commit(*r, "data: [DONE]\n\n").isOk());

  // The same request again: a replay of the whole stream, billed once.
  auto replay = metering_->claimIdempotencyKey(kWho, "k-1", "/v1/completions", body);
  ASSERT_EQ(replay->kind, Kind::kReplay);
  EXPECT_EQ(replay->record->request_id, "req-idem");
  EXPECT_EQ(replay->record->body, "data: a\n\ndata: [DONE]\n\n");
  // Another body with the same key: refused, naming the first request.
  auto reused = metering_->claimIdempotencyKey(kWho, "k-1", "/v1/completions", R"({"prompt":"other"})");
  ASSERT_EQ(reused->kind, Kind::kReused);
  EXPECT_NE(reused->message().find("req-idem"), std::string::npos);
  // Another key's namespace: its own claim.
  const Principal other{"key_fedcba9876543210", "team-a", "bob"};
  auto theirs = metering_->claimIdempotencyKey(other, "k-1", "/v1/completions", body);
  ASSERT_EQ(theirs->kind, Kind::kClaimed);
  metering_->releaseIdempotencyKey(other, theirs->claim);

  // A cancelled request spends its key without keeping the response.
  auto second = metering_->claimIdempotencyKey(kWho, "k-2", "/v1/completions", body);
  auto c = admit("req-idem-cancelled", 1, 10, 10, second->claim);
  c->endedEarly(EarlyEnd::kClientLeft);
  EXPECT_TRUE(c->choiceEnded(0, cancelled(usage(0, 10, 2))));
  ASSERT_TRUE(commit(*c).isOk());
  auto spent = metering_->claimIdempotencyKey(kWho, "k-2", "/v1/completions", body);
  ASSERT_EQ(spent->kind, Kind::kSpent);
  EXPECT_NE(spent->message().find("ended cancelled and was billed once"), std::string::npos) << spent->message();

  // Refused and failed requests cost nothing and leave the key free for a retry.
  auto third = metering_->claimIdempotencyKey(kWho, "k-3", "/v1/completions", body);
  auto f = admit("req-idem-failed", 1, 10, 10, third->claim);
  EXPECT_TRUE(f->choiceEnded(0, failed(usage(0, 10, 1))));
  ASSERT_TRUE(commit(*f).isOk());
  auto retry = metering_->claimIdempotencyKey(kWho, "k-3", "/v1/completions", body);
  EXPECT_EQ(retry->kind, Kind::kClaimed);
  metering_->releaseIdempotencyKey(kWho, retry->claim);
}

TEST_F(MeteringTest, NoLedgerMeansNoMeteredRequest) {
  Metering off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.start({}, {}, 1, std::nullopt, {}), nullptr);
  EXPECT_EQ(off.systemPromptFingerprint("team-a", {{"system", "x"}}), "");
}

}  // namespace
}  // namespace lg::billing

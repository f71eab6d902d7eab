// Budgets over the real ledger in a real RocksDB billing store: UTC periods,
// reservations against the key's and the team's budget, many threads never
// spending past a limit, settlement through the ledger's commits, what was
// spent read back from the counters after reopening, periods that renew,
// budgets set by the admin kept across reopening, soft-limit warnings once
// per period, and a corrupt budget record refusing to open.
#include "billing/budgets.h"
#include "billing/spend_source.h"

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/support/temp_dir.h"

namespace lg::billing {
namespace {

constexpr int64_t kUs = 1'000'000;
constexpr int64_t kPico = 1'000'000'000'000;  // pico-dollars per dollar
constexpr int64_t kJan1 = 1767225600;          // 2026-01-01T00:00:00Z
constexpr int64_t kDay = 86400;

BudgetSetting budget(int64_t limit, BudgetPeriodSetting period, int64_t soft_limit = -1) {
  BudgetSetting b;
  b.enabled = true;
  b.limit = limit;
  b.period = period;
  b.soft_limit = soft_limit < 0 ? limit / 5 * 4 : soft_limit;
  return b;
}

// An entry that cost exactly `cost` pico-dollars (output tokens at 1 pico-dollar each).
LedgerEntry entryCosting(const std::string& id, const Principal& who, int64_t start_s, int64_t cost) {
  LedgerEntry e;
  e.request_id = id;
  e.key_id = who.key_id;
  e.team = who.team;
  e.model = "demo";
  e.endpoint = "/v1/chat/completions";
  e.start_us = start_s * kUs;
  e.end_us = e.start_us + 1000;
  e.prompt_tokens = 0;
  e.output_tokens = cost;
  e.prices.rates = Rates{0, 0, 1};
  e.status = EntryStatus::kCompleted;
  e.price();
  return e;
}

Status commitAndWait(Ledger& ledger, LedgerEntry e) {
  std::promise<Status> done;
  ledger.commit(std::move(e), std::nullopt, [&](Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

class BudgetsTest : public ::testing::Test {
 protected:
  void open(BudgetOptions options, int64_t now_s) {
    budgets_.reset();
    ledger_.reset();
    db_.reset();
    auto db = BillingDb::open(dir_.path() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto ledger = Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk()) << ledger.status().toString();
    ledger_ = std::move(ledger).value();
    auto budgets = Budgets::open(*db_, *ledger_, options, now_s);
    ASSERT_TRUE(budgets.isOk()) << budgets.status().toString();
    budgets_ = std::move(budgets).value();
  }
  void TearDown() override {
    // The ledger first: its last callbacks may release reservations.
    ledger_.reset();
    budgets_.reset();
  }

  // Reserves `amount`, commits an entry costing `cost`, and settles the way
  // the gateway does: the reservation is released in the commit's callback.
  bool spend(const Principal& who, int64_t now_s, int64_t amount, int64_t cost, const std::string& id) {
    auto held = budgets_->reserve(who, amount, now_s);
    auto* r = std::get_if<BudgetReservation>(&held);
    if (r == nullptr) return false;
    auto reservation = std::make_shared<BudgetReservation>(std::move(*r));
    std::promise<Status> done;
    ledger_->commit(entryCosting(id, who, now_s, cost), std::nullopt, [&, reservation](Status s) {
      reservation->release();
      done.set_value(std::move(s));
    });
    EXPECT_TRUE(done.get_future().get().isOk());
    return true;
  }

  test::TempDir dir_{"lg_budgets"};
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Budgets> budgets_;
  const Principal alice_{"key_a", "team-x", "alice"};
  const Principal bob_{"key_b", "team-x", "bob"};
  const Principal carol_{"key_c", "team-y", "carol"};
};

TEST(BudgetPeriodTest, DaysAndMonthsAreUtc) {
  const int64_t t = kJan1 + 31 * kDay + 5 * 3600;  // 2026-02-01T05:00:00Z
  EXPECT_EQ(budgetPeriodStart(BudgetPeriodSetting::kDay, t), kJan1 + 31 * kDay);
  EXPECT_EQ(budgetPeriodEnd(BudgetPeriodSetting::kDay, t), kJan1 + 32 * kDay);
  EXPECT_EQ(budgetPeriodStart(BudgetPeriodSetting::kMonth, t), kJan1 + 31 * kDay);
  EXPECT_EQ(budgetPeriodEnd(BudgetPeriodSetting::kMonth, t), kJan1 + (31 + 28) * kDay);  // 2026 is not a leap year
  EXPECT_EQ(budgetPeriodStart(BudgetPeriodSetting::kMonth, kJan1 - 1), kJan1 - 31 * kDay);  // December 2025
  EXPECT_EQ(budgetPeriodEnd(BudgetPeriodSetting::kMonth, kJan1 - 1), kJan1);
  const int64_t feb2028 = 1832976000;  // 2028-02-01, a leap year
  EXPECT_EQ(budgetPeriodEnd(BudgetPeriodSetting::kMonth, feb2028 + 10), feb2028 + 29 * kDay);
  EXPECT_EQ(budgetPeriodStart(BudgetPeriodSetting::kTotal, t), 0);
  EXPECT_EQ(budgetPeriodEnd(BudgetPeriodSetting::kTotal, t), 0);
}

TEST_F(BudgetsTest, WithoutBudgetsEverythingIsAdmitted) {
  open({}, kJan1);
  auto held = budgets_->reserve(alice_, int64_t{1} << 60, kJan1);
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(held));
  EXPECT_FALSE(budgets_->budgetOf(alice_, kJan1).has_value());
}

TEST_F(BudgetsTest, AReservationMustFitTheKeysAndTheTeamsBudget) {
  open({budget(100, BudgetPeriodSetting::kDay), budget(150, BudgetPeriodSetting::kMonth)}, kJan1);
  // Alice's 60 fit her 100 and the team's 150.
  auto a = budgets_->reserve(alice_, 60, kJan1);
  ASSERT_TRUE(std::holds_alternative<BudgetReservation>(a));
  // 50 more of hers would pass her 100 (60 reserved): refused by the key.
  auto a2 = budgets_->reserve(alice_, 50, kJan1);
  ASSERT_TRUE(std::holds_alternative<BudgetRefusal>(a2));
  EXPECT_EQ(std::get<BudgetRefusal>(a2).budget.scope, "key");
  EXPECT_EQ(std::get<BudgetRefusal>(a2).budget.reserved, 60);
  EXPECT_EQ(std::get<BudgetRefusal>(a2).amount, 50);
  // Bob's 100 fit his own 100, but not the team's 150 - 60.
  auto b = budgets_->reserve(bob_, 100, kJan1);
  ASSERT_TRUE(std::holds_alternative<BudgetRefusal>(b));
  EXPECT_EQ(std::get<BudgetRefusal>(b).budget.scope, "team");
  EXPECT_EQ(std::get<BudgetRefusal>(b).budget.period, "month");
  // The team's view binds Bob now: it has less left than his own budget.
  auto view = budgets_->budgetOf(bob_, kJan1);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->scope, "team");
  EXPECT_EQ(view->remaining(), 90);
  // Released, the 60 are free again.
  std::get<BudgetReservation>(a).release();
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(budgets_->reserve(bob_, 100, kJan1)));
  // Another team is not charged for team-x.
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(budgets_->reserve(carol_, 100, kJan1)));
}

TEST_F(BudgetsTest, ADestroyedReservationIsGivenBack) {
  open({budget(100, BudgetPeriodSetting::kTotal), {}}, kJan1);
  {
    auto a = budgets_->reserve(alice_, 100, kJan1);
    ASSERT_TRUE(std::holds_alternative<BudgetReservation>(a));
    EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(budgets_->reserve(alice_, 1, kJan1)));
    BudgetReservation moved = std::move(std::get<BudgetReservation>(a));
    EXPECT_EQ(moved.amount(), 100);
  }
  EXPECT_EQ(budgets_->budgetOf(alice_, kJan1)->reserved, 0);
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(budgets_->reserve(alice_, 100, kJan1)));
}

// 16 threads spending 7 pico-dollars a request from one key's 1,000 until
// refused: exactly floor(1000 / 7) requests are admitted, and what the
// ledger holds for the key is never more than the limit.
TEST_F(BudgetsTest, ConcurrentRequestsNeverSpendPastTheLimit) {
  open({budget(1000, BudgetPeriodSetting::kDay), {}}, kJan1);
  std::atomic<int> admitted{0}, next_id{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      // Each request costs what it reserved, so no room appears once one
      // is refused: every thread's first refusal is final.
      while (spend(alice_, kJan1 + 10, 7, 7, "req_" + std::to_string(next_id++))) ++admitted;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1000 / 7);
  const auto st = budgets_->budgetOf(alice_, kJan1 + 10);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->spent, Int128{1000 / 7 * 7});
  EXPECT_EQ(st->reserved, 0);
  // The ledger agrees: the key's committed cost is the budget's spent.
  UsageQuery q;
  q.key_id = alice_.key_id;
  q.from_s = kJan1;
  q.to_s = kJan1 + kDay;
  auto rows = ledger_->usage(q);
  ASSERT_TRUE(rows.isOk());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(costTotal((*rows)[0].counters), st->spent);
}

TEST_F(BudgetsTest, CostsBelowTheReservationLeaveRoomForMore) {
  open({budget(100, BudgetPeriodSetting::kDay), {}}, kJan1);
  // Each reserves 50 and costs 10: five fit in 100 one after another.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(spend(alice_, kJan1, 50, 10, "r" + std::to_string(i))) << i;
  EXPECT_EQ(budgets_->budgetOf(alice_, kJan1)->spent, 50);
  EXPECT_TRUE(spend(alice_, kJan1, 50, 10, "r5"));
  EXPECT_FALSE(spend(alice_, kJan1, 50, 10, "r6"));  // 60 spent: 40 left
  EXPECT_TRUE(spend(alice_, kJan1, 40, 40, "r7"));
  EXPECT_EQ(budgets_->budgetOf(alice_, kJan1)->remaining(), 0);
}

TEST_F(BudgetsTest, WhatWasSpentIsReadBackAfterReopeningAndPeriodsRenew) {
  const int64_t now = kJan1 + 31 * kDay + 12 * 3600;  // 2026-02-01T12:00Z
  open({}, now);
  // January (last month), today, and earlier today in another hour.
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("old", alice_, kJan1 + 3 * kDay, 1000)).isOk());
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("today1", alice_, now - 3 * 3600, 20)).isOk());
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("today2", bob_, now - 60, 5)).isOk());
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("other", carol_, now - 60, 7)).isOk());

  BudgetOptions o{budget(100, BudgetPeriodSetting::kDay), budget(int64_t{10} * kPico, BudgetPeriodSetting::kTotal)};
  open(o, now);
  auto key = budgets_->statusOf(BudgetScope::kKey, alice_.key_id, now);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->spent, 20);  // January's 1000 is not today's
  EXPECT_EQ(key->period_start_s, kJan1 + 31 * kDay);
  EXPECT_EQ(key->period_end_s, kJan1 + 32 * kDay);
  auto team = budgets_->statusOf(BudgetScope::kTeam, "team-x", now);
  ASSERT_TRUE(team.has_value());
  EXPECT_EQ(team->spent, 1025);  // in total: both keys, both months
  EXPECT_EQ(team->period_end_s, 0);
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kTeam, "team-y", now)->spent, 7);

  // A month budget for Alice sees only February's.
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(50, BudgetPeriodSetting::kMonth)).isOk());
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kKey, alice_.key_id, now)->spent, 20);

  // Tomorrow: the day budget renews (Bob), the total does not.
  const int64_t tomorrow = now + kDay;
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kKey, bob_.key_id, tomorrow)->spent, 0);
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kTeam, "team-x", tomorrow)->spent, 1025);
  // A commit of a request that started yesterday counts in total, not in the new day.
  EXPECT_TRUE(spend(bob_, tomorrow, 90, 90, "tomorrow"));
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("late", bob_, now, 3)).isOk());
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kKey, bob_.key_id, tomorrow)->spent, 90);
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kTeam, "team-x", tomorrow)->spent, 1025 + 90 + 3);
}

// What rebuilds counters shared through Redis (spend_source.h): the period
// Budgets keeps from its memory, an earlier one from the ledger's counters.
TEST_F(BudgetsTest, TheLedgerSpendSourceGivesEveryPeriodsSpend) {
  const int64_t now = kJan1 + 31 * kDay + 12 * 3600;  // 2026-02-01T12:00Z
  open({}, now);
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("jan", alice_, kJan1 + 3 * kDay, 1000)).isOk());
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("feb", alice_, now - 60, 20)).isOk());
  ASSERT_TRUE(commitAndWait(*ledger_, entryCosting("bob", bob_, now - 60, 5)).isOk());
  const LedgerSpendSource source(*budgets_, *ledger_);
  auto spent = [&](BudgetScope scope, const std::string& id, BudgetPeriodSetting p, int64_t start) {
    auto r = source.spent(scope, id, p, start);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? *r : Int128{-1};
  };
  const int64_t feb = kJan1 + 31 * kDay;
  EXPECT_EQ(spent(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kDay, feb), 20);
  EXPECT_EQ(spent(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kMonth, feb), 20);
  EXPECT_EQ(spent(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kTotal, 0), 1020);
  EXPECT_EQ(spent(BudgetScope::kTeam, "team-x", BudgetPeriodSetting::kTotal, 0), 1025);
  // January is no longer what Budgets keeps: read from the ledger.
  EXPECT_FALSE(budgets_->spentIn(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kMonth, kJan1).has_value());
  EXPECT_EQ(spent(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kMonth, kJan1), 1000);
  EXPECT_EQ(spent(BudgetScope::kTeam, "team-x", BudgetPeriodSetting::kDay, kJan1 + 3 * kDay), 1000);
  EXPECT_EQ(spent(BudgetScope::kTeam, "team-y", BudgetPeriodSetting::kDay, feb), 0);
  // A later day than Budgets keeps starts empty.
  EXPECT_EQ(spent(BudgetScope::kKey, alice_.key_id, BudgetPeriodSetting::kDay, feb + kDay), 0);
}

TEST_F(BudgetsTest, BudgetsSetByTheAdminOutliveRestartsAndClearingRestoresTheDefault) {
  open({budget(100, BudgetPeriodSetting::kDay), {}}, kJan1);
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(5, BudgetPeriodSetting::kMonth, 1)).isOk());
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, bob_.key_id, BudgetSetting{}).isOk());  // exempt from the default
  ASSERT_TRUE(budgets_->set(BudgetScope::kTeam, "team-y", budget(9, BudgetPeriodSetting::kTotal)).isOk());
  open({budget(100, BudgetPeriodSetting::kDay), {}}, kJan1);
  EXPECT_EQ(budgets_->effective(BudgetScope::kKey, alice_.key_id).budget, budget(5, BudgetPeriodSetting::kMonth, 1));
  EXPECT_FALSE(budgets_->effective(BudgetScope::kKey, alice_.key_id).is_default);
  EXPECT_FALSE(budgets_->statusOf(BudgetScope::kKey, bob_.key_id, kJan1).has_value());
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(budgets_->reserve(bob_, 1'000'000, kJan1)));
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kTeam, "team-y", kJan1)->limit, 9);
  EXPECT_EQ(budgets_->assigned().size(), 3u);
  // Cleared: back to the default 100 a day; clearing twice finds nothing.
  auto cleared = budgets_->clear(BudgetScope::kKey, alice_.key_id);
  ASSERT_TRUE(cleared.isOk());
  EXPECT_TRUE(*cleared);
  EXPECT_FALSE(*budgets_->clear(BudgetScope::kKey, alice_.key_id));
  open({budget(100, BudgetPeriodSetting::kDay), {}}, kJan1);
  EXPECT_TRUE(budgets_->effective(BudgetScope::kKey, alice_.key_id).is_default);
  EXPECT_EQ(budgets_->statusOf(BudgetScope::kKey, alice_.key_id, kJan1)->limit, 100);
}

TEST_F(BudgetsTest, TheSoftLimitWarnsOncePerPeriod) {
  open({budget(100, BudgetPeriodSetting::kDay, 50), {}}, kJan1);
  auto reached = [&] {
    metrics::ExpositionWriter w;
    budgets_->collect(w);
    const std::string text = w.text();
    const std::string series = "latentgate_budget_soft_limit_reached_total{scope=\"key\"} ";
    const size_t at = text.find(series);
    return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + series.size());
  };
  EXPECT_EQ(reached(), 0);
  EXPECT_TRUE(spend(alice_, kJan1, 30, 30, "a"));
  EXPECT_EQ(reached(), 0);
  EXPECT_TRUE(spend(alice_, kJan1, 30, 30, "b"));  // 60 >= 50
  EXPECT_EQ(reached(), 1);
  EXPECT_TRUE(spend(alice_, kJan1, 30, 30, "c"));  // still over: not again
  EXPECT_EQ(reached(), 1);
  EXPECT_TRUE(spend(alice_, kJan1 + kDay, 60, 60, "d"));  // the next day reaches it anew
  EXPECT_EQ(reached(), 2);
  metrics::ExpositionWriter w;
  budgets_->collect(w);
  EXPECT_NE(w.text().find("latentgate_budget_refusals_total{scope=\"key\"} 0"), std::string::npos) << w.text();
}

TEST_F(BudgetsTest, ACorruptBudgetRecordRefusesToOpen) {
  open({}, kJan1);
  ASSERT_TRUE(db_->write({{"budget/key/key_a", "{\"limit\": 5}"}}).isOk());
  budgets_.reset();
  auto reopened = Budgets::open(*db_, *ledger_, {}, kJan1);
  ASSERT_FALSE(reopened.isOk());
  EXPECT_EQ(reopened.status().code(), StatusCode::kDataLoss);
}

TEST(BudgetSettingTest, DefaultBudgetsComeFromTheFileTheEnvironmentAndFlags) {
  Config c;
  ASSERT_TRUE(applyConfigText(R"({"billing": {"key_budget": {"limit": "5", "period": "day"}}})", "file", c).isOk());
  EXPECT_EQ(c.billing.key_budget, budget(5 * kPico, BudgetPeriodSetting::kDay));
  EXPECT_FALSE(c.billing.team_budget.enabled);
  ConfigSources sources;
  sources.environment["LATENTGATE_BILLING_TEAM_BUDGET"] = R"({"limit": "100", "soft_limit": "90"})";
  auto loaded = loadConfig(sources);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->billing.team_budget, budget(100 * kPico, BudgetPeriodSetting::kMonth, 90 * kPico));
  // `latentgate config` shows them as they are written, and reads them back.
  Config back;
  ASSERT_TRUE(applyConfigText(configToJson(*loaded), "dump", back).isOk());
  EXPECT_EQ(back.billing.team_budget, loaded->billing.team_budget);
  EXPECT_EQ(back.billing.key_budget, BudgetSetting{});
  Status bad = setConfigField("billing.key_budget", R"({"limit": "5", "period": "fortnight"})", c);
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("billing.key_budget.period"), std::string::npos) << bad.toString();
}

}  // namespace
}  // namespace lg::billing

// The budget views with limits.redis_url (billing/redis/redis_budget_view.h)
// against a real, private redis-server (tests/support/redis_server.h), one
// per run of this binary, flushed before each test. Two replicas, each with
// its own store, ledger, Budgets, spend source, RedisLimits and view, as two
// `latentgate serve` processes have: each commits its own spending, and each
// one's view shows the sum; flushed, the view falls back to the spend
// source; with Redis stopped, to this replica's own count, marked.
#include "billing/redis/redis_budget_view.h"

#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/redis/limit_scripts.h"
#include "billing/redis/redis_limits.h"
#include "common/unix_time.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace lg::billing::redis {
namespace {

using namespace std::chrono_literals;
using test::RedisServer;

RedisServer* g_redis = nullptr;

class RedisEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string error;
    server_ = RedisServer::create(&error);
    ASSERT_NE(server_, nullptr) << error;
    g_redis = server_.get();
  }
  void TearDown() override {
    g_redis = nullptr;
    server_.reset();
  }

 private:
  std::unique_ptr<RedisServer> server_;
};

[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new RedisEnvironment);

BudgetSetting budget(int64_t limit, BudgetPeriodSetting period) {
  BudgetSetting b;
  b.enabled = true;
  b.limit = limit;
  b.period = period;
  b.soft_limit = limit / 2;
  return b;
}

// An entry that cost exactly `cost` pico-dollars (output tokens at 1 each).
LedgerEntry entryCosting(const std::string& id, const Principal& who, int64_t cost) {
  LedgerEntry e;
  e.request_id = id;
  e.key_id = who.key_id;
  e.team = who.team;
  e.model = "demo";
  e.endpoint = "/v1/chat/completions";
  e.start_us = unixMicros();
  e.end_us = e.start_us + 1000;
  e.output_tokens = cost;
  e.prices.rates = Rates{0, 0, 1};
  e.status = EntryStatus::kCompleted;
  e.price();
  return e;
}

LimitOutcome admitNow(AdmissionLimits& limits, const Principal& who, const std::string& id, int64_t cost) {
  std::promise<LimitOutcome> outcome;
  auto decided = outcome.get_future();
  limits.admit(LimitAsk{who, id, cost, 0, unixSeconds()}, [&outcome](LimitOutcome o) { outcome.set_value(std::move(o)); });
  return decided.get();
}

// What `latentgate serve` holds of budgets with limits.redis_url.
struct Replica {
  std::unique_ptr<BillingDb> db;
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<Budgets> budgets;
  std::unique_ptr<LedgerSpendSource> source;
  std::unique_ptr<RedisLimits> limits;
  std::unique_ptr<RedisBudgetView> view;
  std::vector<LimitGrant> running;  // requests still in flight: their reservations

  ~Replica() {
    view.reset();
    running.clear();
    ledger.reset();  // commits what is queued, telling its observers
    limits.reset();
    source.reset();
    budgets.reset();
  }
};

class RedisBudgetViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_redis, nullptr);
    if (!g_redis->running()) {
      std::string error;
      ASSERT_TRUE(g_redis->start(&error)) << error;
    }
    RedisOptions o;
    o.url = g_redis->url();
    redis_ = std::make_unique<RedisConnection>(o);
    ASSERT_TRUE(redis_->command({"FLUSHALL"}).isOk());
    for (const char* name : {"a", "b"}) {
      auto r = std::make_unique<Replica>();
      open(*r, name);
      replicas_.push_back(std::move(r));
    }
  }

  RedisOptions redisOptions() const {
    RedisOptions o;
    o.url = g_redis->url();
    o.retry_ms = 100;
    return o;
  }

  void open(Replica& r, const std::string& name, RedisBudgetViewOptions view_options = {}) {
    auto db = BillingDb::open(dir_.file("billing-" + name));
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    r.db = std::move(db).value();
    auto ledger = Ledger::open(*r.db);
    ASSERT_TRUE(ledger.isOk());
    r.ledger = std::move(ledger).value();
    auto budgets = Budgets::open(*r.db, *r.ledger, {}, unixSeconds());
    ASSERT_TRUE(budgets.isOk());
    r.budgets = std::move(budgets).value();
    r.source = std::make_unique<LedgerSpendSource>(*r.budgets, *r.ledger);
    RedisLimitsOptions o;
    o.redis = redisOptions();
    o.shutdown_flush = 200ms;
    auto limits = RedisLimits::start(std::move(o), *r.budgets, *r.source);
    ASSERT_TRUE(limits.isOk()) << limits.status().toString();
    r.limits = std::move(limits).value();
    r.ledger->addObserver(r.limits.get());
    view_options.redis = redisOptions();
    auto view = RedisBudgetView::open(std::move(view_options), *r.budgets, *r.source);
    ASSERT_TRUE(view.isOk()) << view.status().toString();
    r.view = std::move(view).value();
  }

  // The same settings on every replica (the control plane's job in serve).
  void setBudget(BudgetScope scope, const std::string& id, const BudgetSetting& b) {
    for (auto& r : replicas_) ASSERT_TRUE(r->budgets->set(scope, id, b).isOk());
  }

  // A request admitted on `r` that costs `cost` and commits: reserved `cost`,
  // then spent, as metering does.
  void spend(Replica& r, const Principal& who, const std::string& id, int64_t cost) {
    LimitOutcome o = admitNow(*r.limits, who, id, cost);
    ASSERT_TRUE(std::holds_alternative<LimitGrant>(o)) << id;
    auto reservation = std::make_shared<BudgetReservation>(std::move(std::get<LimitGrant>(o).reservation));
    std::promise<Status> done;
    r.ledger->commit(entryCosting(id, who, cost), std::nullopt, [&done, reservation](Status s) {
      reservation->release();
      done.set_value(std::move(s));
    });
    Status s = done.get_future().get();
    ASSERT_TRUE(s.isOk()) << s.toString();
    ASSERT_TRUE(r.limits->flush(5s));
  }
  // A request admitted on `r` and still running: it holds `cost`.
  void hold(Replica& r, const Principal& who, const std::string& id, int64_t cost) {
    LimitOutcome o = admitNow(*r.limits, who, id, cost);
    ASSERT_TRUE(std::holds_alternative<LimitGrant>(o)) << id;
    r.running.push_back(std::move(std::get<LimitGrant>(o)));
  }

  BudgetStatus teamOf(const Replica& r, const Principal& who) {
    std::optional<BudgetStatus> st = r.view->statusOf({BudgetScope::kTeam, who.team, who.team}, unixSeconds());
    EXPECT_TRUE(st.has_value());
    return st.value_or(BudgetStatus{});
  }

  Replica& a() { return *replicas_[0]; }
  Replica& b() { return *replicas_[1]; }

  test::TempDir dir_{"lg_redis_budget_view"};
  std::unique_ptr<RedisConnection> redis_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  const LimitKeys keys_{"lg:"};
  const Principal alice_{"key_a", "team-x", "alice"};
  const Principal bob_{"key_b", "team-x", "bob"};
};

TEST_F(RedisBudgetViewTest, EachReplicaShowsWhatEveryReplicaSpentAndHolds) {
  setBudget(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal));
  setBudget(BudgetScope::kKey, alice_.key_id, budget(3'000, BudgetPeriodSetting::kMonth));
  spend(a(), alice_, "a1", 500);
  spend(b(), bob_, "b1", 300);
  spend(b(), alice_, "b2", 200);  // alice through the other replica too
  hold(b(), bob_, "b3", 700);
  hold(a(), alice_, "a2", 50);

  for (Replica* r : {&a(), &b()}) {
    const BudgetStatus team = teamOf(*r, alice_);
    EXPECT_EQ(team.scope, "team");
    EXPECT_EQ(team.period, "total");
    EXPECT_EQ(team.limit, 10'000);
    EXPECT_EQ(team.soft_limit, 5'000);
    EXPECT_EQ(team.spent, 1'000);
    EXPECT_EQ(team.reserved, 750);
    EXPECT_EQ(team.remaining(), 8'250);
    EXPECT_EQ(team.counted, BudgetCounted::kShared);
    // Alice's key: 700 spent on both replicas, 50 held; it binds (2,250 left).
    const std::optional<BudgetStatus> key = r->view->budgetOf(alice_, unixSeconds());
    ASSERT_TRUE(key.has_value());
    EXPECT_EQ(key->scope, "key");
    EXPECT_EQ(key->period, "month");
    EXPECT_EQ(key->period_start_s, budgetPeriodStart(BudgetPeriodSetting::kMonth, unixSeconds()));
    EXPECT_EQ(key->period_end_s, budgetPeriodEnd(BudgetPeriodSetting::kMonth, unixSeconds()));
    EXPECT_EQ(key->spent, 700);
    EXPECT_EQ(key->reserved, 50);
    EXPECT_EQ(key->counted, BudgetCounted::kShared);
    // Bob has no key budget: the team's binds.
    const std::optional<BudgetStatus> bob = r->view->budgetOf(bob_, unixSeconds());
    ASSERT_TRUE(bob.has_value());
    EXPECT_EQ(bob->scope, "team");
    EXPECT_EQ(bob->spent, 1'000);
  }
  // What each replica counts alone, and showed before: its own commits only.
  EXPECT_EQ(a().budgets->statusOf(BudgetScope::kTeam, "team-x", unixSeconds())->spent, 500);
  EXPECT_EQ(b().budgets->statusOf(BudgetScope::kTeam, "team-x", unixSeconds())->spent, 500);

  // Many at once, in order; one without a budget is nothing; a subject asked
  // twice is read once and answered twice.
  const std::vector<BudgetSubject> subjects = {{BudgetScope::kKey, alice_.key_id, alice_.team},
                                               {BudgetScope::kKey, bob_.key_id, bob_.team},
                                               {BudgetScope::kTeam, "team-x", "team-x"},
                                               {BudgetScope::kTeam, "team-none", "team-none"},
                                               {BudgetScope::kKey, alice_.key_id, alice_.team}};
  const auto statuses = a().view->statusesOf(subjects, unixSeconds());
  ASSERT_EQ(statuses.size(), 5u);
  ASSERT_TRUE(statuses[0] && statuses[2] && statuses[4]);
  EXPECT_EQ(statuses[0]->spent, 700);
  EXPECT_FALSE(statuses[1].has_value());
  EXPECT_EQ(statuses[2]->spent, 1'000);
  EXPECT_FALSE(statuses[3].has_value());
  EXPECT_EQ(statuses[4]->spent, 700);
  const auto bound = b().view->budgetsOf({alice_, bob_}, unixSeconds());
  ASSERT_EQ(bound.size(), 2u);
  EXPECT_EQ(bound[0]->scope, "key");
  EXPECT_EQ(bound[1]->scope, "team");

  // Released reservations leave the views at once.
  a().running.clear();
  b().running.clear();
  ASSERT_TRUE(a().limits->flush(5s));
  ASSERT_TRUE(b().limits->flush(5s));
  EXPECT_EQ(teamOf(a(), alice_).reserved, 0);
}

TEST_F(RedisBudgetViewTest, ExpiredReservationsOfADeadReplicaAreNotShown) {
  setBudget(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal));
  // A replica whose reservations live 150 ms and are never refreshed: as
  // if it died with its requests running.
  Replica dead;
  {
    auto db = BillingDb::open(dir_.file("billing-dead"));
    ASSERT_TRUE(db.isOk());
    dead.db = std::move(db).value();
    dead.ledger = std::move(Ledger::open(*dead.db)).value();
    dead.budgets = std::move(Budgets::open(*dead.db, *dead.ledger, {}, unixSeconds())).value();
    ASSERT_TRUE(dead.budgets->set(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal)).isOk());
    dead.source = std::make_unique<LedgerSpendSource>(*dead.budgets, *dead.ledger);
    RedisLimitsOptions o;
    o.redis = redisOptions();
    o.reservation_ttl = 150ms;
    o.refresh_every = 0ms;
    o.shutdown_flush = 200ms;
    dead.limits = std::move(RedisLimits::start(std::move(o), *dead.budgets, *dead.source)).value();
  }
  hold(dead, bob_, "d1", 400);
  hold(a(), alice_, "a1", 100);
  EXPECT_EQ(teamOf(a(), alice_).reserved, 500);
  std::this_thread::sleep_for(300ms);
  // Redis still sums it (no admission has purged it), the view does not.
  EXPECT_EQ(redis_->command({"GET", keys_.heldSum("team-x", BudgetScope::kTeam, "")})->asInt(), 500);
  EXPECT_EQ(teamOf(a(), alice_).reserved, 100);
  EXPECT_EQ(teamOf(b(), alice_).reserved, 100);
  // The view wrote nothing: the next admission purges it.
  EXPECT_EQ(redis_->command({"GET", keys_.heldSum("team-x", BudgetScope::kTeam, "")})->asInt(), 500);
  dead.running.clear();
}

// A spend source that sees both replicas' ledgers, as the ledger of record
// in PostgreSQL does (RecordSpendSource) once their outboxes are drained.
class BothLedgers final : public SpendSource {
 public:
  BothLedgers(const SpendSource& a, const SpendSource& b) : a_(a), b_(b) {}
  Result<Int128> spent(BudgetScope scope, const std::string& id, BudgetPeriodSetting period,
                       int64_t start_s) const override {
    LG_ASSIGN_OR_RETURN(Int128 a, a_.spent(scope, id, period, start_s));
    LG_ASSIGN_OR_RETURN(Int128 b, b_.spent(scope, id, period, start_s));
    return a + b;
  }

 private:
  const SpendSource& a_;
  const SpendSource& b_;
};

TEST_F(RedisBudgetViewTest, FlushedCountersFallBackToTheSpendSource) {
  setBudget(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal));
  spend(a(), alice_, "a1", 500);
  spend(b(), bob_, "b1", 300);
  hold(b(), bob_, "b2", 70);
  EXPECT_EQ(teamOf(a(), alice_).spent, 800);

  ASSERT_TRUE(redis_->command({"FLUSHALL"}).isOk());
  // Not seeded: each replica's source, its own ledger here, says what it
  // spent; named as this replica's, not the replicas' shared count. Nothing
  // is held until the running request's refresh puts it back.
  BudgetStatus st = teamOf(a(), alice_);
  EXPECT_EQ(st.spent, 500);
  EXPECT_EQ(st.reserved, 0);
  EXPECT_EQ(st.counted, BudgetCounted::kReplicaLedger);
  st = teamOf(b(), alice_);
  EXPECT_EQ(st.spent, 300);
  EXPECT_EQ(st.counted, BudgetCounted::kReplicaLedger);
  // The view reads; it does not seed.
  EXPECT_EQ(redis_->command({"EXISTS", keys_.spend("team-x", BudgetScope::kTeam, "", BudgetPeriodSetting::kTotal, 0)})
                ->asInt(),
            0);

  // A source that covers every replica (the ledger of record) is named so.
  const BothLedgers records(*a().source, *b().source);
  RedisBudgetViewOptions o;
  o.redis = redisOptions();
  o.source_counts = BudgetCounted::kRecords;
  auto view = RedisBudgetView::open(std::move(o), *a().budgets, records);
  ASSERT_TRUE(view.isOk());
  std::optional<BudgetStatus> of_record = (*view)->statusOf({BudgetScope::kTeam, "team-x", "team-x"}, unixSeconds());
  ASSERT_TRUE(of_record.has_value());
  EXPECT_EQ(of_record->spent, 800);
  EXPECT_EQ(of_record->counted, BudgetCounted::kRecords);

  // The next admission seeds the period (from A's ledger: 500) and holds
  // its amount; the views show Redis's count again.
  hold(a(), alice_, "a2", 40);
  st = teamOf(b(), alice_);
  EXPECT_EQ(st.spent, 500);
  EXPECT_EQ(st.reserved, 40);
  EXPECT_EQ(st.counted, BudgetCounted::kShared);
}

TEST_F(RedisBudgetViewTest, RedisStoppedShowsThisReplicasOwnCountMarked) {
  setBudget(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal));
  spend(a(), alice_, "a1", 500);
  spend(b(), bob_, "b1", 300);
  EXPECT_EQ(teamOf(a(), alice_).counted, BudgetCounted::kShared);

  g_redis->stop();
  const auto start = std::chrono::steady_clock::now();
  BudgetStatus st = teamOf(a(), alice_);
  EXPECT_EQ(st.spent, 500);
  EXPECT_EQ(st.reserved, 0);
  EXPECT_EQ(st.limit, 10'000);
  EXPECT_EQ(st.counted, BudgetCounted::kReplicaOnly);
  // Cooling down after the failure: answered at once, without an attempt.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(teamOf(a(), alice_).counted, BudgetCounted::kReplicaOnly);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  const std::optional<BudgetStatus> bob = b().view->budgetOf(bob_, unixSeconds());
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(bob->spent, 300);
  EXPECT_EQ(bob->counted, BudgetCounted::kReplicaOnly);

  // Back, empty: after the cool-down the views read Redis again (nothing
  // seeded yet: each replica's own ledger).
  std::string error;
  ASSERT_TRUE(g_redis->start(&error)) << error;
  std::this_thread::sleep_for(150ms);
  st = teamOf(a(), alice_);
  EXPECT_EQ(st.counted, BudgetCounted::kReplicaLedger);
  EXPECT_EQ(st.spent, 500);
}

TEST_F(RedisBudgetViewTest, ConcurrentReadersShareTheConnections) {
  setBudget(BudgetScope::kTeam, "team-x", budget(10'000, BudgetPeriodSetting::kTotal));
  spend(a(), alice_, "a1", 500);
  spend(b(), bob_, "b1", 300);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto st = a().view->budgetOf(bob_, unixSeconds());
        if (!st || st->spent != 800 || st->counted != BudgetCounted::kShared) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace lg::billing::redis

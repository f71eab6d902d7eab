// Budgets and per-minute limits shared by replicas through a real, private
// redis-server (billing/redis/redis_limits.h; tests/support/redis_server.h),
// one per run of this binary, flushed before each test. Every "replica" is a
// RedisLimits of its own, with its own connection; they share the budget
// settings (Budgets over a real ledger in a temporary RocksDB store).
#include "billing/redis/redis_limits.h"

#include <signal.h>

#include <atomic>
#include <limits>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/redis/limit_scripts.h"
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

constexpr int64_t kJan1 = 1767225600;  // 2026-01-01T00:00:00Z (windows only: no key expires by it)
constexpr int64_t kDay = 86400;

BudgetSetting budget(int64_t limit, BudgetPeriodSetting period = BudgetPeriodSetting::kDay) {
  BudgetSetting b;
  b.enabled = true;
  b.limit = limit;
  b.period = period;
  b.soft_limit = limit;
  return b;
}

// An entry that cost exactly `cost` pico-dollars (output tokens at 1 each).
LedgerEntry entryCosting(const std::string& id, const Principal& who, int64_t start_s, int64_t cost) {
  LedgerEntry e;
  e.request_id = id;
  e.key_id = who.key_id;
  e.team = who.team;
  e.model = "demo";
  e.endpoint = "/v1/chat/completions";
  e.start_us = start_s * 1'000'000;
  e.end_us = e.start_us + 1000;
  e.output_tokens = cost;
  e.prices.rates = Rates{0, 0, 1};
  e.status = EntryStatus::kCompleted;
  e.price();
  return e;
}

LimitOutcome admitNow(AdmissionLimits& limits, const Principal& who, const std::string& id, std::optional<int64_t> cost,
                      int64_t tokens = 0, int64_t now_s = unixSeconds()) {
  std::promise<LimitOutcome> outcome;
  auto decided = outcome.get_future();
  limits.admit(LimitAsk{who, id, cost, tokens, now_s}, [&outcome](LimitOutcome o) { outcome.set_value(std::move(o)); });
  return decided.get();
}

bool granted(const LimitOutcome& o) { return std::holds_alternative<LimitGrant>(o); }

// Admission once Redis answers again. After an outage each replica waits
// out its retry interval (counted from its last failed attempt, which on a
// loaded machine can land later than a fixed sleep assumes); until then it
// answers LimitsUnavailable without asking Redis, which changes nothing, so
// asking again until the deadline is safe.
LimitOutcome admitOnceRedisAnswers(AdmissionLimits& limits, const Principal& who, const std::string& id,
                                   std::optional<int64_t> cost, int64_t tokens = 0, int64_t now_s = unixSeconds()) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    LimitOutcome o = admitNow(limits, who, id, cost, tokens, now_s);
    if (!std::holds_alternative<LimitsUnavailable>(o) || std::chrono::steady_clock::now() > deadline) return o;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Outcomes kept until the end of a test: a grant's reservation is released
// when it is destroyed, as a request's is when it ends.
class Held {
 public:
  bool granted(LimitOutcome o) {
    const bool g = std::holds_alternative<LimitGrant>(o);
    kept_.push_back(std::move(o));
    return g;
  }

 private:
  std::vector<LimitOutcome> kept_;
};

class RedisLimitsTest : public ::testing::Test {
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
    open({});
  }
  void TearDown() override {
    replicas_.clear();  // before the ledger and budgets they refer to
    ledger_.reset();
    budgets_.reset();
  }

  void open(BudgetOptions defaults) {
    replicas_.clear();
    ledger_.reset();
    budgets_.reset();
    db_.reset();
    auto db = BillingDb::open(dir_.file("billing"));
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto ledger = Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk());
    ledger_ = std::move(ledger).value();
    auto budgets = Budgets::open(*db_, *ledger_, defaults, unixSeconds());
    ASSERT_TRUE(budgets.isOk());
    budgets_ = std::move(budgets).value();
    source_ = std::make_unique<LedgerSpendSource>(*budgets_, *ledger_);
  }

  RedisLimitsOptions options() const {
    RedisLimitsOptions o;
    o.redis.url = g_redis->url();
    o.redis.retry_ms = 100;
    o.key_prefix = "lg:";
    return o;
  }
  RedisLimits& replica(RedisLimitsOptions o) {
    auto r = RedisLimits::start(std::move(o), *budgets_, *source_);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    replicas_.push_back(std::move(r).value());
    return *replicas_.back();
  }
  RedisLimits& replica() { return replica(options()); }

  std::string get(const RedisCommand& c) {
    auto r = redis_->command(c);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? r->str : "";
  }
  int64_t number(const RedisCommand& c) {
    auto r = redis_->command(c);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? r->asInt(-1) : -1;
  }
  std::string spentIn(const Principal& who, BudgetScope scope, BudgetPeriodSetting p, int64_t at_s) {
    return get({"HGET", keys_.spend(who.team, scope, who.key_id, p, budgetPeriodStart(p, at_s)), "spent"});
  }
  std::string reservedBy(const Principal& who, BudgetScope scope) {
    return get({"GET", keys_.heldSum(who.team, scope, who.key_id)});
  }

  test::TempDir dir_{"lg_redis_limits"};
  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Budgets> budgets_;
  std::unique_ptr<LedgerSpendSource> source_;
  std::vector<std::unique_ptr<RedisLimits>> replicas_;
  const LimitKeys keys_{"lg:"};
  const Principal alice_{"key_a", "team-x", "alice"};
  const Principal bob_{"key_b", "team-x", "bob"};
  const Principal carol_{"key_c", "team-y", "carol"};
};

TEST(RedisUrlTest, ParsesHostsSocketsAndCredentials) {
  auto e = parseRedisUrl("redis://:s3cr%40t@cache.internal:6380/2");
  ASSERT_TRUE(e.isOk()) << e.status().toString();
  EXPECT_EQ(e->host, "cache.internal");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->password, "s3cr@t");
  EXPECT_EQ(e->user, "");
  EXPECT_EQ(e->db, 2);
  e = parseRedisUrl("redis://lg:pw@[::1]");
  ASSERT_TRUE(e.isOk());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 6379);
  EXPECT_EQ(e->user, "lg");
  e = parseRedisUrl("unix:///run/redis/redis.sock?db=3");
  ASSERT_TRUE(e.isOk());
  EXPECT_EQ(e->unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(e->db, 3);
  EXPECT_FALSE(parseRedisUrl("rediss://host").isOk());  // no TLS in Debian's hiredis
  EXPECT_FALSE(parseRedisUrl("http://host").isOk());
  EXPECT_FALSE(parseRedisUrl("redis://host:99999").isOk());
  EXPECT_FALSE(parseRedisUrl("redis://").isOk());
}

TEST_F(RedisLimitsTest, AdmitsExactlyToTheBoundaryOfTheKeyAndTheTeamBudget) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  ASSERT_TRUE(budgets_->set(BudgetScope::kTeam, alice_.team, budget(1500)).isOk());
  RedisLimitsOptions o = options();
  o.rate.per_key.requests_per_minute = 100;
  RedisLimits& limits = replica(o);

  LimitOutcome a = admitNow(limits, alice_, "r1", 600);
  ASSERT_TRUE(granted(a));
  LimitOutcome b = admitNow(limits, alice_, "r2", 400);  // exactly the key's 1000
  ASSERT_TRUE(granted(b));
  LimitOutcome over = admitNow(limits, alice_, "r3", 1);
  ASSERT_TRUE(std::holds_alternative<BudgetRefusal>(over));
  const BudgetRefusal& by_key = std::get<BudgetRefusal>(over);
  EXPECT_EQ(by_key.budget.scope, "key");
  EXPECT_EQ(by_key.budget.limit, 1000);
  EXPECT_EQ(by_key.budget.reserved, 1000);
  EXPECT_EQ(by_key.budget.spent, 0);
  EXPECT_EQ(by_key.amount, 1);
  // Nothing was charged by the refusal: neither a reservation nor a request.
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), "1000");
  EXPECT_EQ(get({"GET", keys_.window(alice_.team, BudgetScope::kKey, alice_.key_id, 'r', unixSeconds() / 60 * 60)}),
            "2");
  EXPECT_EQ(number({"EXISTS", keys_.reservation(alice_.team, "r3")}), 0);
  EXPECT_EQ(number({"EXISTS", keys_.reservation(alice_.team, "r2")}), 1);

  // Bob, same team, no key budget: the team's 1500 has 500 left.
  Held held;
  ASSERT_TRUE(held.granted(admitNow(limits, bob_, "r4", 500)));
  LimitOutcome team_full = admitNow(limits, bob_, "r5", 1);
  ASSERT_TRUE(std::holds_alternative<BudgetRefusal>(team_full));
  EXPECT_EQ(std::get<BudgetRefusal>(team_full).budget.scope, "team");
  EXPECT_EQ(std::get<BudgetRefusal>(team_full).budget.reserved, 1500);
  // Carol's team has no budget at all.
  EXPECT_TRUE(held.granted(admitNow(limits, carol_, "r6", 1'000'000)));

  // Releasing gives the amount back to both.
  std::get<LimitGrant>(a).reservation.release();
  ASSERT_TRUE(limits.flush(5s));
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), "400");
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kTeam), "900");
  EXPECT_TRUE(granted(admitNow(limits, alice_, "r7", 600)));
}

TEST_F(RedisLimitsTest, AmountsPast2To53AreComparedExactly) {
  // 2^53 + 1 pico-dollars: a double would round it to 2^53.
  const int64_t big = (int64_t{1} << 53) + 1;
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(2 * big, BudgetPeriodSetting::kTotal)).isOk());
  RedisLimits& limits = replica();
  Held held;
  ASSERT_TRUE(held.granted(admitNow(limits, alice_, "r1", big)));
  ASSERT_TRUE(held.granted(admitNow(limits, alice_, "r2", big - 1)));
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, alice_, "r3", 2)));
  EXPECT_TRUE(held.granted(admitNow(limits, alice_, "r4", 1)));  // exactly 2 * big
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), std::to_string(2 * big));
  // At the largest budget the settings allow (1,000,000 USD: 10^18
  // pico-dollars, within a factor of 10 of int64's end).
  const int64_t huge = 1'000'000'000'000'000'000;
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, bob_.key_id, budget(huge, BudgetPeriodSetting::kTotal)).isOk());
  ASSERT_TRUE(held.granted(admitNow(limits, bob_, "r5", huge - 10)));
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, bob_, "r6", 11)));
  EXPECT_TRUE(held.granted(admitNow(limits, bob_, "r7", 10)));
}

TEST_F(RedisLimitsTest, SettlementCountsOncePerRequestIdAndDropsTheReservation) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kTeam, alice_.team, budget(1000)).isOk());
  RedisLimits& limits = replica();
  const int64_t now = unixSeconds();
  LimitOutcome a = admitNow(limits, alice_, "r1", 300, 0, now);
  ASSERT_TRUE(granted(a));
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kTeam), "300");
  // The ledger commits it (cost 200), twice: a settlement sent again.
  const LedgerEntry e = entryCosting("r1", alice_, now, 200);
  limits.committed(e);
  limits.committed(e);
  std::get<LimitGrant>(a).reservation.release();  // the commit's callback
  ASSERT_TRUE(limits.flush(5s));
  EXPECT_EQ(spentIn(alice_, BudgetScope::kTeam, BudgetPeriodSetting::kDay, now), "200");
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kTeam), "0");
  EXPECT_EQ(limits.liveReservations(), 0u);
  // Another replica sees it: 800 left.
  RedisLimits& other = replica();
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(other, bob_, "r2", 801, 0, now)));
  EXPECT_TRUE(granted(admitNow(other, bob_, "r3", 800, 0, now)));
  // Every period of both is counted once their counters exist: the key's
  // day was never seeded (no key budget), so it is left to a later seed.
  EXPECT_EQ(spentIn(alice_, BudgetScope::kKey, BudgetPeriodSetting::kDay, now), "");
}

TEST_F(RedisLimitsTest, ReplicasAdmittingConcurrentlyNeverPassTheBudget) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kTeam, "team-x", budget(1000)).isOk());
  constexpr int kReplicas = 4, kThreadsEach = 4, kTries = 20;
  std::vector<RedisLimits*> replicas;
  for (int i = 0; i < kReplicas; ++i) replicas.push_back(&replica());
  std::atomic<int> admitted{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  const int64_t now = unixSeconds();
  for (int r = 0; r < kReplicas; ++r) {
    for (int t = 0; t < kThreadsEach; ++t) {
      threads.emplace_back([&, r, t] {
        const Principal who{"key_" + std::to_string(t), "team-x", ""};
        for (int i = 0; i < kTries; ++i) {
          const std::string id = "r" + std::to_string(r) + "-" + std::to_string(t) + "-" + std::to_string(i);
          LimitOutcome o = admitNow(*replicas[r], who, id, 7, 0, now);
          if (std::holds_alternative<BudgetRefusal>(o)) {
            ++refused;
          } else if (!granted(o)) {
            ++other;
          } else {
            // Each costs its whole reservation: settled, then released, as
            // the ledger's commit does.
            ++admitted;
            replicas[r]->committed(entryCosting(id, who, now, 7));
            std::get<LimitGrant>(o).reservation.release();
          }
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  for (RedisLimits* r : replicas) ASSERT_TRUE(r->flush(10s));
  // 16 threads on 4 replicas, 320 tries of 7 against 1,000: exactly 142 fit,
  // and what was spent is exactly theirs.
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(admitted.load(), 1000 / 7);
  EXPECT_EQ(refused.load(), kReplicas * kThreadsEach * kTries - 1000 / 7);
  const Principal team{"", "team-x", ""};
  EXPECT_EQ(spentIn(team, BudgetScope::kTeam, BudgetPeriodSetting::kDay, now), std::to_string(1000 / 7 * 7));
  EXPECT_EQ(reservedBy(team, BudgetScope::kTeam), "0");
}

TEST_F(RedisLimitsTest, ADeadReplicasReservationExpiresAndFreesTheBudget) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimitsOptions dead = options();
  dead.reservation_ttl = 300ms;
  dead.refresh_every = 0ms;  // it never comes back to extend it
  RedisLimits& gone = replica(dead);
  LimitOutcome held = admitNow(gone, alice_, "r1", 1000);
  ASSERT_TRUE(granted(held));
  RedisLimits& alive = replica();
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(alive, alice_, "r2", 1)));
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(granted(admitNow(alive, alice_, "r3", 1000)));
}

TEST_F(RedisLimitsTest, ALiveReservationIsRefreshedAndPutBackAfterAFlush) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimitsOptions o = options();
  o.reservation_ttl = 300ms;
  o.refresh_every = 50ms;
  RedisLimits& running = replica(o);
  LimitOutcome held = admitNow(running, alice_, "r1", 1000);
  ASSERT_TRUE(granted(held));
  RedisLimits& other = replica();
  std::this_thread::sleep_for(600ms);  // twice the TTL: only the refresh keeps it
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(other, alice_, "r2", 1)));
  ASSERT_TRUE(redis_->command({"FLUSHALL"}).isOk());
  // The next refresh (every 50 ms, later on a loaded machine) puts the
  // reservation back.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reservedBy(alice_, BudgetScope::kKey) != "1000" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), "1000");
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(other, alice_, "r3", 1)));
  std::get<LimitGrant>(held).reservation.release();
  ASSERT_TRUE(running.flush(5s));
  EXPECT_TRUE(granted(admitNow(other, alice_, "r4", 1000)));
}

TEST_F(RedisLimitsTest, ANewPeriodIsANewKey) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimits& limits = replica();
  // Today and tomorrow: a period's counter expires a day after its end.
  const int64_t today = budgetPeriodStart(BudgetPeriodSetting::kDay, unixSeconds());
  const int64_t day1 = today + 60, day2 = today + kDay + 60;
  LimitOutcome a = admitNow(limits, alice_, "r1", 1000, 0, day1);
  ASSERT_TRUE(granted(a));
  limits.committed(entryCosting("r1", alice_, day1, 1000));
  std::get<LimitGrant>(a).reservation.release();
  ASSERT_TRUE(limits.flush(5s));
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, alice_, "r2", 1, 0, day1 + 60)));
  // The next day is another key, never a reset of this one.
  Held held;
  EXPECT_TRUE(held.granted(admitNow(limits, alice_, "r3", 1000, 0, day2)));
  EXPECT_EQ(spentIn(alice_, BudgetScope::kKey, BudgetPeriodSetting::kDay, day1), "1000");
  EXPECT_EQ(spentIn(alice_, BudgetScope::kKey, BudgetPeriodSetting::kDay, day2), "0");
}

TEST_F(RedisLimitsTest, LostCountersAreRebuiltFromTheLedgerWithoutABypass) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kTeam, alice_.team, budget(1000, BudgetPeriodSetting::kMonth)).isOk());
  RedisLimits& limits = replica();
  ledger_->addObserver(&limits);  // after Budgets, as the server does
  const int64_t now = unixSeconds();
  for (int i = 0; i < 3; ++i) {
    const std::string id = "r" + std::to_string(i);
    LimitOutcome o = admitNow(limits, alice_, id, 200, 0, now);
    ASSERT_TRUE(granted(o));
    auto reservation = std::make_shared<BudgetReservation>(std::move(std::get<LimitGrant>(o).reservation));
    std::promise<Status> done;
    ledger_->commit(entryCosting(id, alice_, now, 200), std::nullopt, [&, reservation](Status s) {
      reservation->release();
      done.set_value(std::move(s));
    });
    ASSERT_TRUE(done.get_future().get().isOk());
  }
  ASSERT_TRUE(limits.flush(5s));
  EXPECT_EQ(spentIn(alice_, BudgetScope::kTeam, BudgetPeriodSetting::kMonth, now), "600");

  // Redis loses everything (a restart without persistence, a FLUSHALL).
  ASSERT_TRUE(redis_->command({"FLUSHALL"}).isOk());
  RedisLimits& other = replica();
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(other, bob_, "r9", 401, 0, now)));
  EXPECT_EQ(spentIn(alice_, BudgetScope::kTeam, BudgetPeriodSetting::kMonth, now), "600");
  Held held;
  EXPECT_TRUE(held.granted(admitNow(other, bob_, "r10", 400, 0, now)));
  metrics::ExpositionWriter w;
  other.collect(w);
  EXPECT_NE(w.text().find("latentgate_redis_seeds_total 1"), std::string::npos) << w.text();
  // A replica that raced to seed the same period (its seed read before the
  // first one landed) adds nothing: the first seed won.
  LimitScripts scripts;
  redis_->addScript(&scripts.admit);
  const int64_t month = budgetPeriodStart(BudgetPeriodSetting::kMonth, now);
  auto late = redis_->command(scripts.admit.call(
      {keys_.reservation(alice_.team, "late"), keys_.spend(alice_.team, BudgetScope::kTeam, "", BudgetPeriodSetting::kMonth, month),
       keys_.held(alice_.team, BudgetScope::kTeam, ""), keys_.heldSum(alice_.team, BudgetScope::kTeam, "")},
      {"late", "0", "1000", "1", "t", "1000", "555", "0", "0"}));
  ASSERT_TRUE(late.isOk());
  EXPECT_EQ(spentIn(alice_, BudgetScope::kTeam, BudgetPeriodSetting::kMonth, now), "600");
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, alice_, "r11", 1, 0, now)));
}

// Admissions are written as they come, whatever is still awaited on the
// connection, and each is answered by its own reply: many at once from many
// threads all get theirs, each reservation counted once.
TEST_F(RedisLimitsTest, ManyAdmissionsInFlightAtOnceAreEachAnsweredByTheirOwnReply) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1'000'000)).isOk());
  RedisLimits& limits = replica();
  constexpr int kThreads = 8, kEach = 50;
  std::vector<std::promise<LimitOutcome>> outcomes(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int n = t * kEach + i;
        limits.admit(LimitAsk{alice_, "m" + std::to_string(n), 7, 0, unixSeconds()},
                     [&outcomes, n](LimitOutcome o) { outcomes[n].set_value(std::move(o)); });
      }
    });
  }
  for (auto& t : threads) t.join();
  Held held;
  for (auto& o : outcomes) {
    auto f = o.get_future();
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    ASSERT_TRUE(held.granted(f.get()));
  }
  EXPECT_EQ(limits.liveReservations(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), std::to_string(7 * kThreads * kEach));
}

// A Redis that stops answering (SIGSTOP) is given up on after the command
// timeout: the admission awaiting it fails closed, in about that time, and
// the next ones are decided at once until the retry; once it answers again,
// so does admission.
TEST_F(RedisLimitsTest, AHungRedisTimesOutAndAdmissionFailsClosedUntilItAnswers) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimitsOptions o = options();
  o.redis.command_timeout_ms = 200;
  o.redis.retry_ms = 300;
  RedisLimits& limits = replica(o);
  Held held;
  ASSERT_TRUE(held.granted(admitNow(limits, alice_, "h1", 10)));
  ASSERT_EQ(::kill(g_redis->pid(), SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  LimitOutcome hung = admitNow(limits, alice_, "h2", 10);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(std::holds_alternative<LimitsUnavailable>(hung));
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 2s);
  EXPECT_EQ(limits.state(), RedisState::kDown);
  EXPECT_TRUE(std::holds_alternative<LimitsUnavailable>(admitNow(limits, alice_, "h3", 10)));
  ASSERT_EQ(::kill(g_redis->pid(), SIGCONT), 0);
  LimitOutcome after = admitOnceRedisAnswers(limits, alice_, "h4", 10);
  EXPECT_TRUE(held.granted(std::move(after))) << "still refused after Redis answered again";
  EXPECT_EQ(limits.state(), RedisState::kUp);
}

// A long outage: settlements wait up to their bound and the rest are
// dropped; when Redis answers again, the spend they missed is deleted and
// seeded again from the ledger, so every entry counts. Redis hangs here
// (SIGSTOP) rather than restarting empty, so it keeps the spend counted
// before the outage, as it would for replicas that still reach it.
TEST_F(RedisLimitsTest, SettlementsDroppedPastTheQueuesBoundAreRecoveredFromTheLedger) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimitsOptions o = options();
  o.max_queued_operations = 3;
  o.redis.command_timeout_ms = 100;
  RedisLimits& limits = replica(o);
  ledger_->addObserver(&limits);
  const int64_t now = unixSeconds();
  Held held;
  ASSERT_TRUE(held.granted(admitNow(limits, alice_, "s0", 10, 0, now)));  // seeds alice's day at 0
  ASSERT_EQ(::kill(g_redis->pid(), SIGSTOP), 0);
  for (int i = 1; i <= 6; ++i) {
    std::promise<Status> committed;
    ledger_->commit(entryCosting("s" + std::to_string(i), alice_, now, 100), std::nullopt,
                    [&](Status s) { committed.set_value(std::move(s)); });
    ASSERT_TRUE(committed.get_future().get().isOk());
  }
  EXPECT_EQ(limits.pendingOperations(), 3u);
  metrics::ExpositionWriter w;
  limits.collect(w);
  EXPECT_NE(w.text().find("latentgate_redis_dropped_operations_total 3"), std::string::npos) << w.text();

  ASSERT_EQ(::kill(g_redis->pid(), SIGCONT), 0);
  std::this_thread::sleep_for(150ms);  // past the retry interval
  ASSERT_TRUE(limits.flush(5s));
  // The ledger holds 600 and s0 holds 10: 390 left of 1000. Without the
  // reseed Redis would count only the three settlements it received (300).
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, alice_, "over", 391, 0, now)));
  EXPECT_TRUE(held.granted(admitNow(limits, alice_, "fits", 390, 0, now)));
  EXPECT_EQ(spentIn(alice_, BudgetScope::kKey, BudgetPeriodSetting::kDay, now), "600");
}

TEST_F(RedisLimitsTest, RedisAwayRefusesBudgetsAndFallsBackToTheReplicasShareOfRateLimits) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimitsOptions o = options();
  o.rate.per_key.requests_per_minute = 10;
  o.fallback_replicas = 2;  // each replica may admit 5 a minute alone
  RedisLimits& limits = replica(o);
  ledger_->addObserver(&limits);
  const int64_t now = unixSeconds();
  LimitOutcome before = admitNow(limits, alice_, "r1", 100, 0, now);
  ASSERT_TRUE(granted(before));
  EXPECT_EQ(limits.state(), RedisState::kUp);

  g_redis->stop();
  // A request admitted before commits while Redis is away: its settlement
  // (which also drops its reservation) waits for Redis; the ledger does not.
  auto reservation = std::make_shared<BudgetReservation>(std::move(std::get<LimitGrant>(before).reservation));
  std::promise<Status> committed;
  ledger_->commit(entryCosting("r1", alice_, now, 100), std::nullopt, [&, reservation](Status s) {
    reservation->release();
    committed.set_value(std::move(s));
  });
  ASSERT_TRUE(committed.get_future().get().isOk());
  LimitOutcome budgeted = admitNow(limits, alice_, "r2", 100, 0, now);
  ASSERT_TRUE(std::holds_alternative<LimitsUnavailable>(budgeted));
  EXPECT_GE(std::get<LimitsUnavailable>(budgeted).retry_after_s, 1);
  EXPECT_EQ(limits.state(), RedisState::kDown);
  EXPECT_EQ(limits.pendingOperations(), 1u);  // the settlement, which drops the reservation too
  // Bob has no budget: his requests run under this replica's share.
  int allowed = 0;
  for (int i = 0; i < 8; ++i) {
    LimitOutcome r = admitNow(limits, bob_, "b" + std::to_string(i), 50, 0, now);
    if (granted(r)) {
      ++allowed;
    } else {
      ASSERT_TRUE(std::holds_alternative<RateDecision>(r));
      EXPECT_STREQ(std::get<RateDecision>(r).exhausted, "requests");
    }
  }
  EXPECT_EQ(allowed, 5);
  metrics::ExpositionWriter w;
  limits.collect(w);
  EXPECT_NE(w.text().find("latentgate_redis_up 0"), std::string::npos);
  EXPECT_NE(w.text().find("latentgate_redis_admissions_total{outcome=\"unavailable\"} 1"), std::string::npos)
      << w.text();
  EXPECT_NE(w.text().find("latentgate_redis_admissions_total{outcome=\"fallback\"} 8"), std::string::npos);

  // Back, empty, on the same port: the queued settlement goes first (its
  // period not seeded yet, it leaves it alone), then the admission seeds the
  // period from the ledger, which holds r1's 100.
  std::string error;
  ASSERT_TRUE(g_redis->start(&error)) << error;
  LimitOutcome after = admitOnceRedisAnswers(limits, alice_, "r3", 900, 0, now);
  ASSERT_TRUE(granted(after)) << "still refused after Redis returned";
  EXPECT_EQ(limits.state(), RedisState::kUp);
  ASSERT_TRUE(limits.flush(5s));
  EXPECT_EQ(limits.pendingOperations(), 0u);
  EXPECT_EQ(spentIn(alice_, BudgetScope::kKey, BudgetPeriodSetting::kDay, now), "100");
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(admitNow(limits, alice_, "r4", 1, 0, now)));
}

TEST_F(RedisLimitsTest, FixedWindowsPerKeyAndTeamForRequestsAndTokens) {
  std::atomic<int64_t> clock{kJan1 + 10};
  RedisLimitsOptions o = options();
  o.rate.per_key = {3, 0};
  o.rate.per_team = {0, 100};
  o.clock_s = [&clock] { return clock.load(); };
  RedisLimits& a = replica(o);
  RedisLimits& b = replica(o);
  ASSERT_TRUE(granted(admitNow(a, alice_, "r1", std::nullopt, 10)));
  ASSERT_TRUE(granted(admitNow(b, alice_, "r2", std::nullopt, 10)));
  LimitOutcome third = admitNow(a, alice_, "r3", std::nullopt, 10);
  ASSERT_TRUE(granted(third));
  EXPECT_EQ(std::get<LimitGrant>(third).rate.requests.remaining, 0);
  EXPECT_EQ(std::get<LimitGrant>(third).rate.tokens.remaining, 70);
  LimitOutcome fourth = admitNow(b, alice_, "r4", std::nullopt, 10);
  ASSERT_TRUE(std::holds_alternative<RateDecision>(fourth));
  const RateDecision& d = std::get<RateDecision>(fourth);
  EXPECT_STREQ(d.exhausted, "requests");
  EXPECT_STREQ(d.subject, "key");
  EXPECT_DOUBLE_EQ(d.retry_after_s, 50);  // the window ends at :60
  // Tokens: the team's 100 a minute, shared by its keys; 70 left.
  LimitOutcome big = admitNow(a, bob_, "r5", std::nullopt, 71);
  ASSERT_TRUE(std::holds_alternative<RateDecision>(big));
  EXPECT_STREQ(std::get<RateDecision>(big).exhausted, "tokens");
  EXPECT_STREQ(std::get<RateDecision>(big).subject, "team");
  // A request that used 10 of 60 gives 50 back, in the same window.
  LimitOutcome sixty = admitNow(a, bob_, "r6", std::nullopt, 60);
  ASSERT_TRUE(granted(sixty));
  a.giveBack(bob_, std::get<LimitGrant>(sixty).charge, 10);
  ASSERT_TRUE(a.flush(5s));
  EXPECT_TRUE(granted(admitNow(b, bob_, "r7", std::nullopt, 60)));
  EXPECT_TRUE(std::holds_alternative<RateDecision>(admitNow(b, bob_, "r8", std::nullopt, 1)));
  // Larger than a whole minute: never fits, no retry.
  LimitOutcome never = admitNow(a, carol_, "r9", std::nullopt, 101);
  ASSERT_TRUE(std::holds_alternative<RateDecision>(never));
  EXPECT_LT(std::get<RateDecision>(never).retry_after_s, 0);
  // The next minute is a new window; a give-back into the old one is dropped.
  clock = kJan1 + 60;
  a.giveBack(alice_, std::get<LimitGrant>(third).charge, 0);
  ASSERT_TRUE(a.flush(5s));
  EXPECT_TRUE(granted(admitNow(b, alice_, "r10", std::nullopt, 10)));
  EXPECT_EQ(get({"GET", keys_.window(alice_.team, BudgetScope::kTeam, "", 't', kJan1 + 60)}), "10");
}

TEST_F(RedisLimitsTest, ScriptsFlushedFromRedisAreLoadedAgain) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimits& limits = replica();
  Held held;
  ASSERT_TRUE(held.granted(admitNow(limits, alice_, "r1", 10)));
  ASSERT_TRUE(redis_->command({"SCRIPT", "FLUSH"}).isOk());  // NOSCRIPT for the next EVALSHA
  EXPECT_TRUE(held.granted(admitNow(limits, alice_, "r2", 10)));
  EXPECT_EQ(reservedBy(alice_, BudgetScope::kKey), "20");
}

TEST_F(RedisLimitsTest, NothingToCheckNeverAsksRedis) {
  RedisLimits& limits = replica();
  g_redis->stop();
  // No budget applies and no rate limit is configured: admitted at once.
  EXPECT_TRUE(granted(admitNow(limits, alice_, "r1", 100)));
  EXPECT_TRUE(granted(admitNow(limits, alice_, "r2", std::nullopt)));
  EXPECT_EQ(limits.state(), RedisState::kStarting);
}

TEST_F(RedisLimitsTest, StopAdmittingAnswersWhatIsQueuedAndRefusesTheRest) {
  ASSERT_TRUE(budgets_->set(BudgetScope::kKey, alice_.key_id, budget(1000)).isOk());
  RedisLimits& limits = replica();
  std::vector<std::future<LimitOutcome>> outcomes;
  std::vector<std::unique_ptr<std::promise<LimitOutcome>>> promises;
  for (int i = 0; i < 20; ++i) {
    promises.push_back(std::make_unique<std::promise<LimitOutcome>>());
    outcomes.push_back(promises.back()->get_future());
    limits.admit(LimitAsk{alice_, "r" + std::to_string(i), 10, 0, unixSeconds()},
                 [p = promises.back().get()](LimitOutcome o) { p->set_value(std::move(o)); });
  }
  limits.stopAdmitting();
  for (auto& f : outcomes) EXPECT_EQ(f.wait_for(0s), std::future_status::ready);
  EXPECT_TRUE(std::holds_alternative<LimitsUnavailable>(admitNow(limits, alice_, "late", 10)));
}

}  // namespace
}  // namespace lg::billing::redis

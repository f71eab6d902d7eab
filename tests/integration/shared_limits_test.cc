// Two servers, as two replicas of `latentgate serve`, sharing one real
// private redis-server through limits.redis_url (docs/billing.md, "Budgets
// and limits shared by replicas"): what one replica spends, the other's
// admission sees; with Redis stopped a budgeted request is 503
// budget_store_unavailable while /readyz stays ready and says so, and
// /metrics shows it; when Redis returns, requests are admitted again. And
// what the budget views show (/v1/usage's budget, /user/balance, the admin
// budget API, the dashboard): on each replica, the spending of both; with
// Redis stopped, this replica's own count marked "replica_only" (the
// balance: 503); with Redis back empty, this replica's ledger, marked.
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/metering.h"
#include "billing/prices.h"
#include "common/unix_time.h"
#include "tests/integration/harness.h"
#include "tests/support/redis_server.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

class SharedLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    redis_ = test::RedisServer::create(&error);
    ASSERT_NE(redis_, nullptr) << error;
    for (auto* replica : {&a_, &b_}) {
      test::HarnessOptions options;
      options.config.limits.redis_url = redis_->url();
      options.config.limits.redis_retry_ms = 100;
      auto started = test::Harness::start(std::move(options));
      ASSERT_TRUE(started.isOk()) << started.status().toString();
      *replica = std::move(started).value();
    }
    key_a_ = a_->newKey("team-a");
    key_b_ = b_->newKey("team-a");  // another key of the same team, on the other replica
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    redis_.reset();
  }

  // The team's budget, set alike on both replicas (its settings are each
  // replica's own; what it counts is shared).
  void setTeamBudget(int64_t limit) {
    BudgetSetting b;
    b.enabled = true;
    b.limit = limit;
    b.period = BudgetPeriodSetting::kTotal;
    b.soft_limit = limit;
    for (auto* h : {a_.get(), b_.get()}) {
      ASSERT_TRUE(h->server().budgets().set(billing::BudgetScope::kTeam, "team-a", b).isOk());
    }
  }
  static json chat() {
    return {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", "Count to three"}}}}, {"max_tokens", 4}};
  }
  static std::string metricsOf(test::Harness& h) { return h.call("GET", "/metrics", h.adminKey()).body; }
  // Until the replica has nothing left to send to Redis.
  static bool settled(test::Harness& h) {
    for (int i = 0; i < 500; ++i) {
      if (metricsOf(h).find("latentgate_redis_pending_operations 0\n") != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  // Signs in to `h`'s dashboard with `key`; its overview.
  static json overviewOf(test::Harness& h, const std::string& key) {
    auto signed_in = h.call("POST", "/dashboard/session", "", json{{"key", key}});
    const std::string cookie = signed_in.header("set-cookie").value_or("");
    EXPECT_EQ(signed_in.status, 200) << signed_in.body;
    auto overview = h.call("GET", "/dashboard/api/overview?range=24h", "", nullptr,
                           {"-H", "Cookie: " + cookie.substr(0, cookie.find(';'))});
    EXPECT_EQ(overview.status, 200) << overview.body;
    return json::parse(overview.body);
  }

  std::unique_ptr<test::RedisServer> redis_;
  std::unique_ptr<test::Harness> a_, b_;
  std::string key_a_, key_b_;
};

TEST_F(SharedLimitsTest, WhatOneReplicaSpendsTheOtherSeesAndRedisAwayIs503) {
  setTeamBudget(1'000'000'000'000);  // $1: room for the first request
  auto first = a_->call("POST", "/v1/chat/completions", key_a_, chat());
  ASSERT_EQ(first.status, 200) << first.body;
  const std::optional<billing::LedgerEntry> spent = a_->ledgerEntry(first.header("x-request-id").value_or(""));
  ASSERT_TRUE(spent.has_value());
  ASSERT_GT(spent->cost.total(), 0);
  ASSERT_TRUE(settled(*a_));
  // The same request on replica B reserves its prompt at the miss rate and
  // its 4 tokens at the output rate: a budget one pico-dollar short of A's
  // spend plus that refuses it, which B's own ledger (empty) could not know.
  const int64_t reservation = billing::maxCost(spent->prices.rates, spent->prompt_tokens, 4);
  setTeamBudget(spent->cost.total() + reservation - 1);
  auto refused = b_->call("POST", "/v1/chat/completions", key_b_, chat());
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "insufficient_quota");
  setTeamBudget(spent->cost.total() + reservation);
  auto fits = b_->call("POST", "/v1/chat/completions", key_b_, chat());
  EXPECT_EQ(fits.status, 200) << fits.body;
  EXPECT_NE(metricsOf(*b_).find("latentgate_redis_admissions_total{outcome=\"over_budget\"} 1"), std::string::npos);

  // Redis away: a budgeted request is refused, the replica stays ready.
  redis_->stop();
  setTeamBudget(1'000'000'000'000);
  auto away = b_->call("POST", "/v1/chat/completions", key_b_, chat());
  EXPECT_EQ(away.status, 503) << away.body;
  EXPECT_EQ(json::parse(away.body)["error"]["code"], "budget_store_unavailable");
  EXPECT_TRUE(away.header("retry-after").has_value());
  auto ready = b_->call("GET", "/readyz", "");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body)["redis"], "down") << ready.body;
  EXPECT_NE(metricsOf(*b_).find("latentgate_redis_up 0"), std::string::npos);

  // Back (empty): admitted again. Its counters are rebuilt from B's own
  // ledger, which knows only B's requests (docs/billing.md, "The residual
  // windows"), so this test does not check A's spend survived.
  std::string error;
  ASSERT_TRUE(redis_->start(&error)) << error;
  std::this_thread::sleep_for(200ms);
  auto back = b_->call("POST", "/v1/chat/completions", key_b_, chat());
  EXPECT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(json::parse(b_->call("GET", "/readyz", "").body)["redis"], "up");
}

TEST_F(SharedLimitsTest, BudgetViewsShowWhatEveryReplicaSpent) {
  const int64_t limit = 1'000'000'000'000;  // $1
  setTeamBudget(limit);
  auto on_a = a_->call("POST", "/v1/chat/completions", key_a_, chat());
  ASSERT_EQ(on_a.status, 200) << on_a.body;
  auto on_b = b_->call("POST", "/v1/chat/completions", key_b_, chat());
  ASSERT_EQ(on_b.status, 200) << on_b.body;
  const auto entry_a = a_->ledgerEntry(on_a.header("x-request-id").value_or(""));
  const auto entry_b = b_->ledgerEntry(on_b.header("x-request-id").value_or(""));
  ASSERT_TRUE(entry_a && entry_b);
  ASSERT_TRUE(settled(*a_));
  ASSERT_TRUE(settled(*b_));
  const Int128 spent_a = entry_a->cost.total(), spent_b = entry_b->cost.total();
  const std::string both = billing::usd(spent_a + spent_b);

  for (auto [h, key] : {std::pair{a_.get(), key_a_}, std::pair{b_.get(), key_b_}}) {
    SCOPED_TRACE(h == a_.get() ? "replica A" : "replica B");
    const json budget = json::parse(h->call("GET", "/v1/usage", key).body)["budget"];
    EXPECT_EQ(budget["scope"], "team");
    EXPECT_EQ(budget["spent"], both) << budget;
    EXPECT_EQ(budget["reserved"], billing::usd(0));
    EXPECT_EQ(budget["remaining"], billing::usd(Int128{limit} - spent_a - spent_b));
    EXPECT_EQ(budget["counted"], "shared");
    const json balance = json::parse(h->call("GET", "/user/balance", key).body);
    EXPECT_EQ(balance["balance_infos"][0]["total_balance"], billing::usdCents(Int128{limit} - spent_a - spent_b));
    const json team = json::parse(h->call("GET", "/admin/budgets/teams/team-a", h->adminKey()).body);
    EXPECT_EQ(team["status"]["spent"], both) << team;
    EXPECT_EQ(team["status"]["counted"], "shared");
    const json list = json::parse(h->call("GET", "/admin/budgets", h->adminKey()).body);
    ASSERT_FALSE(list["data"].empty()) << list;
    for (const json& row : list["data"]) EXPECT_EQ(row["status"]["spent"], both) << row;
    const json overview = overviewOf(*h, key);
    EXPECT_EQ(overview["budget"]["spent"], both);
    EXPECT_EQ(overview["keys"][0]["budget"]["spent"], both);
    // Its per-minute limits are Redis's, not this replica's buckets.
    EXPECT_EQ(overview["keys"][0]["rate_limits"], json({{"shared", true}})) << overview["keys"][0].dump();
  }
  // Each replica's own count, all the views had before.
  EXPECT_EQ(a_->server().budgets().statusOf(billing::BudgetScope::kTeam, "team-a", unixSeconds())->spent, spent_a);

  // Redis away: this replica's own count, marked; no balance it cannot know.
  redis_->stop();
  const json away = json::parse(a_->call("GET", "/v1/usage", key_a_).body)["budget"];
  EXPECT_EQ(away["spent"], billing::usd(spent_a));
  EXPECT_EQ(away["counted"], "replica_only");
  auto balance = b_->call("GET", "/user/balance", key_b_);
  EXPECT_EQ(balance.status, 503) << balance.body;
  EXPECT_EQ(json::parse(balance.body)["error"]["code"], "budget_store_unavailable");
  EXPECT_TRUE(balance.header("retry-after").has_value());
  const json team = json::parse(b_->call("GET", "/admin/budgets/teams/team-a", b_->adminKey()).body);
  EXPECT_EQ(team["status"]["spent"], billing::usd(spent_b));
  EXPECT_EQ(team["status"]["counted"], "replica_only");

  // Back, empty (as after FLUSHALL): not seeded, so spent is the spend
  // source's, each replica's own ledger without PostgreSQL, named so.
  std::string error;
  ASSERT_TRUE(redis_->start(&error)) << error;
  std::this_thread::sleep_for(200ms);
  const json back = json::parse(b_->call("GET", "/v1/usage", key_b_).body)["budget"];
  EXPECT_EQ(back["spent"], billing::usd(spent_b));
  EXPECT_EQ(back["counted"], "replica_ledger");
  EXPECT_EQ(b_->call("GET", "/user/balance", key_b_).status, 200);
}

}  // namespace
}  // namespace lg::proxy

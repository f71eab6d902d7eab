// Two servers, as two replicas of `latentgate serve`, sharing one real
// private redis-server through limits.redis_url (docs/billing.md, "Budgets
// and limits shared by replicas"): what one replica spends, the other's
// admission sees; with Redis stopped a budgeted request is 503
// budget_store_unavailable while /readyz stays ready and says so, and
// /metrics shows it; when Redis returns, requests are admitted again.
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/metering.h"
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

}  // namespace
}  // namespace lg::proxy

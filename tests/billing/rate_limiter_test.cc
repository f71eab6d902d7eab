// RateLimiter: token buckets per key and team, requests and tokens per minute.
#include "billing/rate_limiter.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace lg::billing {
namespace {

using namespace std::chrono_literals;
using Clock = RateLimiter::Clock;

RateLimitOptions keyLimits(int64_t rpm, int64_t tpm) {
  RateLimitOptions o;
  o.per_key = {rpm, tpm};
  return o;
}

TEST(RateLimiterTest, AMinuteOfBurstThenTheSteadyRate) {
  RateLimiter limiter(keyLimits(60, 0));
  const auto t0 = Clock::now();
  for (int i = 0; i < 60; ++i) {
    RateDecision d = limiter.admit("k1", "team", 10, t0);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.requests.limit, 60);
    EXPECT_EQ(d.requests.remaining, 59 - i);
  }
  RateDecision refused = limiter.admit("k1", "team", 10, t0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_STREQ(refused.exhausted, "requests");
  EXPECT_STREQ(refused.subject, "key");
  EXPECT_NEAR(refused.retry_after_s, 1.0, 1e-9);  // one request per second refills
  EXPECT_NEAR(refused.requests.reset_s, 60.0, 1e-9);
  EXPECT_FALSE(limiter.admit("k1", "team", 10, t0 + 999ms).allowed);
  EXPECT_TRUE(limiter.admit("k1", "team", 10, t0 + 1000ms).allowed);
  // Other keys have their own buckets.
  EXPECT_TRUE(limiter.admit("k2", "team", 10, t0).allowed);
  EXPECT_NE(RateLimiter::describe(refused, limiter.options()).find("60 requests per minute"), std::string::npos);
}

TEST(RateLimiterTest, TheTeamBucketIsSharedAndARefusalChargesNothing) {
  RateLimitOptions o;
  o.per_key = {0, 1000};
  o.per_team = {0, 1500};
  RateLimiter limiter(o);
  const auto t0 = Clock::now();
  EXPECT_TRUE(limiter.admit("a", "t", 900, t0).allowed);
  // Key b fits its own 1000, but the team has 600 left.
  RateDecision d = limiter.admit("b", "t", 700, t0);
  EXPECT_FALSE(d.allowed);
  EXPECT_STREQ(d.exhausted, "tokens");
  EXPECT_STREQ(d.subject, "team");
  EXPECT_NEAR(d.retry_after_s, 100.0 * 60 / 1500, 1e-9);
  EXPECT_EQ(d.tokens.remaining, 600);  // the tighter of key b (1000) and team (600)
  // Nothing was taken from key b by the refusal: it still has 1000 for itself.
  EXPECT_TRUE(limiter.admit("b", "t", 600, t0).allowed);
  EXPECT_FALSE(limiter.admit("c", "t", 1, t0).allowed);
}

TEST(RateLimiterTest, SettleGivesBackWhatWasNotUsed) {
  RateLimiter limiter(keyLimits(0, 1000));
  const auto t0 = Clock::now();
  ASSERT_TRUE(limiter.admit("k", "t", 800, t0).allowed);  // prompt 100 + max_tokens 700
  EXPECT_FALSE(limiter.admit("k", "t", 300, t0).allowed);
  limiter.settle("k", "t", 800, 150, t0);  // it used 150
  RateDecision d = limiter.admit("k", "t", 300, t0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.tokens.remaining, 1000 - 150 - 300);
  limiter.settle("k", "t", 300, 5000, t0);  // used more than reserved: no refund, no underflow
  EXPECT_EQ(limiter.admit("k", "t", 0, t0).tokens.remaining, 550);
}

TEST(RateLimiterTest, ARequestLargerThanTheBucketNeverFits) {
  RateLimiter limiter(keyLimits(0, 1000));
  RateDecision d = limiter.admit("k", "t", 1001);
  EXPECT_FALSE(d.allowed);
  EXPECT_LT(d.retry_after_s, 0);
  EXPECT_NE(RateLimiter::describe(d, limiter.options()).find("Request too large"), std::string::npos);
}

TEST(RateLimiterTest, UnlimitedByDefault) {
  RateLimiter limiter({});
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(limiter.admit("k", "t", 1 << 20).allowed);
  EXPECT_EQ(limiter.admit("k", "t", 1).requests.limit, 0);  // no headers
}

// 64 threads race for one key's bucket: at one instant exactly the limit is
// admitted; over real time, never more than the limit plus the refill.
TEST(RateLimiterTest, ConcurrentRequestsNeverOvershoot) {
  {
    RateLimiter limiter(keyLimits(500, 0));
    const auto t0 = Clock::now();
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 64; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 50; ++i) admitted += limiter.admit("k", "team", 1, t0).allowed;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(admitted.load(), 500);
  }
  {
    RateLimitOptions o;
    o.per_team = {6000, 0};  // 100 per second
    RateLimiter limiter(o);
    std::atomic<int> admitted{0};
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < 64; ++t) {
      threads.emplace_back([&, t] {
        while (Clock::now() - start < 300ms) admitted += limiter.admit("key" + std::to_string(t), "team", 1).allowed;
      });
    }
    for (auto& t : threads) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(admitted.load(), 6000);
    EXPECT_LE(admitted.load(), 6000 + static_cast<int>(100 * elapsed) + 1);
  }
}

TEST(RateLimiterTest, ResetDurationsLookLikeOpenAis) {
  EXPECT_EQ(resetDuration(0), "0s");
  EXPECT_EQ(resetDuration(0.12), "120ms");
  EXPECT_EQ(resetDuration(1), "1s");
  EXPECT_EQ(resetDuration(59.2), "1m0s");
  EXPECT_EQ(resetDuration(360), "6m0s");
  EXPECT_EQ(resetDuration(61.5), "1m2s");
}

// What the dashboard shows of a key's limits: peek() charges nothing.
TEST(RateLimiterPeekTest, ShowsWhatAdmitWouldLeaveWithoutCharging) {
  RateLimitOptions o;
  o.per_key = {60, 0};
  o.per_team = {0, 1'000};
  RateLimiter limiter(o);
  const auto t0 = RateLimiter::Clock::now();
  RateLimiter::Remaining fresh = limiter.peek("k", "t", t0);
  EXPECT_EQ(fresh.requests.limit, 60);
  EXPECT_EQ(fresh.requests.remaining, 60);
  EXPECT_EQ(fresh.tokens.limit, 1'000);
  EXPECT_EQ(fresh.tokens.remaining, 1'000);
  RateDecision d = limiter.admit("k", "t", 300, t0);
  ASSERT_TRUE(d.allowed);
  for (int i = 0; i < 3; ++i) {  // peeking charges nothing
    RateLimiter::Remaining r = limiter.peek("k", "t", t0);
    EXPECT_EQ(r.requests.remaining, d.requests.remaining);
    EXPECT_EQ(r.tokens.remaining, d.tokens.remaining);
    EXPECT_EQ(r.tokens.remaining, 700);
  }
  EXPECT_EQ(limiter.peek("k2", "t", t0).tokens.remaining, 700) << "the team's bucket is shared";
  EXPECT_EQ(limiter.peek("k", "t", t0 + 2s).requests.remaining, 60) << "refilled one per second";
  RateLimiter unlimited(RateLimitOptions{});
  EXPECT_EQ(unlimited.peek("k", "t").requests.limit, 0);
}

}  // namespace
}  // namespace lg::billing

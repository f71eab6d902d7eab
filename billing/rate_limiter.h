// RateLimiter: requests and tokens per minute, per API key and per team.
//
// Each (subject, kind) is a token bucket holding at most its per-minute limit
// and refilled continuously at limit / 60 per second, so a client may burst up
// to one minute's allowance and then runs at the limit: over any interval T
// at most limit + limit * T / 60 are admitted, which is what the concurrency
// test checks. A request is admitted only if every bucket it touches (its
// key's and its team's, requests and tokens) has room, and then all are
// charged at once under one lock, so concurrent requests cannot overshoot
// between the check and the charge.
//
// Tokens are charged at admission as the prompt plus the request's output cap
// (what it may use, as OpenAI counts), and the unused part is given back when
// the request ends (settle), so a capped request that stops early does not
// hold its whole reservation for a minute.
//
// The state is in memory: a restart grants a fresh minute, which is the
// usual trade-off for per-minute limits (budgets, which are money, are kept
// durably by the ledger).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace lg::billing {

// Limits per minute; 0 = unlimited.
struct RateLimits {
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
};

struct RateLimitOptions {
  RateLimits per_key;
  RateLimits per_team;
};

// What the x-ratelimit-* headers report: the tighter of key and team.
struct RateLimitState {
  int64_t limit = 0;      // 0: unlimited (no headers)
  int64_t remaining = 0;  // whole units left now
  double reset_s = 0;     // until the bucket is full again
};

struct RateDecision {
  bool allowed = false;
  const char* exhausted = nullptr;  // refused: "requests" or "tokens", and whose ("key" / "team")
  const char* subject = nullptr;
  double retry_after_s = 0;         // refused: when the charge would fit
  RateLimitState requests, tokens;
};

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimiter(RateLimitOptions options) : options_(options) {}

  // Admits a request of `tokens` (prompt + output cap) for the key and team,
  // charging one request and the tokens to both, or refuses it charging nothing.
  RateDecision admit(const std::string& key_id, const std::string& team, int64_t tokens,
                     Clock::time_point now = Clock::now());
  // Gives back reserved - used tokens (never more than was charged).
  void settle(const std::string& key_id, const std::string& team, int64_t reserved, int64_t used,
              Clock::time_point now = Clock::now());

  // A refused request's message for the client.
  static std::string describe(const RateDecision& d, const RateLimitOptions& options);
  const RateLimitOptions& options() const { return options_; }

  // What the key may still use now, as admit() would report it (the tighter
  // of key and team, refilled to `now`), without charging anything or
  // creating buckets: a key not seen yet has its whole minute.
  struct Remaining {
    RateLimitState requests, tokens;
  };
  Remaining peek(const std::string& key_id, const std::string& team, Clock::time_point now = Clock::now()) const;

 private:
  struct Bucket {
    double level = -1;  // units available; < 0: new (starts full)
    Clock::time_point at;
  };
  // Refills to `now`; returns the level.
  static double refill(Bucket& b, int64_t limit, Clock::time_point now);
  static RateLimitState stateOf(const Bucket& b, int64_t limit);
  static RateLimitState tighter(const RateLimitState& a, const RateLimitState& b);

  const RateLimitOptions options_;
  mutable std::mutex mu_;
  // Keyed "k:<key id>:r", "t:<team>:k", ... Entries are a few dozen bytes per
  // key and team, bounded by the number of keys.
  std::unordered_map<std::string, Bucket> buckets_;
};

// "1s", "6m0s", "150ms": the reset format of OpenAI's x-ratelimit-reset-* headers.
std::string resetDuration(double seconds);

}  // namespace lg::billing

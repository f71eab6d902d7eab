#include "billing/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lg::billing {

double RateLimiter::refill(Bucket& b, int64_t limit, Clock::time_point now) {
  const double cap = static_cast<double>(limit);
  if (b.level < 0) {
    b.level = cap;
  } else if (now > b.at) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.level = std::min(cap, b.level + elapsed * cap / 60.0);
  }
  b.at = std::max(b.at, now);
  return b.level;
}

RateLimitState RateLimiter::stateOf(const Bucket& b, int64_t limit) {
  RateLimitState s;
  if (limit <= 0) return s;
  s.limit = limit;
  s.remaining = std::max<int64_t>(0, static_cast<int64_t>(std::floor(b.level)));
  s.reset_s = (static_cast<double>(limit) - b.level) * 60.0 / static_cast<double>(limit);
  return s;
}

RateLimitState RateLimiter::tighter(const RateLimitState& a, const RateLimitState& b) {
  if (a.limit == 0) return b;
  if (b.limit == 0) return a;
  return a.remaining <= b.remaining ? a : b;
}

RateDecision RateLimiter::admit(const std::string& key_id, const std::string& team, int64_t tokens,
                                Clock::time_point now) {
  struct Need {
    Bucket* bucket;
    int64_t limit;
    double amount;
    const char* kind;
    const char* subject;
  };
  std::lock_guard lock(mu_);
  Need needs[4];
  int n = 0;
  auto add = [&](const std::string& name, int64_t limit, double amount, const char* kind, const char* subject) {
    if (limit <= 0) return;
    Bucket& b = buckets_[name];
    refill(b, limit, now);
    needs[n++] = {&b, limit, amount, kind, subject};
  };
  add("k:" + key_id + ":r", options_.per_key.requests_per_minute, 1, "requests", "key");
  add("k:" + key_id + ":t", options_.per_key.tokens_per_minute, static_cast<double>(tokens), "tokens", "key");
  add("t:" + team + ":r", options_.per_team.requests_per_minute, 1, "requests", "team");
  add("t:" + team + ":t", options_.per_team.tokens_per_minute, static_cast<double>(tokens), "tokens", "team");

  RateDecision d;
  d.allowed = true;
  for (int i = 0; i < n; ++i) {
    const Need& need = needs[i];
    if (need.bucket->level >= need.amount) continue;
    // The longest wait decides when the whole request would fit; a request
    // larger than a bucket can hold never fits (retry_after_s stays -1).
    const double wait = need.amount > static_cast<double>(need.limit)
                            ? -1.0
                            : (need.amount - need.bucket->level) * 60.0 / static_cast<double>(need.limit);
    if (d.allowed || wait < 0 || (d.retry_after_s >= 0 && wait > d.retry_after_s)) {
      d.retry_after_s = wait;
      d.exhausted = need.kind;
      d.subject = need.subject;
    }
    d.allowed = false;
  }
  if (d.allowed) {
    for (int i = 0; i < n; ++i) needs[i].bucket->level -= needs[i].amount;
  }
  for (int i = 0; i < n; ++i) {
    const RateLimitState s = stateOf(*needs[i].bucket, needs[i].limit);
    RateLimitState& into = std::string_view(needs[i].kind) == "requests" ? d.requests : d.tokens;
    into = tighter(into, s);
  }
  return d;
}

void RateLimiter::settle(const std::string& key_id, const std::string& team, int64_t reserved, int64_t used,
                         Clock::time_point now) {
  const int64_t refund = reserved - std::clamp<int64_t>(used, 0, reserved);
  if (refund <= 0) return;
  std::lock_guard lock(mu_);
  auto give = [&](const std::string& name, int64_t limit) {
    if (limit <= 0) return;
    auto it = buckets_.find(name);
    if (it == buckets_.end()) return;
    refill(it->second, limit, now);
    it->second.level = std::min(static_cast<double>(limit), it->second.level + static_cast<double>(refund));
  };
  give("k:" + key_id + ":t", options_.per_key.tokens_per_minute);
  give("t:" + team + ":t", options_.per_team.tokens_per_minute);
}

std::string RateLimiter::describe(const RateDecision& d, const RateLimitOptions& options) {
  if (d.allowed || d.exhausted == nullptr) return "";
  const bool key = std::string_view(d.subject) == "key";
  const bool requests = std::string_view(d.exhausted) == "requests";
  const RateLimits& limits = key ? options.per_key : options.per_team;
  const int64_t limit = requests ? limits.requests_per_minute : limits.tokens_per_minute;
  std::string who = key ? "this API key" : "this key's team";
  if (d.retry_after_s < 0) {
    return "Request too large: it may use more tokens than the " + std::to_string(limit) +
           " tokens per minute allowed for " + who + "; lower max_tokens or shorten the prompt.";
  }
  char wait[32];
  std::snprintf(wait, sizeof wait, "%.1f", d.retry_after_s);
  return "Rate limit reached for " + who + ": " + std::to_string(limit) + (requests ? " requests" : " tokens") +
         " per minute. Try again in " + wait + " s.";
}

std::string resetDuration(double seconds) {
  if (seconds <= 0) return "0s";
  if (seconds < 1) return std::to_string(static_cast<int>(std::ceil(seconds * 1000))) + "ms";
  const int64_t s = static_cast<int64_t>(std::ceil(seconds));
  if (s < 60) return std::to_string(s) + "s";
  return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
}

RateLimiter::Remaining RateLimiter::peek(const std::string& key_id, const std::string& team,
                                         Clock::time_point now) const {
  Remaining r;
  std::lock_guard lock(mu_);
  auto look = [&](const std::string& name, int64_t limit, RateLimitState& into) {
    if (limit <= 0) return;
    auto it = buckets_.find(name);
    Bucket b = it == buckets_.end() ? Bucket{} : it->second;  // a copy: refilled here, never stored
    refill(b, limit, now);
    into = tighter(into, stateOf(b, limit));
  };
  look("k:" + key_id + ":r", options_.per_key.requests_per_minute, r.requests);
  look("k:" + key_id + ":t", options_.per_key.tokens_per_minute, r.tokens);
  look("t:" + team + ":r", options_.per_team.requests_per_minute, r.requests);
  look("t:" + team + ":t", options_.per_team.tokens_per_minute, r.tokens);
  return r;
}

}  // namespace lg::billing

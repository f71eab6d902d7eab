#include "proxy/dashboard/dashboard_sessions.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace lg::proxy {

namespace {

constexpr size_t kTokenBytes = 32;   // 256 bits
constexpr size_t kTokenChars = 43;   // base64url of 32 bytes, unpadded

std::string base64url(const unsigned char* data, size_t n) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  for (size_t i = 0; i < n; ++i) {
    bits = (bits << 8) | data[i];
    have += 8;
    while (have >= 6) {
      have -= 6;
      out += kAlphabet[(bits >> have) & 63];
    }
  }
  if (have > 0) out += kAlphabet[(bits << (6 - have)) & 63];
  return out;
}

std::string sha256(std::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof digest);
}

}  // namespace

DashboardSessions::DashboardSessions(size_t max_sessions, int64_t ttl_us, size_t max_sessions_per_key)
    : max_sessions_(std::max<size_t>(max_sessions, 1)),
      ttl_us_(ttl_us),
      max_sessions_per_key_(std::max<size_t>(max_sessions_per_key, 1)) {}

bool DashboardSessions::wellFormed(std::string_view token) {
  if (token.size() != kTokenChars) return false;
  return std::all_of(token.begin(), token.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

Result<std::string> DashboardSessions::create(DashboardViewer viewer, int64_t now_us) {
  unsigned char random[kTokenBytes];
  if (RAND_bytes(random, sizeof random) != 1) return unavailable("dashboard: the random generator failed");
  std::string token = base64url(random, sizeof random);
  std::string hash = sha256(token);
  // Sessions of the same key: the admin's, or one API key's.
  const auto sameKey = [&](const DashboardViewer& v) {
    return v.admin() == viewer.admin() && (viewer.admin() || v.key_id == viewer.key_id);
  };
  // The oldest session among those `pick` accepts; end() when none.
  const auto oldestOf = [&](const auto& pick) {
    auto oldest = by_hash_.end();
    for (auto it = by_hash_.begin(); it != by_hash_.end(); ++it) {
      if (pick(it->second.viewer) && (oldest == by_hash_.end() || it->second.expires_us < oldest->second.expires_us)) {
        oldest = it;
      }
    }
    return oldest;
  };
  std::lock_guard lock(mu_);
  // One pass to count the key's sessions: at most one per creation, over a
  // bounded table.
  const size_t mine = static_cast<size_t>(
      std::count_if(by_hash_.begin(), by_hash_.end(), [&](const auto& kv) { return sameKey(kv.second.viewer); }));
  if (mine >= max_sessions_per_key_) {
    by_hash_.erase(oldestOf(sameKey));
  }
  if (by_hash_.size() >= max_sessions_) {
    std::erase_if(by_hash_, [&](const auto& kv) { return kv.second.expires_us <= now_us; });
  }
  if (by_hash_.size() >= max_sessions_) {
    // A team's session makes room only among teams' sessions; an admin's
    // among teams' first, then among admins'.
    auto victim = oldestOf([](const DashboardViewer& v) { return !v.admin(); });
    if (victim == by_hash_.end() && viewer.admin()) victim = oldestOf([](const DashboardViewer&) { return true; });
    if (victim == by_hash_.end()) return resourceExhausted("dashboard: every session is an admin's");
    by_hash_.erase(victim);
  }
  LG_CHECK(by_hash_.size() < max_sessions_, "dashboard sessions: the table passed its bound");
  by_hash_[std::move(hash)] = DashboardSession{std::move(viewer), now_us, now_us + ttl_us_};
  return token;
}

std::optional<DashboardSession> DashboardSessions::find(std::string_view token, int64_t now_us) {
  if (!wellFormed(token)) return std::nullopt;
  const std::string hash = sha256(token);
  std::lock_guard lock(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  if (it->second.expires_us <= now_us) {
    by_hash_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

bool DashboardSessions::remove(std::string_view token) {
  if (!wellFormed(token)) return false;
  const std::string hash = sha256(token);
  std::lock_guard lock(mu_);
  return by_hash_.erase(hash) > 0;
}

size_t DashboardSessions::removeTeam(std::string_view team) {
  std::lock_guard lock(mu_);
  return std::erase_if(by_hash_, [&](const auto& kv) {
    return kv.second.viewer.role == DashboardViewer::Role::kTeam && kv.second.viewer.team == team;
  });
}

size_t DashboardSessions::size() const {
  std::lock_guard lock(mu_);
  return by_hash_.size();
}

SignInThrottle::SignInThrottle(int64_t per_minute, size_t max_names)
    : per_minute_(per_minute), max_names_(std::max<size_t>(max_names, 1)) {}

double SignInThrottle::refilled(const Bucket& b, int64_t now_us) const {
  const double elapsed_min = static_cast<double>(std::max<int64_t>(now_us - b.updated_us, 0)) / 60e6;
  return std::min(static_cast<double>(per_minute_), b.tokens + elapsed_min * static_cast<double>(per_minute_));
}

bool SignInThrottle::wouldAllow(const std::string& name, int64_t now_us) const {
  if (per_minute_ <= 0) return true;
  std::lock_guard lock(mu_);
  auto it = buckets_.find(name);
  return it == buckets_.end() || refilled(it->second, now_us) >= 1.0;
}

int64_t SignInThrottle::take(const std::string& name, int64_t now_us) {
  if (per_minute_ <= 0) return 0;
  std::lock_guard lock(mu_);
  auto it = buckets_.find(name);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_names_) {
      std::erase_if(buckets_, [&](const auto& kv) { return refilled(kv.second, now_us) >= static_cast<double>(per_minute_); });
    }
    if (buckets_.size() >= max_names_) return 60;  // a flood of names: refuse the new, keep the old
    it = buckets_.emplace(name, Bucket{static_cast<double>(per_minute_), now_us}).first;
  }
  Bucket& b = it->second;
  b.tokens = refilled(b, now_us);
  b.updated_us = now_us;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return 0;
  }
  const double wait_s = (1.0 - b.tokens) * 60.0 / static_cast<double>(per_minute_);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_s)));
}

}  // namespace lg::proxy

#include "proxy/dashboard/dashboard_sessions.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>

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

DashboardSessions::DashboardSessions(size_t max_sessions, int64_t ttl_us)
    : max_sessions_(std::max<size_t>(max_sessions, 1)), ttl_us_(ttl_us) {}

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
  std::lock_guard lock(mu_);
  if (by_hash_.size() >= max_sessions_) {
    std::erase_if(by_hash_, [&](const auto& kv) { return kv.second.expires_us <= now_us; });
  }
  if (by_hash_.size() >= max_sessions_) {
    auto oldest = std::min_element(by_hash_.begin(), by_hash_.end(), [](const auto& a, const auto& b) {
      return a.second.expires_us < b.second.expires_us;
    });
    by_hash_.erase(oldest);
  }
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

size_t DashboardSessions::size() const {
  std::lock_guard lock(mu_);
  return by_hash_.size();
}

}  // namespace lg::proxy

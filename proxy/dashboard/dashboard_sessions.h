// DashboardSessions: the dashboard's sign-in sessions (docs/dashboard.md).
//
// A session is created when someone signs in with the admin key or an API
// key, and is named by a token: 256 random bits (RAND_bytes), sent to the
// browser once, as 43 characters of base64url in an HttpOnly cookie. The
// table keeps only the token's SHA-256, with who signed in (the admin, or a
// team through one of its keys) and when the session expires; the key that
// signed in is not kept at all. So neither the table nor a log holds anything
// that opens a session or calls the API.
//
// The table is bounded (issue 21, item 9): one key (the admin key counts as
// one) holds at most `max_sessions_per_key` sessions, a new one dropping that
// key's oldest, so a key holder signing in a thousand times only churns its
// own sessions. At `max_sessions`, a new session first drops the expired
// ones and then the oldest team session; an admin's session is never dropped
// for a team's (a team sign-in into a table of admin sessions only is
// refused), only for another admin session. Expired sessions are also
// dropped when they are looked up. Sessions live in memory: a restart signs
// everyone out.
//
// Thread-safety: all methods may be called concurrently (one mutex; every
// operation is a hash lookup, creation at most one pass over the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace lg::proxy {

struct DashboardViewer {
  enum class Role : uint8_t { kAdmin, kTeam };
  Role role = Role::kAdmin;
  // kTeam: the key that signed in, and its team (whose every key it sees).
  std::string key_id;
  std::string team;
  std::string key_name;

  bool admin() const { return role == Role::kAdmin; }
};

struct DashboardSession {
  DashboardViewer viewer;
  int64_t created_us = 0;
  int64_t expires_us = 0;
};

class DashboardSessions {
 public:
  // `ttl_us`: how long a session lasts from its creation; `max_sessions` >= 1;
  // `max_sessions_per_key` >= 1.
  DashboardSessions(size_t max_sessions, int64_t ttl_us, size_t max_sessions_per_key = 8);

  // A new session for `viewer` from `now_us`; its token (43 base64url
  // characters), which exists nowhere else afterwards. Fails when the
  // random generator does (Unavailable), or for a team when every place is
  // an admin's (ResourceExhausted).
  Result<std::string> create(DashboardViewer viewer, int64_t now_us);
  // The session the token names, if it exists and has not expired (an
  // expired one is removed). A token of the wrong shape is never looked up.
  std::optional<DashboardSession> find(std::string_view token, int64_t now_us);
  // Removes the token's session; false when there was none.
  bool remove(std::string_view token);
  // Removes every session of `team`'s keys (the team was deleted); returns how many.
  size_t removeTeam(std::string_view team);
  size_t size() const;

  int64_t ttlUs() const { return ttl_us_; }

  // Whether `token` has the shape of a session token (43 base64url characters).
  static bool wellFormed(std::string_view token);

 private:
  const size_t max_sessions_;
  const int64_t ttl_us_;
  const size_t max_sessions_per_key_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, DashboardSession> by_hash_;  // guarded by mu_: raw SHA-256 of the token
};

// SignInThrottle: token buckets by name (an address, a key id), for the
// dashboard's sign-in: `per_minute` a minute, a minute's worth at once. The
// table is bounded (`max_names`): when full, buckets that have refilled are
// forgotten (they hold nothing a fresh one would not), and if none has, the
// new name is refused rather than an old bucket reset, so a flood of
// addresses cannot wipe the throttle.
//
// Thread-safety: all methods may be called concurrently (one mutex).
class SignInThrottle {
 public:
  // `per_minute` 0: unlimited.
  SignInThrottle(int64_t per_minute, size_t max_names = 16384);
  // Takes one from `name`'s bucket; 0 when it had one, else the seconds
  // until it will (at least 1).
  int64_t take(const std::string& name, int64_t now_us);
  // Whether take() would succeed now, without taking.
  bool wouldAllow(const std::string& name, int64_t now_us) const;

 private:
  struct Bucket {
    double tokens = 0;
    int64_t updated_us = 0;
  };
  double refilled(const Bucket& b, int64_t now_us) const;

  const int64_t per_minute_;
  const size_t max_names_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // guarded by mu_
};

}  // namespace lg::proxy

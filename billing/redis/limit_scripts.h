// The Lua scripts of the shared counters and the names of their keys
// (docs/billing.md, "Budgets and limits shared by replicas"). Internal to
// lg_billing_redis; the tests read the key names to look at the counters.
//
// Every key of one request carries its team as a hash tag ({team}: team ids
// have no braces), so the keys one script touches live in one Redis Cluster
// slot, and the scripts name every key they touch in KEYS.
//
//   <p>{T}:spend:k:<key id>:<period>:<start>  hash: spent (pico-dollars),
//   <p>{T}:spend:t:<period>:<start>             seeded ("1" once counted from
//                                               the durable records)
//   <p>{T}:held:k:<key id>, <p>{T}:held:t       sorted set: "<request id>:<amount>"
//                                               scored by expiry (ms, Redis TIME)
//   <p>{T}:heldsum:k:<key id>, ...:heldsum:t    their amounts' sum (INCRBY/DECRBY)
//   <p>{T}:res:<request id>                     hash: a (amount), k, t ("1": held
//                                               against the key's, team's budget)
//   <p>{T}:done:<request id>                    "1": settled (expires)
//   <p>{T}:rl:k:<key id>:<r|t>:<window start>   requests or tokens in the minute
//   <p>{T}:rl:t:<r|t>:<window start>            starting then (fixed windows)
//
// <p> is the prefix ("lg:"), <period> day, month or total, <start> Unix
// seconds (0 for total): a new period or window is a new key.
#pragma once

#include <string>
#include <string_view>

#include "billing/budgets.h"
#include "billing/redis/redis_connection.h"
#include "billing/settings.h"

namespace lg::billing::redis {

class LimitKeys {
 public:
  explicit LimitKeys(std::string prefix) : prefix_(std::move(prefix)) {}

  std::string spend(std::string_view team, BudgetScope scope, std::string_view key_id, BudgetPeriodSetting period,
                    int64_t start_s) const;
  std::string held(std::string_view team, BudgetScope scope, std::string_view key_id) const;
  std::string heldSum(std::string_view team, BudgetScope scope, std::string_view key_id) const;
  std::string reservation(std::string_view team, std::string_view request_id) const;
  std::string settled(std::string_view team, std::string_view request_id) const;
  // kind 'r' (requests) or 't' (tokens)
  std::string window(std::string_view team, BudgetScope scope, std::string_view key_id, char kind,
                     int64_t start_s) const;

 private:
  std::string tag(std::string_view team) const;
  std::string subject(std::string_view team, BudgetScope scope, std::string_view key_id, std::string_view what) const;
  const std::string prefix_;
};

// The scripts (limit_scripts.cc explains each one's keys and arguments).
struct LimitScripts {
  RedisScript admit;    // checks both budgets and every window, and charges all or nothing
  RedisScript settle;   // a committed entry: spent += cost, reservation gone, once per request id
  RedisScript release;  // a reservation given back without an entry
  RedisScript refresh;  // a live request's reservation kept (or put back after a flush)
  RedisScript giveBack; // unused tokens back into a window
  LimitScripts();
};

// Replies of the admit script: its first element.
enum AdmitReply : int64_t {
  kAdmitted = 0,        // {0, window counts after the charge...}
  kOverBudget = 1,      // {1, budget index (1-based), spent, reserved}
  kOverLimit = 2,       // {2, window index (1-based), count}
  kNeedsSeed = 3,       // {3, budget indexes...}: no spend counted for those periods yet
  kAlreadyAdmitted = 4  // {4}: this request id holds a reservation (the call was sent twice)
};

}  // namespace lg::billing::redis

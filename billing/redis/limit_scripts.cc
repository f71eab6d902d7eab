#include "billing/redis/limit_scripts.h"

#include "billing/settings_json.h"

namespace lg::billing::redis {

// ------------------------------------------------------------------ key names

std::string LimitKeys::tag(std::string_view team) const { return prefix_ + "{" + std::string(team) + "}:"; }

std::string LimitKeys::subject(std::string_view team, BudgetScope scope, std::string_view key_id,
                               std::string_view what) const {
  std::string k = tag(team) + std::string(what);
  if (scope == BudgetScope::kKey) return k + ":k:" + std::string(key_id);
  return k + ":t";
}

std::string LimitKeys::spend(std::string_view team, BudgetScope scope, std::string_view key_id,
                             BudgetPeriodSetting period, int64_t start_s) const {
  return subject(team, scope, key_id, "spend") + ":" + std::string(budgetPeriodName(period)) + ":" +
         std::to_string(start_s);
}

std::string LimitKeys::held(std::string_view team, BudgetScope scope, std::string_view key_id) const {
  return subject(team, scope, key_id, "held");
}

std::string LimitKeys::heldSum(std::string_view team, BudgetScope scope, std::string_view key_id) const {
  return subject(team, scope, key_id, "heldsum");
}

std::string LimitKeys::reservation(std::string_view team, std::string_view request_id) const {
  return tag(team) + "res:" + std::string(request_id);
}

std::string LimitKeys::settled(std::string_view team, std::string_view request_id) const {
  return tag(team) + "done:" + std::string(request_id);
}

std::string LimitKeys::window(std::string_view team, BudgetScope scope, std::string_view key_id, char kind,
                              int64_t start_s) const {
  return subject(team, scope, key_id, "rl") + ":" + std::string(1, kind) + ":" + std::to_string(start_s);
}

// -------------------------------------------------------------------- scripts

namespace {

// Pieces the scripts share, each script taking only those it uses (Lua
// makes a closure of every local function on every call).
//
// Amounts are pico-dollars: a budget passes 2^53 (where Lua's numbers,
// doubles, stop being exact) at $9,007, so the scripts never do arithmetic
// on amounts as numbers. Redis adds them exactly (INCRBY, DECRBY, HINCRBY
// on int64 strings), and the one comparison, spent + reserved + amount >
// limit, is done on two limbs of 10^9 that stay far below 2^53 for any int64.
constexpr const char* kExact = R"lua(
local function big(s)
  if not s or string.sub(s, 1, 1) == '-' then return {0, 0} end
  local n = #s
  if n <= 9 then return {0, tonumber(s)} end
  return {tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))}
end
local function add(a, b)
  local low = a[2] + b[2]
  if low >= 1000000000 then return {a[1] + b[1] + 1, low - 1000000000} end
  return {a[1] + b[1], low}
end
local function above(a, b)
  return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2])
end
)lua";

// Redis's clock, the one clock every replica's reservations expire by
// (milliseconds: about 1.8e12, exact in a double and written whole).
constexpr const char* kNow = R"lua(
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
)lua";

// A held set and its sum live at least `ms` more, never less (another
// replica may hold longer); they always expire together.
constexpr const char* kExtend = R"lua(
local function extend(held, sum, ms)
  if redis.call('PTTL', held) < ms then
    redis.call('PEXPIRE', held, ms)
    redis.call('PEXPIRE', sum, ms)
  end
end
)lua";

// Gives back what reservation `res` holds; 0 when it holds nothing (given
// back already, settled, or expired).
constexpr const char* kUnhold = R"lua(
local function unhold(res, rid, kheld, ksum, theld, tsum)
  local r = redis.call('HMGET', res, 'a', 'k', 't')
  if not r[1] then return 0 end
  local m = rid .. ':' .. r[1]
  if r[2] == '1' and redis.call('ZREM', kheld, m) == 1 then redis.call('DECRBY', ksum, r[1]) end
  if r[3] == '1' and redis.call('ZREM', theld, m) == 1 then redis.call('DECRBY', tsum, r[1]) end
  redis.call('DEL', res)
  return 1
end
)lua";

// KEYS  [1] the reservation; then per budget (up to 2): its period's spend
//       hash, its held set, its held sum; then per window (up to 4): its counter
// ARGV  request id, amount, ttl ms, #budgets, then per budget: scope ('k' or
//       't'), limit, seed ('' none), expire-at of its spend hash (Unix s, 0
//       none); then #windows, then per window: limit, need, ttl s
// Nothing is written before every check passed, except seeds (counted from
// the durable records, not a charge) and the purge of expired reservations.
constexpr const char* kAdmit = R"lua(
local rid, amount, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then return {4} end
local nb = tonumber(ARGV[4])
local a = 5
local budgets, unseeded = {}, {}
for i = 1, nb do
  local k = 1 + 3 * (i - 1)
  local b = {scope = ARGV[a], limit = ARGV[a + 1], spend = KEYS[k + 1], held = KEYS[k + 2], sum = KEYS[k + 3]}
  local seed, expire_at = ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  local h = redis.call('HMGET', b.spend, 'spent', 'seeded')
  b.spent = h[1]
  if not h[2] then
    if seed == '' then
      unseeded[#unseeded + 1] = i
    else
      -- Only the first seed counts ('seeded' read above, in this atomic
      -- script): replicas that raced to seed one period do not add up.
      redis.call('HSET', b.spend, 'spent', seed, 'seeded', '1')
      if expire_at > 0 then redis.call('EXPIREAT', b.spend, expire_at) end
      b.spent = seed
    end
  end
  budgets[i] = b
end
if #unseeded > 0 then return {3, unpack(unseeded)} end
local nw = tonumber(ARGV[a])
a = a + 1
-- Every sum and window in one read (one slot: the team's).
local reads = {}
for i = 1, nb do reads[i] = budgets[i].sum end
for j = 1, nw do reads[nb + j] = KEYS[1 + 3 * nb + j] end
local values = {}
if #reads > 0 then values = redis.call('MGET', unpack(reads)) end
local now = nowMs()
for i, b in ipairs(budgets) do
  local reserved = values[i]
  -- Reservations past their time belong to requests whose replica is gone.
  local expired = redis.call('ZRANGEBYSCORE', b.held, '-inf', now)
  if #expired > 0 then
    for _, m in ipairs(expired) do
      if redis.call('ZREM', b.held, m) == 1 then redis.call('DECRBY', b.sum, string.match(m, ':(%d+)$')) end
    end
    reserved = redis.call('GET', b.sum)
  end
  if above(add(add(big(b.spent), big(reserved)), big(amount)), big(b.limit)) then
    return {1, i, b.spent or '0', reserved or '0'}
  end
end
local windows = {}
for j = 1, nw do
  local w = {key = KEYS[1 + 3 * nb + j], limit = ARGV[a], need = ARGV[a + 1], ttl = ARGV[a + 2], fresh = not values[nb + j]}
  a = a + 3
  if above(add(big(values[nb + j]), big(w.need)), big(w.limit)) then return {2, j, values[nb + j] or '0'} end
  windows[j] = w
end
local member = rid .. ':' .. amount
local held = {k = '0', t = '0'}
for _, b in ipairs(budgets) do
  if redis.call('ZADD', b.held, 'NX', now + ttl, member) == 1 then redis.call('INCRBY', b.sum, amount) end
  extend(b.held, b.sum, ttl)
  held[b.scope] = '1'
end
if nb > 0 then
  redis.call('HSET', KEYS[1], 'a', amount, 'k', held.k, 't', held.t)
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local out = {0}
for j, w in ipairs(windows) do
  out[j + 1] = redis.call('INCRBY', w.key, w.need)
  -- The window's first charge made its counter: it expires after the window.
  if w.fresh then redis.call('EXPIRE', w.key, w.ttl) end
end
return out
)lua";

// KEYS  the reservation, the settled marker, the key's held set and sum, the
//       team's held set and sum, then the spend hashes of the entry's periods
// ARGV  request id, cost, the marker's ttl ms
// Returns 1 when counted, 0 when this request id was settled before. A spend
// hash not seeded is left alone: when it is seeded, the durable records it
// is counted from hold this entry already (it committed before this runs).
constexpr const char* kSettle = R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
unhold(KEYS[1], ARGV[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
for i = 7, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'seeded') == 1 then redis.pcall('HINCRBY', KEYS[i], 'spent', ARGV[2]) end
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return 1
)lua";

// KEYS  the reservation, the key's held set and sum, the team's
// ARGV  request id
constexpr const char* kRelease = R"lua(
return unhold(KEYS[1], ARGV[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
)lua";

// KEYS  the reservation, the settled marker, the key's held set and sum, the team's
// ARGV  request id, amount, k ('1': held against the key's budget), t, ttl ms
// Keeps a running request's reservation alive, and puts it back when the
// store lost it (restarted empty, flushed), unless it was settled.
constexpr const char* kRefresh = R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local rid, amount, ttl = ARGV[1], ARGV[2], tonumber(ARGV[5])
local member = rid .. ':' .. amount
local expires = nowMs() + ttl
local function hold(flag, heldk, sumk)
  if flag ~= '1' then return end
  if redis.call('ZADD', heldk, expires, member) == 1 then redis.call('INCRBY', sumk, amount) end
  extend(heldk, sumk, ttl)
end
hold(ARGV[3], KEYS[3], KEYS[4])
hold(ARGV[4], KEYS[5], KEYS[6])
redis.call('HSET', KEYS[1], 'a', amount, 'k', ARGV[3], 't', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
)lua";

// KEYS  token window counters; ARGV  the tokens to give back
// Only into windows that still exist, and never below zero.
constexpr const char* kGiveBack = R"lua(
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local v = redis.call('DECRBY', KEYS[i], ARGV[1])
    if v < 0 then redis.call('INCRBY', KEYS[i], -v) end
  end
end
return 1
)lua";

}  // namespace

LimitScripts::LimitScripts()
    : admit(std::string(kExact) + kNow + kExtend + kAdmit),
      settle(std::string(kUnhold) + kSettle),
      release(std::string(kUnhold) + kRelease),
      refresh(std::string(kNow) + kExtend + kRefresh),
      giveBack(kGiveBack) {}

}  // namespace lg::billing::redis

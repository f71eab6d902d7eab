#include "billing/redis/redis_budget_view.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "billing/redis/limit_scripts.h"
#include "billing/settings_json.h"
#include "common/logging.h"
#include "common/url_redact.h"

namespace lg::billing::redis {

namespace {

spdlog::logger* billingLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

// KEYS  per budget: its period's spend hash, its held set, its held sum
// Returns per budget {spent, seeded, held sum, {members of the held set that
// expired by Redis's clock}} (nil for what is missing). Reads only: the
// expired members are subtracted by the caller (amounts are not numbers in
// Lua: limit_scripts.cc) and purged by the next admission.
constexpr const char* kRead = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS, 3 do
  local h = redis.call('HMGET', KEYS[i], 'spent', 'seeded')
  out[#out + 1] = {h[1], h[2], redis.call('GET', KEYS[i + 2]), redis.call('ZRANGEBYSCORE', KEYS[i + 1], '-inf', now)}
end
return out
)lua";

// A whole int64 in decimal, nothing else.
std::optional<int64_t> parseAmount(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// What Redis says of one budget: nullopt when the reply is not the script's.
struct Read {
  std::optional<int64_t> spent;  // nullopt: the period is not seeded
  Int128 reserved = 0;
};

std::optional<Read> parseRead(const RedisReply& reply) {
  if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 1) return std::nullopt;
  const RedisReply& b = reply.elements[0];
  if (b.type != RedisReply::Type::kArray || b.elements.size() != 4) return std::nullopt;
  const RedisReply& spent = b.elements[0];
  const RedisReply& seeded = b.elements[1];
  const RedisReply& sum = b.elements[2];
  const RedisReply& expired = b.elements[3];
  Read r;
  if (seeded.type != RedisReply::Type::kNil) {
    if (spent.type == RedisReply::Type::kNil) {
      r.spent = 0;
    } else {
      r.spent = parseAmount(spent.str);
      if (!r.spent) return std::nullopt;
    }
  }
  if (sum.type != RedisReply::Type::kNil) {
    auto held = parseAmount(sum.str);
    if (!held) return std::nullopt;
    r.reserved = *held;
  }
  if (expired.type != RedisReply::Type::kArray) return std::nullopt;
  for (const RedisReply& m : expired.elements) {
    // "<request id>:<amount>"
    const size_t colon = m.str.rfind(':');
    auto amount = colon == std::string::npos ? std::nullopt : parseAmount(std::string_view(m.str).substr(colon + 1));
    if (!amount) return std::nullopt;
    r.reserved -= *amount;
  }
  r.reserved = std::max<Int128>(r.reserved, 0);
  return r;
}

}  // namespace

RedisBudgetView::RedisBudgetView(RedisBudgetViewOptions options, const Budgets& budgets, const SpendSource& source)
    : options_(std::move(options)),
      budgets_(budgets),
      source_(source),
      keys_(std::make_unique<LimitKeys>(options_.key_prefix)),
      read_(std::make_unique<RedisScript>(kRead)) {
  for (size_t i = 0; i < options_.connections; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->conn = std::make_unique<RedisConnection>(options_.redis);
    slot->conn->addScript(read_.get());
    slots_.push_back(std::move(slot));
  }
}

RedisBudgetView::~RedisBudgetView() = default;

Result<std::unique_ptr<RedisBudgetView>> RedisBudgetView::open(RedisBudgetViewOptions options, const Budgets& budgets,
                                                               const SpendSource& source) {
  LG_RETURN_IF_ERROR(parseRedisUrl(options.redis.url).status());
  if (options.connections < 1) return invalidArgument("connections: expected >= 1");
  if (options.source_counts != BudgetCounted::kRecords && options.source_counts != BudgetCounted::kReplicaLedger) {
    return invalidArgument("source_counts: expected records or replica_ledger");
  }
  return std::unique_ptr<RedisBudgetView>(new RedisBudgetView(std::move(options), budgets, source));
}

std::unique_lock<std::mutex> RedisBudgetView::acquire(Slot** slot) const {
  const size_t n = slots_.size();
  const size_t first = next_.fetch_add(1, std::memory_order_relaxed) % n;
  for (size_t k = 0; k < n; ++k) {
    Slot& s = *slots_[(first + k) % n];
    std::unique_lock lock(s.mu, std::try_to_lock);
    if (lock.owns_lock()) {
      *slot = &s;
      return lock;
    }
  }
  *slot = slots_[first].get();
  return std::unique_lock((*slot)->mu);
}

void RedisBudgetView::noteRedis(const Status& failure) const {
  if (!failure.isOk()) {
    if (!down_.exchange(true, std::memory_order_relaxed)) {
      billingLog()->warn("budget views: Redis unreachable ({}): budgets show this replica's own counts, marked "
                         "\"counted\": \"replica_only\", until it returns",
                         redactPasswordIn(failure.message(), options_.redis.url));
    }
  } else if (down_.exchange(false, std::memory_order_relaxed)) {
    billingLog()->info("budget views: Redis reachable again: budgets show the replicas' shared counts");
  }
}

std::vector<std::optional<BudgetStatus>> RedisBudgetView::statusesOf(const std::vector<BudgetSubject>& subjects,
                                                                     int64_t now_s) const {
  std::vector<std::optional<BudgetStatus>> out(subjects.size());
  // The budgets that apply, each read once.
  struct Ask {
    BudgetSubject subject;
    BudgetSetting setting;
    int64_t start_s = 0;
    std::vector<size_t> answers;  // indexes into `out`
  };
  std::vector<Ask> asks;
  std::map<std::tuple<BudgetScope, std::string, std::string>, size_t> seen;
  for (size_t i = 0; i < subjects.size(); ++i) {
    const BudgetSubject& s = subjects[i];
    auto [it, fresh] = seen.try_emplace({s.scope, s.id, s.team}, SIZE_MAX);  // SIZE_MAX: no budget applies
    if (fresh) {
      const BudgetSetting setting = budgets_.effective(s.scope, s.id).budget;
      if (setting.enabled) {
        it->second = asks.size();
        asks.push_back(Ask{s, setting, budgetPeriodStart(setting.period, now_s), {}});
      }
    }
    if (it->second != SIZE_MAX) asks[it->second].answers.push_back(i);
  }
  if (asks.empty()) return out;

  std::vector<RedisCommand> commands;
  commands.reserve(asks.size());
  for (const Ask& a : asks) {
    const std::string key_id = a.subject.scope == BudgetScope::kKey ? a.subject.id : "";
    commands.push_back(read_->call({keys_->spend(a.subject.team, a.subject.scope, key_id, a.setting.period, a.start_s),
                                    keys_->held(a.subject.team, a.subject.scope, key_id),
                                    keys_->heldSum(a.subject.team, a.subject.scope, key_id)},
                                   {}));
  }
  Result<std::vector<RedisReply>> replies = [&] {
    Slot* slot = nullptr;
    std::unique_lock lock = acquire(&slot);
    return slot->conn->pipeline(commands);
  }();
  noteRedis(replies.status());

  auto local = [&](const Ask& a) {
    std::optional<BudgetStatus> st = budgets_.statusOf(a.subject.scope, a.subject.id, now_s);
    if (st) st->counted = BudgetCounted::kReplicaOnly;
    return st;
  };
  for (size_t k = 0; k < asks.size(); ++k) {
    const Ask& a = asks[k];
    std::optional<BudgetStatus> st;
    std::optional<Read> read;
    if (replies.isOk()) {
      read = parseRead((*replies)[k]);
      if (!read) {
        const RedisReply& r = (*replies)[k];
        billingLog()->warn("budget views: an unexpected reply reading the {} {}'s budget from Redis{}{}: showing this "
                           "replica's own count",
                           budgetScopeName(a.subject.scope), a.subject.id, r.isError() ? ": " : "",
                           r.isError() ? r.str : "");
      }
    }
    if (!read) {
      st = local(a);
    } else {
      BudgetStatus s;
      s.scope = std::string(budgetScopeName(a.subject.scope));
      s.period = std::string(budgetPeriodName(a.setting.period));
      s.period_start_s = a.start_s;
      s.period_end_s = budgetPeriodEnd(a.setting.period, now_s);
      s.limit = a.setting.limit;
      s.soft_limit = a.setting.soft_limit;
      s.reserved = read->reserved;
      if (read->spent) {
        s.spent = *read->spent;
        s.counted = BudgetCounted::kShared;
      } else if (auto spent = source_.spent(a.subject.scope, a.subject.id, a.setting.period, a.start_s);
                 spent.isOk()) {
        s.spent = *spent;
        s.counted = options_.source_counts;
      } else {
        // This replica's count: a floor of what was spent, never above it.
        billingLog()->warn("budget views: reading the {} {}'s spend this {} from the records failed ({}): showing "
                           "this replica's own count",
                           budgetScopeName(a.subject.scope), a.subject.id, budgetPeriodName(a.setting.period),
                           spent.status().toString());
        std::optional<BudgetStatus> mine = budgets_.statusOf(a.subject.scope, a.subject.id, now_s);
        s.spent = mine ? mine->spent : 0;
        s.counted = BudgetCounted::kReplicaLedger;
      }
      st = std::move(s);
    }
    for (size_t i : a.answers) out[i] = st;
  }
  return out;
}

std::optional<BudgetStatus> RedisBudgetView::statusOf(const BudgetSubject& subject, int64_t now_s) const {
  return std::move(statusesOf({subject}, now_s)[0]);
}

std::vector<std::optional<BudgetStatus>> RedisBudgetView::budgetsOf(const std::vector<Principal>& who,
                                                                    int64_t now_s) const {
  std::vector<BudgetSubject> subjects;
  subjects.reserve(2 * who.size());
  for (const Principal& p : who) {
    subjects.push_back({BudgetScope::kKey, p.key_id, p.team});
    subjects.push_back({BudgetScope::kTeam, p.team, p.team});
  }
  std::vector<std::optional<BudgetStatus>> statuses = statusesOf(subjects, now_s);
  std::vector<std::optional<BudgetStatus>> out;
  out.reserve(who.size());
  for (size_t i = 0; i < who.size(); ++i) {
    out.push_back(binding(std::move(statuses[2 * i]), std::move(statuses[2 * i + 1])));
  }
  return out;
}

std::optional<BudgetStatus> RedisBudgetView::budgetOf(const Principal& who, int64_t now_s) const {
  return std::move(budgetsOf({who}, now_s)[0]);
}

}  // namespace lg::billing::redis

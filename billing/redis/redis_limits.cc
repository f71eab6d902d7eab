#include "billing/redis/redis_limits.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

#include "billing/redis/limit_scripts.h"
#include "billing/settings_json.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/unix_time.h"
#include "common/url_redact.h"

namespace lg::billing::redis {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kWindowS = 60;
// A window's counter lives on one more minute: a give-back arrives while its
// window is current, and replicas' clocks differ by a little.
constexpr int64_t kWindowTtlS = 2 * kWindowS;
// A seed above this is held there (already far past any budget): the
// settlement's HINCRBY then cannot overflow int64.
constexpr Int128 kMaxSeed = Int128{1} << 62;
// Operations written per pass of the thread, so that admissions queued
// meanwhile are not held behind a long backlog (after an outage).
constexpr size_t kMaxBatch = 1024;
// Rounds of seeding one admission may take (a flush between two is rare).
constexpr int kMaxSeedRounds = 3;

spdlog::logger* billingLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// An amount the script returned (a decimal string of an int64).
Int128 amountOf(const RedisReply& r) { return r.asInt(0); }

RateLimits share(const RateLimits& l, int replicas) {
  auto part = [replicas](int64_t limit) { return limit <= 0 ? limit : std::max<int64_t>(1, limit / replicas); };
  return {part(l.requests_per_minute), part(l.tokens_per_minute)};
}

RateLimitState tighter(const RateLimitState& a, const RateLimitState& b) {
  if (a.limit == 0) return b;
  if (b.limit == 0) return a;
  return a.remaining <= b.remaining ? a : b;
}

}  // namespace

RedisLimits::ErrorOp RedisLimits::errorOf(Op::Kind k) {
  switch (k) {
    case Op::Kind::kSettle: return kErrSettle;
    case Op::Kind::kRelease: return kErrRelease;
    case Op::Kind::kGiveBack: return kErrGiveBack;
  }
  return kErrSettle;
}

std::string_view RedisLimits::opName(Op::Kind k) {
  switch (k) {
    case Op::Kind::kSettle: return "settlement";
    case Op::Kind::kRelease: return "release";
    case Op::Kind::kGiveBack: return "give-back";
  }
  return "operation";
}

std::string_view redisStateName(RedisState s) {
  switch (s) {
    case RedisState::kStarting: return "starting";
    case RedisState::kUp: return "up";
    case RedisState::kDown: return "down";
  }
  return "unknown";
}

struct RedisLimits::Job {
  LimitAsk ask;
  std::function<void(LimitOutcome)> done;
  struct Budget {
    BudgetScope scope;
    BudgetSetting setting;
    int64_t start_s = 0;  // of the period the request counts in
    std::string seed;     // "" until the script asked for one
  };
  std::vector<Budget> budgets;  // those that apply, key first
  struct Window {
    BudgetScope scope;
    char kind;  // 'r' requests, 't' tokens
    int64_t limit = 0;
    int64_t need = 0;
  };
  std::vector<Window> windows;
  int64_t window_start_s = 0;
  Clock::time_point queued;
  int rounds = 0;

  const std::string& idOf(BudgetScope scope) const { return scope == BudgetScope::kKey ? ask.who.key_id : ask.who.team; }
};

// ---------------------------------------------------------------- lifetime

RedisLimits::RedisLimits(RedisLimitsOptions options, Budgets& budgets, const SpendSource& source)
    : options_(std::move(options)),
      budgets_(budgets),
      source_(source),
      keys_(std::make_unique<LimitKeys>(options_.key_prefix)),
      scripts_(std::make_unique<LimitScripts>()),
      fallback_(RateLimitOptions{share(options_.rate.per_key, options_.fallback_replicas),
                                 share(options_.rate.per_team, options_.fallback_replicas)}),
      conn_(std::make_unique<RedisConnection>(options_.redis)),
      admission_seconds_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}) {
  for (const RedisScript* s : {&scripts_->admit, &scripts_->settle, &scripts_->release, &scripts_->refresh,
                               &scripts_->giveBack}) {
    conn_->addScript(s);
  }
}

Result<std::unique_ptr<RedisLimits>> RedisLimits::start(RedisLimitsOptions options, Budgets& budgets,
                                                        const SpendSource& source) {
  LG_RETURN_IF_ERROR(parseRedisUrl(options.redis.url).status());
  if (options.fallback_replicas < 1) return invalidArgument("fallback_replicas: expected >= 1");
  if (options.reservation_ttl < std::chrono::milliseconds(1)) return invalidArgument("reservation_ttl: expected > 0");
  std::unique_ptr<RedisLimits> limits(new RedisLimits(std::move(options), budgets, source));
  limits->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (limits->wake_fd_ < 0) return internalError("Redis limits: eventfd failed: " + std::string(std::strerror(errno)));
  limits->thread_ = std::thread([raw = limits.get()] { raw->run(); });
  return limits;
}

RedisLimits::~RedisLimits() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

int64_t RedisLimits::nowS() const { return options_.clock_s ? options_.clock_s() : unixSeconds(); }

bool RedisLimits::cooling() const {
  return Clock::now().time_since_epoch().count() < cooling_until_ns_.load(std::memory_order_relaxed);
}

// ------------------------------------------------------------ the callers' side

void RedisLimits::admit(LimitAsk ask, std::function<void(LimitOutcome)> done) {
  // A negative amount would lower what others see reserved: a mis-bill.
  LG_CHECK(!ask.cost || *ask.cost >= 0, "negative reservation ", ask.cost.value_or(0), " for ", ask.request_id);
  LG_CHECK(ask.tokens >= 0, "negative tokens ", ask.tokens, " for ", ask.request_id);
  auto job = std::make_unique<Job>();
  if (ask.cost) {
    for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
      const BudgetSetting b = budgets_.effective(scope, scope == BudgetScope::kKey ? ask.who.key_id : ask.who.team).budget;
      if (b.enabled) job->budgets.push_back({scope, b, budgetPeriodStart(b.period, ask.now_s), ""});
    }
  }
  job->window_start_s = floorDiv(nowS(), kWindowS) * kWindowS;
  const RateLimitOptions& r = options_.rate;
  for (const auto& [scope, limits] : {std::pair{BudgetScope::kKey, r.per_key}, std::pair{BudgetScope::kTeam, r.per_team}}) {
    if (limits.requests_per_minute > 0) job->windows.push_back({scope, 'r', limits.requests_per_minute, 1});
    if (limits.tokens_per_minute > 0) job->windows.push_back({scope, 't', limits.tokens_per_minute, ask.tokens});
  }
  job->ask = std::move(ask);
  job->done = std::move(done);
  if (job->budgets.empty() && job->windows.empty()) {
    LimitGrant nothing;  // no budget, no limit: nothing to ask Redis
    return job->done(std::move(nothing));
  }
  if (cooling()) {
    LimitOutcome out = decideWithoutRedis(*job);
    return job->done(std::move(out));
  }
  job->queued = Clock::now();
  {
    std::lock_guard lock(mu_);
    if (admitting_ && !stopping_) jobs_.push_back(std::move(job));
  }
  if (job) {  // not queued: the server is stopping
    count(kUnavailable);
    return job->done(LimitsUnavailable{"the server is stopping", 1});
  }
  wake();
}

void RedisLimits::stopAdmitting() {
  std::unique_lock lock(mu_);
  admitting_ = false;
  wake();
  answered_.wait(lock, [&] { return jobs_.empty() && jobs_in_flight_ == 0; });
}

LimitOutcome RedisLimits::decideWithoutRedis(Job& job) {
  if (!job.budgets.empty()) {
    count(kUnavailable);
    return LimitsUnavailable{"Redis is unreachable", std::max(1, (options_.redis.retry_ms + 999) / 1000)};
  }
  count(kFallback);
  RateDecision d = fallback_.admit(job.ask.who.key_id, job.ask.who.team, job.ask.tokens);
  if (!d.allowed) return d;
  LimitGrant g;
  g.rate = d;
  g.charge.tokens = job.ask.tokens;  // into the local buckets
  return g;
}

void RedisLimits::giveBack(const Principal& who, const RateCharge& charge, int64_t used) {
  if (!charge.shared) return fallback_.settle(who.key_id, who.team, charge.tokens, used);
  const int64_t unused = charge.tokens - std::clamp<int64_t>(used, 0, charge.tokens);
  if (unused <= 0) return;
  // Only into the window that was charged, while it is current: given to a
  // later window, the tokens would be admitted twice.
  if (charge.window_start_s != floorDiv(nowS(), kWindowS) * kWindowS) return;
  std::vector<std::string> keys;
  if (options_.rate.per_key.tokens_per_minute > 0) {
    keys.push_back(keys_->window(who.team, BudgetScope::kKey, who.key_id, 't', charge.window_start_s));
  }
  if (options_.rate.per_team.tokens_per_minute > 0) {
    keys.push_back(keys_->window(who.team, BudgetScope::kTeam, "", 't', charge.window_start_s));
  }
  if (keys.empty()) return;
  enqueue({Op::Kind::kGiveBack, scripts_->giveBack.call(keys, {std::to_string(unused)})});
}

void RedisLimits::releaseReservation(const BudgetReservation& r) {
  {
    std::lock_guard lock(mu_);
    if (settling_.erase(r.requestId()) > 0) {
      // Its settlement, queued before this, drops the reservation with it.
      live_.erase(r.requestId());
      return;
    }
  }
  const std::string& team = r.team();
  bool first = false;
  Op op{Op::Kind::kRelease,
        scripts_->release.call({keys_->reservation(team, r.requestId()), keys_->held(team, BudgetScope::kKey, r.keyId()),
                                keys_->heldSum(team, BudgetScope::kKey, r.keyId()),
                                keys_->held(team, BudgetScope::kTeam, ""), keys_->heldSum(team, BudgetScope::kTeam, "")},
                               {r.requestId()})};
  {
    // One lock for both: a refresh that saw the request live is sent before
    // this release, and one that did not never puts it back. Dropped (the
    // queue full), the reservation lasts until its TTL.
    std::lock_guard lock(mu_);
    live_.erase(r.requestId());
    queueLocked(std::move(op), &first);
  }
  if (first) wake();
}

void RedisLimits::committed(const LedgerEntry& entry) {
  const int64_t cost = entry.cost.total();
  if (cost <= 0) return;  // nothing spent; the reservation's release drops it
  const int64_t at_s = floorDiv(entry.start_us, 1'000'000);
  const std::string& team = entry.team;
  std::vector<std::string> keys = {keys_->reservation(team, entry.request_id), keys_->settled(team, entry.request_id),
                                   keys_->held(team, BudgetScope::kKey, entry.key_id),
                                   keys_->heldSum(team, BudgetScope::kKey, entry.key_id),
                                   keys_->held(team, BudgetScope::kTeam, ""), keys_->heldSum(team, BudgetScope::kTeam, "")};
  // Every period of both, whichever budget applies now: a budget changed
  // later finds its period counted (or unseeded, and seeded then).
  for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
    for (BudgetPeriodSetting p : {BudgetPeriodSetting::kDay, BudgetPeriodSetting::kMonth, BudgetPeriodSetting::kTotal}) {
      keys.push_back(keys_->spend(team, scope, entry.key_id, p, budgetPeriodStart(p, at_s)));
    }
  }
  Op op{Op::Kind::kSettle, scripts_->settle.call(keys, {entry.request_id, std::to_string(cost),
                                                        std::to_string(options_.reservation_ttl.count())})};
  bool first = false;
  {
    std::lock_guard lock(mu_);
    if (queueLocked(std::move(op), &first)) {
      if (live_.count(entry.request_id) > 0) settling_.insert(entry.request_id);
    } else {
      reseed_.emplace(team, entry.key_id);
      first = true;  // the deletion waits for nothing
    }
  }
  if (first) wake();
}

bool RedisLimits::queueLocked(Op op, bool* first) {
  if (ops_.size() + ops_in_flight_ < options_.max_queued_operations) {
    *first = ops_.empty();
    if (*first) ops_since_ = Clock::now();
    ops_.push_back(std::move(op));
    return true;
  }
  dropped_ops_.fetch_add(1, std::memory_order_relaxed);
  if (!overflow_logged_) {
    overflow_logged_ = true;
    billingLog()->error(
        "Redis: {} settlements, releases and give-backs wait for Redis; later ones are dropped, and the budgets "
        "they touch are seeded again from the ledger when it returns",
        ops_.size());
  }
  return false;
}

void RedisLimits::enqueue(Op op) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    queueLocked(std::move(op), &first);
  }
  if (first) wake();
}

bool RedisLimits::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  ops_retry_at_ = {};  // now, if Redis is back
  ops_now_ = true;
  wake();
  return flushed_.wait_for(lock, timeout, [&] {
    return ops_.empty() && ops_in_flight_ == 0 && reseed_.empty() && reseeding_.empty();
  });
}

size_t RedisLimits::pendingOperations() const {
  std::lock_guard lock(mu_);
  return ops_.size() + ops_in_flight_;
}

size_t RedisLimits::liveReservations() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

// ----------------------------------------------------------------- the thread

void RedisLimits::wake() {
  const uint64_t one = 1;
  // Fails only when the counter is full (it is not: the thread drains it).
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void RedisLimits::run() {
  const std::chrono::milliseconds every =
      options_.refresh_every ? *options_.refresh_every
                             : std::clamp(options_.reservation_ttl / 3, std::chrono::milliseconds(10),
                                          std::chrono::milliseconds(60'000));
  const auto command_timeout = std::chrono::milliseconds(options_.redis.command_timeout_ms);
  std::unique_lock lock(mu_);
  next_refresh_ = Clock::now() + every;
  std::optional<Clock::time_point> shutdown_until;
  for (;;) {
    if (stopping_ && !shutdown_until) shutdown_until = Clock::now() + options_.shutdown_flush;
    if (shutdown_until &&
        ((ops_.empty() && jobs_.empty() && pending_.empty() && reseed_.empty()) || Clock::now() >= *shutdown_until)) {
      break;
    }
    const bool refresh = !shutdown_until && every.count() > 0 && Clock::now() >= next_refresh_;
    if (refresh) next_refresh_ = Clock::now() + every;
    sendQueued(lock, refresh);  // unlocks while sending

    // Wait for a reply, new work, the next refresh or retry, or a timeout.
    const auto now = Clock::now();
    auto until = shutdown_until ? *shutdown_until : Clock::time_point::max();
    if (every.count() > 0 && !shutdown_until) until = std::min(until, next_refresh_);
    if (!ops_.empty()) {
      until = std::min(until, std::max({now, ops_retry_at_, ops_now_ ? now : ops_since_ + options_.operation_delay}));
    }
    if (conn_->awaited() > 0) until = std::min(until, conn_->lastProgress() + command_timeout);
    lock.unlock();
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {conn_->awaited() > 0 ? conn_->fd() : -1, POLLIN, 0}};
    int timeout_ms = -1;
    if (until != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(until - now).count(), 0, 60'000));
    }
    if (::poll(fds, 2, timeout_ms) > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t n = 0;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &n, sizeof n);
    }
    if (fds[1].fd >= 0 && fds[1].revents != 0) {
      std::vector<RedisConnection::Received> replies;
      std::vector<RedisConnection::Token> lost;
      const Status s = conn_->receive(replies, lost);
      if (!replies.empty()) setState(RedisState::kUp, Status::ok());
      for (RedisConnection::Received& r : replies) onReply(r.token, r.reply);
      if (!s.isOk()) onLost(lost, s);
    }
    if (conn_->awaited() > 0 && Clock::now() >= conn_->lastProgress() + command_timeout) {
      onLost(conn_->expire(), unavailable("Redis: no reply within " + std::to_string(command_timeout.count()) + " ms"));
    }
    lock.lock();
  }
  // Shutdown: admissions still waiting are answered (the server stops
  // serving before this); what was not sent in time is counted.
  std::deque<std::unique_ptr<Job>> left = std::move(jobs_);
  jobs_.clear();
  size_t unsent = ops_.size();
  ops_.clear();
  if (!reseed_.empty() || !reseeding_.empty()) {
    billingLog()->error(
        "Redis: the spend of {} key(s) that missed dropped settlements was not deleted for reseeding at shutdown: "
        "it stays below the ledger until the period renews",
        reseed_.size() + reseeding_.size());
  }
  lock.unlock();
  for (auto& [token, p] : pending_) {
    if (p.kind == Pending::Kind::kOp) ++unsent;
    if (p.kind == Pending::Kind::kJob) left.push_back(std::move(p.job));
  }
  pending_.clear();
  if (unsent > 0) {
    // A settlement lost here leaves the shared spend below the ledger until
    // the period renews or the counters are rebuilt (docs/billing.md).
    billingLog()->error("Redis: {} settlement(s), release(s) and give-back(s) not sent at shutdown", unsent);
    dropped_ops_.fetch_add(unsent, std::memory_order_relaxed);
  }
  lock.lock();
  ops_in_flight_ = 0;
  flushed_.notify_all();
  lock.unlock();
  for (auto& job : left) {
    count(kUnavailable);
    job->done(LimitsUnavailable{"the server is stopping", 1});
  }
  lock.lock();
  jobs_in_flight_ = 0;
  answered_.notify_all();
}

void RedisLimits::sendQueued(std::unique_lock<std::mutex>& lock, bool refresh) {
  const auto now = Clock::now();
  std::vector<std::unique_ptr<Job>> jobs;
  while (!jobs_.empty()) {
    jobs.push_back(std::move(jobs_.front()));
    jobs_.pop_front();
  }
  // Operations go with admissions, or once the first has waited its delay.
  std::vector<Op> ops;
  const bool ops_due = !jobs.empty() || ops_now_ || stopping_ || ops_.size() >= kMaxBatch ||
                       now >= ops_since_ + options_.operation_delay;
  if (now >= ops_retry_at_ && ops_due) {
    while (!ops_.empty() && ops.size() < kMaxBatch) {
      ops.push_back(std::move(ops_.front()));
      ops_.pop_front();
    }
    if (ops_.empty()) {
      ops_now_ = false;
    } else {
      ops_since_ = now;
    }
  }
  // Spend that missed a dropped settlement: deleted before anything else is
  // sent, so the next admission seeds it from the ledger (one deletion per
  // key at a time; what is dropped meanwhile waits for the next).
  std::vector<RedisCommand> reseeds;
  if (!reseed_.empty() && reseeding_.empty() && now >= ops_retry_at_) {
    reseeding_.swap(reseed_);
    for (const auto& [team, key_id] : reseeding_) reseeds.push_back(reseedCommand(team, key_id));
  }
  // Taken under the lock with the operations: a release queued after this
  // is sent after the refresh, one queued before is taken now or later (and
  // its request is no longer live), so a refresh never puts a released
  // reservation back.
  std::vector<std::pair<std::string, Live>> live;
  if (refresh) live.assign(live_.begin(), live_.end());
  ops_in_flight_ += ops.size();
  jobs_in_flight_ += jobs.size();
  if (ops_.empty()) overflow_logged_ = false;
  if (reseeds.empty() && ops.empty() && jobs.empty() && live.empty()) return;
  lock.unlock();
  // One write: deletions first (before any admission reads that spend);
  // admissions, whose replies someone waits for; refreshes; operations, in
  // their order.
  reseeds_awaited_ += reseeds.size();
  std::vector<std::pair<Pending, RedisCommand>> batch;
  batch.reserve(reseeds.size() + jobs.size() + live.size() + ops.size());
  for (RedisCommand& c : reseeds) batch.emplace_back(Pending{Pending::Kind::kReseed, {}, nullptr}, std::move(c));
  for (auto& job : jobs) {
    RedisCommand c = admitCommand(*job);
    batch.emplace_back(Pending{Pending::Kind::kJob, {}, std::move(job)}, std::move(c));
  }
  for (const auto& [id, l] : live) batch.emplace_back(Pending{Pending::Kind::kRefresh, {}, nullptr}, refreshCommand(id, l));
  for (Op& op : ops) {
    RedisCommand c = op.command;
    batch.emplace_back(Pending{Pending::Kind::kOp, std::move(op), nullptr}, std::move(c));
  }
  sendBatch(std::move(batch));
  lock.lock();
}

RedisCommand RedisLimits::reseedCommand(const std::string& team, const std::string& key_id) const {
  const int64_t now = nowS();
  RedisCommand del{"DEL"};
  for (BudgetScope scope : {BudgetScope::kKey, BudgetScope::kTeam}) {
    for (BudgetPeriodSetting p : {BudgetPeriodSetting::kDay, BudgetPeriodSetting::kMonth, BudgetPeriodSetting::kTotal}) {
      del.push_back(keys_->spend(team, scope, key_id, p, budgetPeriodStart(p, now)));
    }
  }
  return del;
}

void RedisLimits::reseedDone(bool sent) {
  std::lock_guard lock(mu_);
  if (sent) {
    if (--reseeds_awaited_ > 0) return;
    reseeding_.clear();
  } else {
    // Not deleted: again when Redis returns.
    reseed_.merge(reseeding_);
    reseeding_.clear();
    reseeds_awaited_ = 0;
  }
  if (ops_in_flight_ == 0 && ops_.empty() && reseed_.empty()) flushed_.notify_all();
}

void RedisLimits::send(Pending pending, const RedisCommand& command) {
  std::vector<std::pair<Pending, RedisCommand>> one;
  one.emplace_back(std::move(pending), command);
  sendBatch(std::move(one));
}

void RedisLimits::sendBatch(std::vector<std::pair<Pending, RedisCommand>> batch) {
  std::vector<RedisConnection::Outgoing> out;
  out.reserve(batch.size());
  for (auto& [pending, command] : batch) {
    const RedisConnection::Token token = next_token_++;
    pending_.emplace(token, std::move(pending));
    out.push_back({token, std::move(command)});
  }
  std::vector<RedisConnection::Token> lost;
  if (Status s = conn_->send(std::move(out), lost); !s.isOk()) onLost(lost, s);
}

void RedisLimits::answer(std::unique_ptr<Job> job, LimitOutcome out) {
  admission_seconds_.observe(std::chrono::duration<double>(Clock::now() - job->queued).count());
  job->done(std::move(out));
  job.reset();
  std::lock_guard lock(mu_);
  if (--jobs_in_flight_ == 0 && jobs_.empty()) answered_.notify_all();
}

void RedisLimits::opDone() {
  std::lock_guard lock(mu_);
  if (--ops_in_flight_ == 0 && ops_.empty()) flushed_.notify_all();
}

void RedisLimits::onReply(RedisConnection::Token token, const RedisReply& reply) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  switch (p.kind) {
    case Pending::Kind::kOp:
      if (reply.isError()) {
        // Refused by Redis itself (a key of the wrong type, say): sending it
        // again would be refused again.
        const Op::Kind k = p.op.kind;
        error(errorOf(k));
        billingLog()->error("Redis refused a {}: {}", opName(k), reply.str);
      }
      opDone();
      break;
    case Pending::Kind::kRefresh:
      if (reply.isError()) error(kErrRefresh);
      break;
    case Pending::Kind::kReseed:
      if (reply.isError()) {
        error(kErrSettle);
        billingLog()->error("Redis refused to delete spend for reseeding: {}", reply.str);
      }
      reseedDone(true);
      break;
    case Pending::Kind::kJob: {
      std::optional<LimitOutcome> out = decided(*p.job, reply, seeds_read_);
      if (out) {
        answer(std::move(p.job), std::move(*out));
      } else {
        // Seeded now: asked again at once.
        RedisCommand c = admitCommand(*p.job);
        send(Pending{Pending::Kind::kJob, {}, std::move(p.job)}, c);
      }
      break;
    }
  }
  // Seeds read for a burst of admissions (many requests of one team ask for
  // the same period at once after a flush) are kept until it is over.
  if (pending_.empty()) seeds_read_.clear();
}

void RedisLimits::onLost(const std::vector<RedisConnection::Token>& tokens, const Status& why) {
  setState(RedisState::kDown, why);
  std::vector<Op> back;
  bool refresh_lost = false, admit_lost = false, reseed_lost = false;
  for (RedisConnection::Token token : tokens) {
    auto it = pending_.find(token);
    if (it == pending_.end()) continue;
    Pending p = std::move(it->second);
    pending_.erase(it);
    switch (p.kind) {
      case Pending::Kind::kOp: {
        const Op::Kind k = p.op.kind;
        error(errorOf(k));
        back.push_back(std::move(p.op));
        break;
      }
      case Pending::Kind::kRefresh:
        refresh_lost = true;
        break;
      case Pending::Kind::kReseed:
        reseed_lost = true;
        break;
      case Pending::Kind::kJob: {
        admit_lost = true;
        LimitOutcome out = decideWithoutRedis(*p.job);
        answer(std::move(p.job), std::move(out));
        break;
      }
    }
  }
  if (refresh_lost) error(kErrRefresh);
  if (admit_lost) error(kErrAdmit);
  if (reseed_lost) {
    error(kErrSettle);
    reseedDone(false);
  }
  if (pending_.empty()) seeds_read_.clear();
  std::lock_guard lock(mu_);
  // Back to the front, in their order, for when Redis returns.
  for (auto it = back.rbegin(); it != back.rend(); ++it) ops_.push_front(std::move(*it));
  ops_in_flight_ -= back.size();
  if (!back.empty()) ops_retry_at_ = Clock::now() + conn_->retryIn();
  if (ops_in_flight_ == 0 && ops_.empty()) flushed_.notify_all();
}

RedisCommand RedisLimits::admitCommand(const Job& job) const {
  const LimitAsk& a = job.ask;
  const std::string& team = a.who.team;
  std::vector<std::string> keys = {keys_->reservation(team, a.request_id)};
  std::vector<std::string> args = {a.request_id, std::to_string(a.cost.value_or(0)),
                                   std::to_string(options_.reservation_ttl.count()),
                                   std::to_string(job.budgets.size())};
  for (const Job::Budget& b : job.budgets) {
    keys.push_back(keys_->spend(team, b.scope, a.who.key_id, b.setting.period, b.start_s));
    keys.push_back(keys_->held(team, b.scope, a.who.key_id));
    keys.push_back(keys_->heldSum(team, b.scope, a.who.key_id));
    args.push_back(b.scope == BudgetScope::kKey ? "k" : "t");
    args.push_back(std::to_string(b.setting.limit));
    args.push_back(b.seed);
    // A period's counter outlives it by a day (late settlements, clocks).
    const int64_t end = budgetPeriodEnd(b.setting.period, b.start_s);
    args.push_back(std::to_string(end == 0 ? 0 : end + 86400));
  }
  args.push_back(std::to_string(job.windows.size()));
  for (const Job::Window& w : job.windows) {
    keys.push_back(keys_->window(team, w.scope, a.who.key_id, w.kind, job.window_start_s));
    args.push_back(std::to_string(w.limit));
    args.push_back(std::to_string(w.need));
    args.push_back(std::to_string(kWindowTtlS));
  }
  return scripts_->admit.call(keys, args);
}

RedisCommand RedisLimits::refreshCommand(const std::string& request_id, const Live& live) const {
  const std::string& team = live.team;
  return scripts_->refresh.call(
      {keys_->reservation(team, request_id), keys_->settled(team, request_id),
       keys_->held(team, BudgetScope::kKey, live.key_id), keys_->heldSum(team, BudgetScope::kKey, live.key_id),
       keys_->held(team, BudgetScope::kTeam, ""), keys_->heldSum(team, BudgetScope::kTeam, "")},
      {request_id, live.amount, live.key ? "1" : "0", live.team_held ? "1" : "0",
       std::to_string(options_.reservation_ttl.count())});
}

std::optional<LimitOutcome> RedisLimits::decided(Job& job, const RedisReply& reply,
                                                 std::unordered_map<std::string, std::string>& seeds) {
  const LimitAsk& a = job.ask;
  auto failClosed = [&](std::string_view why) -> LimitOutcome {
    error(kErrAdmit);
    billingLog()->error("Redis: the admission of request {} failed: {}", a.request_id, why);
    return decideWithoutRedis(job);
  };
  if (reply.type != RedisReply::Type::kArray || reply.elements.empty()) {
    return failClosed(reply.isError() ? reply.str : "an unexpected reply");
  }
  const std::vector<RedisReply>& e = reply.elements;
  const int64_t now_s = nowS();
  const int64_t window_end = job.window_start_s + kWindowS;
  switch (e[0].asInt(-1)) {
    case kAdmitted:
    case kAlreadyAdmitted: {
      LimitGrant g;
      g.rate.allowed = true;
      for (size_t j = 0; j < job.windows.size() && j + 1 < e.size(); ++j) {
        const Job::Window& w = job.windows[j];
        RateLimitState s;
        s.limit = w.limit;
        s.remaining = std::max<int64_t>(0, w.limit - e[j + 1].asInt(w.limit));
        s.reset_s = static_cast<double>(std::max<int64_t>(0, window_end - now_s));
        RateLimitState& into = w.kind == 'r' ? g.rate.requests : g.rate.tokens;
        into = tighter(into, s);
      }
      g.charge.tokens = a.tokens;
      g.charge.shared = true;
      g.charge.window_start_s = job.window_start_s;
      if (!job.budgets.empty()) {
        const int64_t amount = a.cost.value_or(0);
        g.reservation = BudgetReservation(this, a.request_id, a.who.key_id, a.who.team, amount);
        Live l{a.who.team, a.who.key_id, std::to_string(amount), false, false};
        for (const Job::Budget& b : job.budgets) (b.scope == BudgetScope::kKey ? l.key : l.team_held) = true;
        std::lock_guard lock(mu_);
        live_.emplace(a.request_id, std::move(l));
      }
      count(kAdmitted);
      return g;
    }
    case kOverBudget: {
      const int64_t i = e.size() >= 4 ? e[1].asInt(0) : 0;
      if (i < 1 || i > static_cast<int64_t>(job.budgets.size())) return failClosed("a malformed refusal");
      const Job::Budget& b = job.budgets[static_cast<size_t>(i - 1)];
      BudgetRefusal refused;
      refused.amount = a.cost.value_or(0);
      BudgetStatus& st = refused.budget;
      st.scope = std::string(budgetScopeName(b.scope));
      st.period = std::string(budgetPeriodName(b.setting.period));
      st.period_start_s = b.start_s;
      st.period_end_s = budgetPeriodEnd(b.setting.period, b.start_s);
      st.limit = b.setting.limit;
      st.soft_limit = b.setting.soft_limit;
      st.spent = amountOf(e[2]);
      st.reserved = amountOf(e[3]);
      budgets_.countRefusal(b.scope);
      count(kOverBudget);
      return refused;
    }
    case kOverLimit: {
      const int64_t j = e.size() >= 3 ? e[1].asInt(0) : 0;
      if (j < 1 || j > static_cast<int64_t>(job.windows.size())) return failClosed("a malformed refusal");
      const Job::Window& w = job.windows[static_cast<size_t>(j - 1)];
      RateDecision d;
      d.allowed = false;
      d.exhausted = w.kind == 'r' ? "requests" : "tokens";
      d.subject = w.scope == BudgetScope::kKey ? "key" : "team";
      // A fixed window: it fits when the next minute starts, unless it never does.
      d.retry_after_s = w.need > w.limit ? -1.0 : static_cast<double>(std::max<int64_t>(1, window_end - now_s));
      RateLimitState s;
      s.limit = w.limit;
      s.remaining = std::max<int64_t>(0, w.limit - e[2].asInt(w.limit));
      s.reset_s = static_cast<double>(std::max<int64_t>(0, window_end - now_s));
      (w.kind == 'r' ? d.requests : d.tokens) = s;
      count(kRateLimited);
      return d;
    }
    case kNeedsSeed: {
      if (++job.rounds > kMaxSeedRounds) return failClosed("its counters were lost again while being seeded");
      for (size_t k = 1; k < e.size(); ++k) {
        const int64_t i = e[k].asInt(0);
        if (i < 1 || i > static_cast<int64_t>(job.budgets.size())) return failClosed("a malformed seed request");
        Job::Budget& b = job.budgets[static_cast<size_t>(i - 1)];
        const std::string key = keys_->spend(a.who.team, b.scope, a.who.key_id, b.setting.period, b.start_s);
        if (auto it = seeds.find(key); it != seeds.end()) {
          b.seed = it->second;
          continue;
        }
        auto spent = source_.spent(b.scope, job.idOf(b.scope), b.setting.period, b.start_s);
        if (!spent.isOk()) {
          error(kErrSeed);
          return failClosed("reading what was spent failed: " + spent.status().toString());
        }
        b.seed = std::to_string(static_cast<int64_t>(std::clamp<Int128>(*spent, 0, kMaxSeed)));
        seeds.emplace(key, b.seed);
        seeds_.fetch_add(1, std::memory_order_relaxed);
        billingLog()->info("Redis: the {} {}'s spend this {} (from {}) read from the ledger: {} pico-dollars",
                           budgetScopeName(b.scope), job.idOf(b.scope), budgetPeriodName(b.setting.period), b.start_s,
                           b.seed);
      }
      return std::nullopt;
    }
    default:
      return failClosed("an unknown reply code");
  }
}

void RedisLimits::setState(RedisState s, const Status& why) {
  const RedisState before = state_.exchange(s, std::memory_order_relaxed);
  if (s == RedisState::kDown) {
    cooling_until_ns_.store((Clock::now() + conn_->retryIn()).time_since_epoch().count(), std::memory_order_relaxed);
    if (!logged_down_) {
      logged_down_ = true;
      billingLog()->warn(
          "Redis unreachable ({}): requests under a budget are refused (503 budget_store_unavailable) and rate "
          "limits are this replica's share until it returns",
          redactPasswordIn(why.message(), options_.redis.url));
    }
  } else if (s == RedisState::kUp) {
    cooling_until_ns_.store(0, std::memory_order_relaxed);
    if (logged_down_ || before == RedisState::kStarting) {
      billingLog()->info("Redis reachable: budgets and rate limits are shared by the replicas");
      logged_down_ = false;
    }
  }
}

// ------------------------------------------------------------------- metrics

void RedisLimits::collect(metrics::ExpositionWriter& w) const {
  w.gauge("latentgate_redis_up", "1 when the last exchange with Redis (limits.redis_url) succeeded, else 0.",
          int64_t{state() == RedisState::kUp ? 1 : 0});
  w.histogram("latentgate_redis_admission_seconds",
              "Time from queueing an admission for Redis to its decision (the thread's wake-up and the Lua script's round trip, seeds included).",
              admission_seconds_.snapshot());
  if (w.family("latentgate_redis_admissions_total",
               "Admissions that needed the shared limits, by outcome: admitted, over_budget, rate_limited, "
               "unavailable (503: a budget applied and Redis was away), fallback (rate limits only, decided by this "
               "replica's share while Redis was away).",
               metrics::MetricType::kCounter)) {
    static constexpr const char* kNames[kOutcomes] = {"admitted", "over_budget", "rate_limited", "unavailable",
                                                      "fallback"};
    for (size_t i = 0; i < kOutcomes; ++i) {
      w.sample(metrics::Labels{{"outcome", kNames[i]}}, outcomes_[i].load(std::memory_order_relaxed));
    }
  }
  if (w.family("latentgate_redis_errors_total",
               "Redis operations that failed (unreachable, timed out, or refused), by operation.",
               metrics::MetricType::kCounter)) {
    static constexpr const char* kNames[kErrorOps] = {"admit", "settle", "release", "give_back", "refresh", "seed"};
    for (size_t i = 0; i < kErrorOps; ++i) {
      w.sample(metrics::Labels{{"op", kNames[i]}}, errors_[i].load(std::memory_order_relaxed));
    }
  }
  w.counter("latentgate_redis_seeds_total",
            "Budget periods whose shared spend was missing (Redis restarted or flushed, or never counted) and was "
            "seeded from the ledger.",
            seeds_.load(std::memory_order_relaxed));
  w.gauge("latentgate_redis_pending_operations",
          "Settlements, releases and token give-backs waiting to reach Redis (they grow while it is away).",
          static_cast<uint64_t>(pendingOperations()));
  w.gauge("latentgate_redis_live_reservations",
          "Budget reservations this replica holds in Redis for requests still running.",
          static_cast<uint64_t>(liveReservations()));
  w.counter("latentgate_redis_dropped_operations_total",
            "Settlements, releases and give-backs never sent: Redis away through shutdown (the shared spend is "
            "below the ledger by these until the period renews), or the queue full during an outage (the budgets "
            "they touch are seeded again from the ledger when Redis returns).",
            dropped_ops_.load(std::memory_order_relaxed));
}

}  // namespace lg::billing::redis

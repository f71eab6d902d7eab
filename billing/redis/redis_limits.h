// RedisLimits: budgets and per-minute limits shared by every replica through
// Redis (limits.redis_url; docs/billing.md, "Budgets and limits shared by
// replicas"). Without it each replica counts in its own memory and N
// replicas together spend N budgets.
//
// Admission is one Lua script per request (limit_scripts.h has the keys):
// for each budget that applies (the key's, the team's: Budgets::effective,
// this replica's settings), spent in the request's period + the live
// reservations + this request's most <= limit; then each per-minute window
// (requests and tokens, key and team; Envoy-style fixed windows, keys named
// by the minute they start); and only when everything fits, the reservation
// (its own key with a TTL, and a member scored by its expiry in the key's and
// team's held sets) and the windows are charged. Nothing is charged when
// anything refuses.
//
// Settlement: a committed ledger entry (this is a CommitObserver) adds its
// cost to the spend of its key's and team's day, month and total and drops
// its reservation, once per request id (a marker key, in the same script);
// a reservation given back without an entry just drops it. Both are queued
// and applied in order by the one thread, so the ledger's committer never
// waits on Redis, and kept while Redis is away (they are retried; the
// reservation's TTL is the backstop for a replica that dies).
//
// Lost counters (Redis restarted empty, flushed): a period's spend hash that
// is not seeded makes the script ask for seeds; the thread asks the
// SpendSource (the durable records) and runs the script again with them;
// the first seed wins. Reservations of requests still running here are put
// back by the periodic refresh, which also keeps them from expiring.
//
// Redis unreachable: a request a budget applies to is refused
// (LimitsUnavailable: 503 budget_store_unavailable); one with rate limits
// only is decided by a local RateLimiter holding 1/fallback_replicas of each
// limit. While the connection cools down after a failure, these decisions
// are made inline, at no cost.
//
// Threads: admit() decides inline when nothing applies or Redis is known to
// be away; otherwise it queues the request and wakes the thread, which writes
// everything queued (settlements, releases, refreshes, admissions) to its one
// connection at once, whatever is still awaited there, and calls `done` as
// each reply arrives: no admission waits for another's batch to come back.
// Every public method may be called from any thread; none blocks on Redis.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "billing/admission_limits.h"
#include "billing/budgets.h"
#include "billing/ledger.h"
#include "billing/redis/redis_connection.h"
#include "billing/spend_source.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::billing::redis {

class LimitKeys;
struct LimitScripts;

struct RedisLimitsOptions {
  RedisOptions redis;
  std::string key_prefix = "lg:";
  // How long a reservation outlives its replica: the refresh extends it
  // while the request runs, so a dead replica's reservations free their
  // budget after this.
  std::chrono::milliseconds reservation_ttl{15 * 60 * 1000};
  // How often running requests' reservations are extended (and put back when
  // lost); nullopt: a third of the TTL, at most a minute; zero: never (tests).
  std::optional<std::chrono::milliseconds> refresh_every;
  RateLimitOptions rate;     // limits.*_per_minute: for all replicas together
  int fallback_replicas = 1; // while Redis is away each replica enforces rate / this
  // Settlements, releases and give-backs held while Redis is away, at most;
  // past it they are dropped, and the budgets a dropped settlement touched
  // are deleted from Redis when it returns, so that they are seeded again
  // from the ledger (which has the entry) instead of growing memory without
  // bound through a long outage.
  size_t max_queued_operations = 50'000;
  // How long settlements, releases and give-backs may wait to be written
  // with others (or with the next admission): none is urgent, since until
  // it lands the reservation or the tokens still count (a refusal can come
  // sooner, never later), and writing them together saves Redis and this
  // replica a wake-up each.
  std::chrono::milliseconds operation_delay{2};
  // At shutdown, queued settlements are sent for at most this long.
  std::chrono::milliseconds shutdown_flush{2000};
  std::function<int64_t()> clock_s;  // Unix seconds (the windows); empty: the system clock
};

enum class RedisState : uint8_t { kStarting, kUp, kDown };
std::string_view redisStateName(RedisState s);  // "starting", "up", "down"

class RedisLimits final : public AdmissionLimits, public ReservationHolder, public CommitObserver {
 public:
  // Starts the thread (it connects on first use; Redis may be away). `budgets`
  // says which budgets apply and counts refusals; `source` seeds lost
  // counters. Both must outlive this. Register it as the ledger's observer
  // after Budgets (Ledger::addObserver).
  static Result<std::unique_ptr<RedisLimits>> start(RedisLimitsOptions options, Budgets& budgets,
                                                    const SpendSource& source);
  // Stops the thread after sending what is queued (bounded by shutdown_flush).
  ~RedisLimits() override;
  RedisLimits(const RedisLimits&) = delete;
  RedisLimits& operator=(const RedisLimits&) = delete;

  // AdmissionLimits
  void admit(LimitAsk ask, std::function<void(LimitOutcome)> done) override;
  void giveBack(const Principal& who, const RateCharge& charge, int64_t used) override;
  const RateLimitOptions& rateOptions() const override { return options_.rate; }
  // ReservationHolder: a reservation given back (with or without an entry).
  void releaseReservation(const BudgetReservation& r) override;
  // CommitObserver: a committed entry's cost counts against its key and team.
  void committed(const LedgerEntry& entry) override;

  // Answers every admission still queued or under way and refuses new ones
  // (LimitsUnavailable) from then on; returns once none is left. The server
  // calls it when it stops, before what the admissions' callbacks use goes.
  void stopAdmitting();

  RedisState state() const { return state_.load(std::memory_order_relaxed); }
  // Waits until every queued settlement, release and give-back was applied
  // (true), or `timeout` passed (false). For tests and shutdown.
  bool flush(std::chrono::milliseconds timeout);
  size_t pendingOperations() const;
  size_t liveReservations() const;
  // latentgate_redis_* families (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

  struct Job;  // one admission on its way through the thread (redis_limits.cc)

 private:
  // A write that must reach Redis (settle, release, give-back), in order.
  struct Op {
    enum class Kind : uint8_t { kSettle, kRelease, kGiveBack };
    Kind kind;
    RedisCommand command;
  };
  // A reservation of a request still running here (the refresh keeps it).
  struct Live {
    std::string team, key_id, amount;
    bool key = false, team_held = false;
  };
  enum Outcome : uint8_t { kAdmitted, kOverBudget, kRateLimited, kUnavailable, kFallback, kOutcomes };
  enum ErrorOp : uint8_t { kErrAdmit, kErrSettle, kErrRelease, kErrGiveBack, kErrRefresh, kErrSeed, kErrorOps };

  // What the thread sent and awaits the reply of, by its token.
  struct Pending {
    enum class Kind : uint8_t { kOp, kRefresh, kJob, kReseed };
    Kind kind;
    Op op;                     // kOp
    std::unique_ptr<Job> job;  // kJob
  };

  RedisLimits(RedisLimitsOptions options, Budgets& budgets, const SpendSource& source);
  void run();
  void wake();  // the thread: new work, or stop
  // Sends everything queued (operations in order, then the refreshes when
  // `refresh`, then admissions), unlocking while it writes.
  void sendQueued(std::unique_lock<std::mutex>& lock, bool refresh);
  void send(Pending pending, const RedisCommand& command);
  // Registers what `batch` awaits and writes it in one go.
  void sendBatch(std::vector<std::pair<Pending, RedisCommand>> batch);
  void onReply(RedisConnection::Token token, const RedisReply& reply);
  // The connection failed with these awaited: admissions are decided
  // without Redis, operations go back to the front of the queue.
  void onLost(const std::vector<RedisConnection::Token>& tokens, const Status& why);
  void answer(std::unique_ptr<Job> job, LimitOutcome out);
  void opDone();
  LimitOutcome decideWithoutRedis(Job& job);
  RedisCommand admitCommand(const Job& job) const;
  RedisCommand refreshCommand(const std::string& request_id, const Live& live) const;
  // The reply of the admit script: an outcome, or nullopt when the job needs
  // seeds (then filled in, or an outcome when the source failed). `seeds`:
  // those read in this round, by spend key (many requests of one team ask
  // for the same period at once after a flush).
  std::optional<LimitOutcome> decided(Job& job, const RedisReply& reply,
                                      std::unordered_map<std::string, std::string>& seeds);
  // Queues an operation, or drops it (false) when the queue is full;
  // *first: the queue was empty (the thread must learn when to send it).
  bool queueLocked(Op op, bool* first);
  void enqueue(Op op);
  void setState(RedisState s, const Status& why);
  void count(Outcome o) { outcomes_[o].fetch_add(1, std::memory_order_relaxed); }
  void error(ErrorOp op) { errors_[op].fetch_add(1, std::memory_order_relaxed); }
  static ErrorOp errorOf(Op::Kind k);
  static std::string_view opName(Op::Kind k);
  RedisCommand reseedCommand(const std::string& team, const std::string& key_id) const;
  void reseedDone(bool sent);
  int64_t nowS() const;
  bool cooling() const;

  const RedisLimitsOptions options_;
  Budgets& budgets_;
  const SpendSource& source_;
  std::unique_ptr<LimitKeys> keys_;
  std::unique_ptr<LimitScripts> scripts_;
  RateLimiter fallback_;                 // this replica's share, while Redis is away
  std::unique_ptr<RedisConnection> conn_;  // the thread's alone

  mutable std::mutex mu_;
  int wake_fd_ = -1;  // an eventfd the thread polls beside Redis's socket
  std::condition_variable flushed_;  // ops_ and ops_in_flight_ became empty
  std::condition_variable answered_;  // jobs_ and jobs_in_flight_ became empty
  std::deque<std::unique_ptr<Job>> jobs_;          // guarded by mu_
  std::deque<Op> ops_;                              // guarded by mu_
  size_t ops_in_flight_ = 0;                        // guarded by mu_: taken by the thread, not yet applied
  size_t jobs_in_flight_ = 0;                       // guarded by mu_: taken by the thread, not yet answered
  // The thread's alone: what awaits a reply, and seeds read for the
  // admissions awaited now.
  std::unordered_map<RedisConnection::Token, Pending> pending_;
  RedisConnection::Token next_token_ = 1;
  std::unordered_map<std::string, std::string> seeds_read_;
  bool admitting_ = true;                           // guarded by mu_; false after stopAdmitting()
  std::unordered_map<std::string, Live> live_;      // guarded by mu_; by request id
  // Live reservations whose entry's settlement is queued: the settlement
  // drops the reservation, so their release sends nothing.
  std::unordered_set<std::string> settling_;        // guarded by mu_
  // Keys and teams a dropped settlement touched: their spend is deleted
  // from Redis when it answers again, and seeded from the ledger then.
  std::set<std::pair<std::string, std::string>> reseed_;      // guarded by mu_; (team, key id)
  std::set<std::pair<std::string, std::string>> reseeding_;   // guarded by mu_; their deletions sent, not yet answered
  size_t reseeds_awaited_ = 0;                                 // the thread's
  bool overflow_logged_ = false;                    // guarded by mu_
  std::chrono::steady_clock::time_point ops_since_{};  // guarded by mu_: when ops_ last became non-empty
  bool ops_now_ = false;                            // guarded by mu_: flush() asked for them
  bool stopping_ = false;                           // guarded by mu_
  std::chrono::steady_clock::time_point ops_retry_at_{};  // guarded by mu_
  std::chrono::steady_clock::time_point next_refresh_{};  // guarded by mu_

  std::atomic<RedisState> state_{RedisState::kStarting};
  std::atomic<int64_t> cooling_until_ns_{0};  // steady clock: decide inline until then
  std::array<std::atomic<uint64_t>, kOutcomes> outcomes_{};
  std::array<std::atomic<uint64_t>, kErrorOps> errors_{};
  std::atomic<uint64_t> seeds_{0};
  std::atomic<uint64_t> dropped_ops_{0};
  metrics::AtomicHistogram admission_seconds_;
  bool logged_down_ = false;  // the thread's: one warning per outage, one line at recovery

  std::thread thread_;
};

}  // namespace lg::billing::redis

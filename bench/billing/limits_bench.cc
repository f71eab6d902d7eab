// limits_bench: the round trip of one admission (a budget reservation and
// the per-minute charge of a request) through the Lua script in a local
// Redis (billing/redis/redis_limits.h), against the same admission in this
// replica's memory (LocalLimits: Budgets + RateLimiter), at C closed-loop
// clients (threads) at once (docs/billing.md, "Budgets and limits shared by
// replicas").
//
// Every admission checks a key budget and a team budget (large enough never
// to refuse) and four per-minute windows (requests and tokens, key and
// team, likewise); each client has its own key, and the clients share 4
// teams. What an admitted request then does is what a request does when it
// ends: its entry is settled (Budgets, or the settle script) and its
// reservation released; that work is not timed, but in Redis it shares the
// pipeline with the admissions, as it does in a server.
//
// Usage: limits_bench [--redis-url URL] [--clients 1,64] [--seconds 5]
// Without --redis-url it starts a private redis-server (tests/support).
// Prints one JSON object per run and a summary.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "billing/admission_limits.h"
#include "billing/billing_db.h"
#include "billing/budgets.h"
#include "billing/ledger.h"
#include "billing/redis/redis_limits.h"
#include "billing/spend_source.h"
#include "common/unix_time.h"
#include "tests/support/temp_dir.h"
#ifdef LG_BENCH_PRIVATE_REDIS
#include "tests/support/redis_server.h"
#endif

namespace lg::billing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kTeams = 4;

double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())))];
}

LedgerEntry entryOf(const std::string& id, const Principal& who, int64_t start_s, int64_t cost) {
  LedgerEntry e;
  e.request_id = id;
  e.key_id = who.key_id;
  e.team = who.team;
  e.start_us = start_s * 1'000'000;
  e.output_tokens = cost;
  e.prices.rates = Rates{0, 0, 1};
  e.status = EntryStatus::kCompleted;
  e.price();
  return e;
}

// C clients admitting in a closed loop for `seconds`: each admission's
// round trip, then the request's end (settle + release), untimed.
json run(const std::string& name, AdmissionLimits& limits, CommitObserver& settle, int clients, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> refused{0};
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  const int64_t now_s = unixSeconds();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const Principal who{"key_" + std::to_string(c), "team-" + std::to_string(c % kTeams), ""};
      auto& mine = latencies[static_cast<size_t>(c)];
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::string id = name + "-" + std::to_string(c) + "-" + std::to_string(i);
        std::promise<LimitOutcome> decided;
        auto outcome = decided.get_future();
        const auto t0 = Clock::now();
        limits.admit(LimitAsk{who, id, 1000, 100, now_s}, [&decided](LimitOutcome o) { decided.set_value(std::move(o)); });
        LimitOutcome o = outcome.get();
        mine.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        auto* grant = std::get_if<LimitGrant>(&o);
        if (grant == nullptr) {
          refused.fetch_add(1);
          continue;
        }
        settle.committed(entryOf(id, who, now_s, 700));
        grant->reservation.release();
        limits.giveBack(who, grant->charge, 80);
      }
    });
  }
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : latencies) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  json out = {{"limits", name},
              {"clients", clients},
              {"admissions", all.size()},
              {"refused", refused.load()},
              {"admissions_per_s", static_cast<double>(all.size()) / elapsed},
              {"p50_us", percentile(all, 0.50) * 1e6},
              {"p90_us", percentile(all, 0.90) * 1e6},
              {"p99_us", percentile(all, 0.99) * 1e6},
              {"p999_us", percentile(all, 0.999) * 1e6},
              {"max_us", all.empty() ? 0 : all.back() * 1e6}};
  std::cout << out.dump() << std::endl;
  return out;
}

int benchMain(int argc, char** argv) {
  CLI::App app{"limits_bench: admission round trip through Redis's Lua script vs in memory"};
  std::string redis_url;
  std::string clients_list = "1,64";
  double seconds = 5;
  app.add_option("--redis-url", redis_url, "a Redis to use (its lg:bench: keys); empty: start a private one");
  app.add_option("--clients", clients_list, "comma-separated client (thread) counts");
  app.add_option("--seconds", seconds, "seconds per run");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> client_counts;
  std::stringstream ss(clients_list);
  for (std::string part; std::getline(ss, part, ',');) client_counts.push_back(std::stoi(part));

#ifdef LG_BENCH_PRIVATE_REDIS
  std::unique_ptr<test::RedisServer> private_redis;
  if (redis_url.empty()) {
    std::string error;
    private_redis = test::RedisServer::create(&error);
    if (!private_redis) {
      std::cerr << "starting redis-server failed: " << error << "\n";
      return 1;
    }
    redis_url = private_redis->url();
  }
#endif
  if (redis_url.empty()) {
    std::cerr << "--redis-url is required (this build has no private redis-server support)\n";
    return 1;
  }

  test::TempDir dir("lg_limits_bench");
  auto db = BillingDb::open(dir.file("billing"));
  auto ledger = db.isOk() ? Ledger::open(**db) : Result<std::unique_ptr<Ledger>>(db.status());
  if (!ledger.isOk()) {
    std::cerr << ledger.status().toString() << "\n";
    return 1;
  }
  // Budgets and limits that apply to every request and never refuse one.
  BudgetSetting huge;
  huge.enabled = true;
  huge.limit = int64_t{1} << 60;
  huge.period = BudgetPeriodSetting::kMonth;
  huge.soft_limit = huge.limit;
  auto budgets = Budgets::open(**db, **ledger, BudgetOptions{huge, huge}, unixSeconds());
  if (!budgets.isOk()) {
    std::cerr << budgets.status().toString() << "\n";
    return 1;
  }
  RateLimitOptions rate;
  rate.per_key = {int64_t{1} << 40, int64_t{1} << 50};
  rate.per_team = {int64_t{1} << 40, int64_t{1} << 50};
  RateLimiter limiter(rate);
  LocalLimits local(budgets->get(), limiter);
  LedgerSpendSource source(**budgets, **ledger);

  json runs = json::array();
  for (int c : client_counts) {
    runs.push_back(run("memory", local, **budgets, c, seconds));
    redis::RedisLimitsOptions o;
    o.redis.url = redis_url;
    o.key_prefix = "lg:bench:";
    o.rate = rate;
    auto shared = redis::RedisLimits::start(std::move(o), **budgets, source);
    if (!shared.isOk()) {
      std::cerr << shared.status().toString() << "\n";
      return 1;
    }
    runs.push_back(run("redis", **shared, **shared, c, seconds));
    (*shared)->flush(std::chrono::seconds(10));
  }
  json summary = json::array();
  for (size_t i = 0; i + 1 < runs.size(); i += 2) {
    summary.push_back({{"clients", runs[i]["clients"]},
                       {"memory_p50_us", runs[i]["p50_us"]},
                       {"memory_p99_us", runs[i]["p99_us"]},
                       {"redis_p50_us", runs[i + 1]["p50_us"]},
                       {"redis_p99_us", runs[i + 1]["p99_us"]},
                       {"redis_admissions_per_s", runs[i + 1]["admissions_per_s"]}});
  }
  std::cout << json{{"summary", summary}}.dump(2) << std::endl;
  return 0;
}

}  // namespace
}  // namespace lg::billing

int main(int argc, char** argv) { return lg::billing::benchMain(argc, argv); }

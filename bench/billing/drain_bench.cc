// drain_bench: how fast the ledger's outbox drains into PostgreSQL
// (billing/postgres/ledger_drain.h), measured in one run against the rate
// at which the same ledger commits entries (docs/benchmarks.md, "The
// outbox drain"). Issue 23 asks the drain to keep up with at least 10x the
// engine's request rate; the ledger's group-commit rate at 64 clients is
// far above any rate the engine serves, so a drain that keeps up with it
// keeps up with the engine.
//
//   concurrent  64 clients commit entries (as 64 concurrent requests do)
//               for --seconds while the drain runs: entries committed per
//               second, drained per second, and the outbox's depth at the
//               end (a drain that keeps up ends near one batch);
//   backlog     entries committed with no drain (a replica whose PostgreSQL
//               was away), then the drain started: entries drained per
//               second until the outbox is empty.
//
// Each run ends with PostgreSQL's row count equal to the entries committed
// and its rollups equal to a recomputation (PgLedgerReader::verify).
//
// PostgreSQL: --postgres-url, or a private server started for the run
// (tests/support/postgres_server.h) when none is given.
// Usage: drain_bench [--dir DIR] [--seconds 5] [--backlog 50000] [--batch 1000]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/billing/bench_entries.h"
#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "billing/postgres/ledger_drain.h"
#include "billing/postgres/pg_ledger_reader.h"
#include "billing/prices.h"
#include "common/unix_time.h"
#include "tests/support/postgres_server.h"

namespace lg::billing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `clients` committing for `seconds` (or until `total` entries); the count.
int64_t commitFor(Ledger& ledger, const std::string& run, int clients, double seconds, int64_t total) {
  std::atomic<int64_t> committed{0}, next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int64_t n = 0; secondsSince(start) < seconds && next.fetch_add(1) < total; ++n) {
        std::promise<Status> done;
        ledger.commit(benchEntry(run + "_", c, n), std::nullopt, [&](Status s) { done.set_value(std::move(s)); });
        if (done.get_future().get().isOk()) ++committed;
      }
    });
  }
  for (auto& t : threads) t.join();
  return committed.load();
}

pg::DrainOptions drainOptions(const std::string& url, size_t batch) {
  pg::DrainOptions o;
  o.postgres.url = url;
  o.batch_size = batch;
  o.interval = std::chrono::milliseconds(200);  // the serving default
  return o;
}

// Waits until the outbox is empty; seconds it took.
double untilEmpty(const Ledger& ledger) {
  const auto start = Clock::now();
  while (ledger.outboxDepth() > 0) {
    if (secondsSince(start) > 600) throw std::runtime_error("the outbox did not drain in 10 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return secondsSince(start);
}

json checkPostgres(pg::PgLedgerReader& reader, int64_t expected) {
  auto count = reader.entryCount();
  auto report = reader.verify();
  if (!count.isOk() || !report.isOk()) throw std::runtime_error("cannot read PostgreSQL back");
  return {{"rows", *count}, {"rows_equal_committed", *count == expected}, {"rollups_verified", report->ok()}};
}

int run(int argc, char** argv) {
  CLI::App app{"the ledger outbox's drain into PostgreSQL against the ledger's own commit rate"};
  std::string dir = "/var/tmp", url;
  double seconds = 5;
  int64_t backlog = 50'000;
  size_t batch = 1000;
  app.add_option("--dir", dir, "Where the ledger's RocksDB goes (default /var/tmp)");
  app.add_option("--postgres-url", url, "PostgreSQL to drain into (default: a private server for the run)");
  app.add_option("--seconds", seconds, "Seconds of the concurrent run (default 5)");
  app.add_option("--backlog", backlog, "Entries of the backlog run (default 50000)");
  app.add_option("--batch", batch, "Entries per PostgreSQL transaction (default 1000, the serving default)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<test::PostgresServer> server;
  if (url.empty()) {
    std::string error;
    server = test::PostgresServer::create(&error);
    if (!server || !server->createDatabase("drain_bench", &error)) throw std::runtime_error(error);
    url = server->url("drain_bench");
  }
  const fs::path store = fs::path(dir) / ("lg-drain-bench-" + std::to_string(::getpid()));
  fs::remove_all(store);
  auto db = BillingDb::open(store.string());
  if (!db.isOk()) throw std::runtime_error(db.status().toString());
  LedgerOptions lo;
  lo.outbox = true;
  auto ledger = Ledger::open(**db, lo);
  if (!ledger.isOk()) throw std::runtime_error(ledger.status().toString());
  pg::PostgresOptions po;
  po.url = url;
  pg::PgLedgerReader reader(po);

  // Concurrent: the drain runs while 64 clients commit.
  json concurrent;
  {
    auto drain = pg::LedgerDrain::start(**ledger, drainOptions(url, batch));
    if (!drain.isOk()) throw std::runtime_error(drain.status().toString());
    while ((*drain)->state() == pg::DrainState::kStarting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const uint64_t drained_before = (*drain)->stats().drained;
    const auto start = Clock::now();
    const int64_t committed = commitFor(**ledger, "c", 64, seconds, INT64_MAX);
    const double wall = secondsSince(start);
    const uint64_t drained = (*drain)->stats().drained - drained_before;
    const uint64_t depth_at_end = (*ledger)->outboxDepth();
    (*drain)->wake();
    const double tail_s = untilEmpty(**ledger);
    concurrent = {{"run", "concurrent"}, {"clients", 64}, {"committed", committed},
                  {"committed_per_s", static_cast<double>(committed) / wall},
                  {"drained_per_s", static_cast<double>(drained) / wall}, {"outbox_at_end", depth_at_end},
                  {"emptied_after_s", tail_s}, {"postgres", checkPostgres(reader, committed)}};
    std::cout << concurrent.dump() << std::endl;
  }
  // Backlog: committed with no drain, then drained.
  json backlog_run;
  {
    const int64_t committed = commitFor(**ledger, "b", 64, 1e9, backlog);
    const int64_t before = concurrent["committed"].get<int64_t>();
    const auto start = Clock::now();
    auto drain = pg::LedgerDrain::start(**ledger, drainOptions(url, batch));
    if (!drain.isOk()) throw std::runtime_error(drain.status().toString());
    untilEmpty(**ledger);
    const double wall = secondsSince(start);
    backlog_run = {{"run", "backlog"}, {"entries", committed}, {"seconds", wall},
                   {"drained_per_s", static_cast<double>(committed) / wall},
                   {"postgres", checkPostgres(reader, before + committed)}};
    std::cout << backlog_run.dump() << std::endl;
  }
  ledger->reset();
  db->reset();
  fs::remove_all(store);
  const double commit_rate = concurrent["committed_per_s"].get<double>();
  std::cout << json{{"summary", "drain rates over the ledger's own commit rate (64 clients)"},
                    {"ledger_commits_per_s", commit_rate},
                    {"concurrent_drained_per_s", concurrent["drained_per_s"]},
                    {"backlog_drained_per_s", backlog_run["drained_per_s"]},
                    {"backlog_x_commit_rate", backlog_run["drained_per_s"].get<double>() / commit_rate}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace lg::billing

int main(int argc, char** argv) {
  try {
    return lg::billing::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "drain_bench: " << e.what() << "\n";
    return 1;
  }
}

// ledger_bench: how many ledger entries per second the billing store commits
// durably, measured in one run against two references on the same
// filesystem (docs/benchmarks.md, "Billing"):
//
//   fsync     a file appended and fsynced in a loop: the rate at which this
//             disk makes a write durable, the bound on one-at-a-time commits
//             (every synced RocksDB write is at least one fsync of its WAL);
//   serial    one client committing and waiting for each entry (nothing to
//             group: one synced write per entry);
//   grouped   C clients each committing and waiting, as C concurrent requests
//             do before their clients see the end of the response; the
//             committer thread writes everything queued during the previous
//             sync as one batch (billing/ledger.h).
//
// Entries look like a chat request's (ids, key, team, model, fingerprint,
// token counts, rates, cost) and are spread over keys and teams so every
// commit updates 4 hourly counters per entry by merges.
//
// Usage: ledger_bench [--dir DIR] [--seconds 5] [--clients 1,4,16,64]
// Prints one JSON object per run and a summary with the ratios.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/billing/bench_entries.h"
#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "common/unix_time.h"

namespace lg::billing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Appends 300 bytes (about one entry) and fsyncs, for `seconds`.
json fsyncRun(const fs::path& dir, double seconds) {
  const fs::path file = dir / "fsync-probe";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  if (fd < 0) throw std::runtime_error("cannot open " + file.string());
  const std::string bytes(300, 'x');
  std::vector<double> ms;
  const auto start = Clock::now();
  while (secondsSince(start) < seconds) {
    const auto t = Clock::now();
    if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()) || ::fsync(fd) != 0) {
      throw std::runtime_error("write/fsync failed");
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  const double wall = secondsSince(start);
  ::close(fd);
  fs::remove(file);
  return {{"run", "fsync"}, {"per_s", static_cast<double>(ms.size()) / wall},
          {"latency_ms", {{"p50", percentile(ms, 0.5)}, {"p99", percentile(ms, 0.99)}}}};
}

json ledgerRun(const fs::path& dir, int clients, double seconds) {
  const fs::path store = dir / ("ledger-" + std::to_string(clients));
  fs::remove_all(store);
  auto db = BillingDb::open(store.string());
  if (!db.isOk()) throw std::runtime_error(db.status().toString());
  auto ledger = Ledger::open(**db);
  if (!ledger.isOk()) throw std::runtime_error(ledger.status().toString());
  std::atomic<int64_t> committed{0}, failed{0};
  std::vector<std::vector<double>> latency(static_cast<size_t>(clients));
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int64_t n = 0; secondsSince(start) < seconds; ++n) {
        std::promise<Status> done;
        const auto t = Clock::now();
        (*ledger)->commit(benchEntry("", c, n), std::nullopt, [&](Status s) { done.set_value(std::move(s)); });
        const Status s = done.get_future().get();
        latency[static_cast<size_t>(c)].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
        (s.isOk() ? committed : failed)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = secondsSince(start);
  const LedgerStats st = (*ledger)->stats();
  std::vector<double> all;
  for (const auto& v : latency) all.insert(all.end(), v.begin(), v.end());
  auto report = (*ledger)->verify();
  const bool exact = report.isOk() && report->ok() && report->entries == static_cast<uint64_t>(committed.load());
  ledger->reset();
  db->reset();
  fs::remove_all(store);
  return {{"run", clients == 1 ? "serial" : "grouped"},
          {"clients", clients},
          {"entries", committed.load()},
          {"failed", failed.load()},
          {"per_s", static_cast<double>(committed.load()) / wall},
          {"synced_writes", st.batches},
          {"entries_per_write", st.batches ? static_cast<double>(st.entries) / static_cast<double>(st.batches) : 0},
          {"latency_ms", {{"p50", percentile(all, 0.5)}, {"p99", percentile(all, 0.99)}}},
          {"counters_equal_entries", exact}};
}

int run(int argc, char** argv) {
  CLI::App app{"ledger commits per second: group commit against one at a time and the disk's fsync rate"};
  std::string dir = "/var/tmp";
  double seconds = 5;
  std::vector<int> clients{1, 4, 16, 64};
  app.add_option("--dir", dir, "A directory on the filesystem to measure (default /var/tmp)");
  app.add_option("--seconds", seconds, "Seconds per run (default 5)");
  app.add_option("--clients", clients, "Concurrent committing clients per run (default 1,4,16,64)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  const fs::path work = fs::path(dir) / ("lg-ledger-bench-" + std::to_string(::getpid()));
  fs::create_directories(work);
  const json disk = fsyncRun(work, seconds);
  std::cout << disk.dump() << std::endl;
  json runs = json::array();
  double serial = 0;
  for (int c : clients) {
    json r = ledgerRun(work, c, seconds);
    if (c == 1) serial = r["per_s"].get<double>();
    std::cout << r.dump() << std::endl;
    runs.push_back(std::move(r));
  }
  fs::remove_all(work);
  json summary = {{"summary", "entries/s over the disk's fsyncs/s, and over one commit at a time"}};
  for (const json& r : runs) {
    const std::string name = "clients_" + r["clients"].dump();
    summary[name] = {{"per_s", r["per_s"]},
                     {"x_fsync_rate", r["per_s"].get<double>() / disk["per_s"].get<double>()},
                     {"x_serial", serial > 0 ? r["per_s"].get<double>() / serial : 0}};
  }
  std::cout << summary.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace lg::billing

int main(int argc, char** argv) {
  try {
    return lg::billing::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "ledger_bench: " << e.what() << "\n";
    return 1;
  }
}

// The ledger under ThreadSanitizer, as part of the normal test run: request
// threads claim a few contended Idempotency-Keys and commit entries with
// their records while a clock runs fast enough to expire records constantly,
// a sweeper deletes expired ones, and a reader runs usage queries. The
// billing sources are compiled with -fsanitize=thread into this binary
// (RocksDB stays uninstrumented; what TSan cannot see through it is
// suppressed, below). A race exits
// with code 66. Afterwards: every commit has its entry, the counters equal the
// entries, and every idempotency record has exactly one time key.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "tests/support/temp_dir.h"

extern "C" const char* __tsan_default_options() { return "halt_on_error=1:exitcode=66:second_deadlock_stack=1"; }
// RocksDB publishes memtable entries with atomics that TSan cannot see in an
// uninstrumented library: its own frames, and our reads of a value through an
// iterator in BillingDb's scans (the bytes live in the memtable's arena), are
// not races.
extern "C" const char* __tsan_default_suppressions() {
  return "race:rocksdb::\nrace:lg::billing::BillingDb::scan\n";
}

namespace lg::billing {
namespace {

constexpr int64_t kUs = 1'000'000;
constexpr int64_t kT0 = int64_t{1767225600} * kUs;  // 2026-01-01T00:00:00Z
constexpr int kThreads = 6;
constexpr int kRequestsPerThread = 120;
constexpr int kIdempotencyKeys = 8;  // few, so that threads contend for them

LedgerEntry entryFor(int thread, int i, int64_t now_us) {
  LedgerEntry e;
  e.request_id = "req_" + std::to_string(thread) + "_" + std::to_string(i);
  e.response_id = "chatcmpl-" + e.request_id;
  e.key_id = "key_" + std::to_string(thread % 2);
  e.team = "team-" + std::to_string(thread % 2);
  e.model = "demo";
  e.requested_model = "demo";
  e.endpoint = "/v1/chat/completions";
  e.start_us = now_us;
  e.end_us = now_us + 1;
  e.prompt_tokens = e.miss_tokens = 10 + i % 7;
  e.output_tokens = i % 5;
  e.prices.rates = kDeepSeekRates;
  e.prices.version = 1;
  e.prices.priced_as = "*";
  e.finish_reason = "stop";
  e.price();
  return e;
}

TEST(LedgerTsanTest, CommitsClaimsAndSweepsRaceWithoutLosingAnEntry) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk()) << db.status().toString();
  std::atomic<int64_t> clock{kT0};
  LedgerOptions options;
  options.idempotency_ttl_s = 1;
  options.now_us = [&] { return clock.load(); };
  auto opened = Ledger::open(**db, options);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  Ledger& ledger = **opened;

  std::atomic<bool> done{false};
  std::atomic<int> committed{0}, claimed{0}, replays{0}, in_flight{0}, failures{0};
  std::thread sweeper([&] {
    while (!done) {
      if (!ledger.expireIdempotencyRecords(16).isOk()) ++failures;
      std::this_thread::yield();
    }
  });
  std::thread reader([&] {
    UsageQuery q;
    q.group_by = GroupBy::kKey;
    q.from_s = kT0 / kUs;
    q.to_s = kT0 / kUs + 10 * 24 * 3600;
    while (!done) {
      if (!ledger.usage(q).isOk()) ++failures;
      if (!ledger.recentEntries(20, "", 0, INT64_MAX).isOk()) ++failures;
    }
  });
  std::vector<std::thread> requests;
  for (int t = 0; t < kThreads; ++t) {
    requests.emplace_back([&, t] {
      for (int i = 0; i < kRequestsPerThread; ++i) {
        // 20 ms of the ledger's time per request: 14 s in all, so that each
        // record expires (TTL 1 s) and is replaced or swept many times over.
        const int64_t now = clock += 20'000;
        LedgerEntry e = entryFor(t, i, now);
        std::optional<IdempotencyCommit> idem;
        if (i % 2 == 0) {  // half with an Idempotency-Key, half without
          const std::string hash = idempotencyKeyHash("k" + std::to_string(i % kIdempotencyKeys));
          auto claim = ledger.claim(e.key_id, hash);
          if (!claim.isOk()) {
            ++failures;
            continue;
          }
          if (claim->state == Ledger::ClaimState::kInFlight) {
            ++in_flight;
            continue;
          }
          if (claim->state == Ledger::ClaimState::kDone) {
            ++replays;
            continue;
          }
          ++claimed;
          IdempotencyRecord r;
          r.request_id = e.request_id;
          r.request_digest = requestDigest(e.endpoint, "{}");
          r.created_us = clock.load();
          r.content_type = "application/json";
          r.body = "{}";
          r.body_kept = true;
          idem = IdempotencyCommit{e.key_id, hash, r};
        }
        std::promise<Status> result;
        ledger.commit(std::move(e), std::move(idem), [&](Status s) { result.set_value(std::move(s)); });
        if (result.get_future().get().isOk()) ++committed; else ++failures;
      }
    });
  }
  for (std::thread& r : requests) r.join();
  done = true;
  sweeper.join();
  reader.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(replays.load() + in_flight.load(), 0);  // the keys were contended
  // Far more claims than (API key, Idempotency-Key) pairs (2 x 4): expired
  // records were replaced or swept and their keys claimed again.
  EXPECT_GT(claimed.load(), 40);
  auto report = ledger.verify();
  ASSERT_TRUE(report.isOk()) << report.status().toString();
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->entries, static_cast<uint64_t>(committed.load()));

  // One time key per record, and every time key names a record.
  std::vector<std::string> records, named;
  ASSERT_TRUE((*db)->scan("led/idem/", [&](std::string_view k, std::string_view) {
    records.emplace_back(k);
    return true;
  }).isOk());
  ASSERT_TRUE((*db)->scan("led/idemt/", [&](std::string_view k, std::string_view) {
    const std::string_view rest = k.substr(std::string_view("led/idemt/").size() + 17);  // after "<16 digits>/"
    named.push_back("led/idem/" + std::string(rest));
    return true;
  }).isOk());
  std::sort(records.begin(), records.end());
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, records);
}

}  // namespace
}  // namespace lg::billing

// The ledger in the real RocksDB billing store: entries round-trip, group
// commit batches concurrent commits into few synced writes and calls every
// callback once, the counters equal a recomputation from the entries after
// many concurrent commits and after reopening, request ids stay unique,
// Idempotency-Key claims, usage queries by group and period, and a counter
// that disagrees with the entries is found.
#include "billing/ledger.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "billing/prompt_fingerprint.h"
#include "common/unix_time.h"
#include "tests/support/temp_dir.h"

namespace lg::billing {
namespace {

constexpr int64_t kUs = 1'000'000;
constexpr int64_t kT0 = int64_t{1767225600} * kUs;  // 2026-01-01T00:00:00Z

LedgerEntry makeEntry(int i) {
  LedgerEntry e;
  e.request_id = "req_" + std::to_string(i);
  e.response_id = "chatcmpl-" + std::to_string(i);
  e.key_id = "key_" + std::to_string(i % 5);
  e.team = "team-" + std::to_string(i % 5 % 2);  // keys 0, 2, 4 in team-0; 1, 3 in team-1
  e.model = i % 3 == 0 ? "demo" : "other";
  e.requested_model = "deepseek-chat";
  e.endpoint = "/v1/chat/completions";
  e.system_prompt = i % 4 == 0 ? "" : "fp" + std::to_string(i % 4);
  e.start_us = kT0 + int64_t{i % 50} * 600 * kUs;  // spread over ~8 hours
  e.end_us = e.start_us + 1000;
  e.ttft_us = 500;
  e.hit_tokens_tier0 = 64 * (i % 3);
  e.hit_tokens_disk = i % 7 == 0 ? 64 : 0;
  e.miss_tokens = 10 + i % 11;
  e.prompt_tokens = e.hitTokens() + e.miss_tokens;
  e.output_tokens = i % 13;
  e.prices.rates = i % 2 == 0 ? kDeepSeekRates : Rates{1'000, 10'000, 100'000};
  e.prices.version = 1 + i % 2;
  e.prices.priced_as = "*";
  e.status = i % 10 == 9 ? EntryStatus::kCancelled : i % 17 == 16 ? EntryStatus::kRefused
                         : i % 19 == 18 ? EntryStatus::kFailed : EntryStatus::kCompleted;
  e.finish_reason = std::string(entryStatusName(e.status));
  if (i % 4 != 3) {  // the others as entries written before miss anatomies
    e.miss.tokens_by_cause[static_cast<size_t>(MissCause::kPartialBlock)] = 3;
    e.miss.tokens_by_cause[static_cast<size_t>(i % 2 == 0 ? MissCause::kNew : MissCause::kEvicted)] = e.miss_tokens - 3;
    e.miss.first_miss_token = e.hitTokens();
    e.miss.first_miss_message = i % 5;
    e.miss.first_miss_region = static_cast<PromptRegion>(1 + i % 4);
    e.miss.first_miss_cause = i % 2 == 0 ? MissCause::kNew : MissCause::kEvicted;
    if (i % 2 == 1) {
      e.miss.evicted_tier = "disk";
      e.miss.evicted_ago_ms = 1000 * i;
    }
  }
  e.price();
  return e;
}

Status commitAndWait(Ledger& ledger, LedgerEntry e, std::optional<IdempotencyCommit> idem = std::nullopt) {
  std::promise<Status> done;
  ledger.commit(std::move(e), std::move(idem), [&](Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

TEST(LedgerEntryTest, EncodesAndDecodesEveryField) {
  LedgerEntry e = makeEntry(9);
  e.idempotency_key = "abc";
  e.prices.window = 1;
  auto d = decodeEntry(encodeEntry(e));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(encodeEntry(*d), encodeEntry(e));
  EXPECT_EQ(d->status, EntryStatus::kCancelled);
  EXPECT_EQ(d->cost, e.cost);
  EXPECT_FALSE(decodeEntry("{}").isOk());
  EXPECT_FALSE(decodeEntry("not json").isOk());
}

TEST(LedgerEntryTest, TheMissAnatomyRoundTripsAndCountsItsTokensByCauseAndRegion) {
  for (int i : {0, 1, 3}) {
    const LedgerEntry e = makeEntry(i);
    auto d = decodeEntry(encodeEntry(e));
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    EXPECT_EQ(d->miss, e.miss) << i;
    EXPECT_EQ(d->miss.recorded(), i != 3);
    const Counters c = countersOf(e);
    uint64_t by_cause = 0;
    for (size_t k = 0; k < kMissCauses; ++k) by_cause += c[missCauseSlot(static_cast<MissCause>(k))];
    EXPECT_EQ(by_cause, i == 3 ? 0u : static_cast<uint64_t>(e.miss_tokens)) << i;
    uint64_t by_region = 0;
    for (size_t r = kFirstMissSystem; r <= kFirstMissInput; ++r) by_region += c[r];
    EXPECT_EQ(by_region, i == 3 ? 0u : static_cast<uint64_t>(e.miss_tokens)) << i;
  }
  EXPECT_EQ(countersOf(makeEntry(1))[kMissEvicted], static_cast<uint64_t>(makeEntry(1).miss_tokens - 3));
  EXPECT_EQ(countersOf(makeEntry(1))[firstMissSlot(PromptRegion::kTools)], static_cast<uint64_t>(makeEntry(1).miss_tokens));
  // An entry written before anatomies has no "miss" field at all.
  EXPECT_EQ(encodeEntry(makeEntry(3)).find("\"miss\""), std::string::npos);
  // A damaged anatomy is a corrupt entry, never a guess.
  std::string bad = encodeEntry(makeEntry(0));
  const size_t at = bad.find("\"first_miss_cause\":\"new\"");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 25, "\"first_miss_cause\":\"zzz\"");
  EXPECT_FALSE(decodeEntry(bad).isOk());
  for (size_t k = 0; k < kMissCauses; ++k) {
    EXPECT_EQ(parseMissCause(missCauseName(static_cast<MissCause>(k))), static_cast<MissCause>(k));
  }
  // The anatomy alone (PostgreSQL's column): the entry's "miss" field, "null" without one.
  const LedgerEntry evicted = makeEntry(1);
  auto alone = decodeMissAnatomy(encodeMissAnatomy(evicted.miss));
  ASSERT_TRUE(alone.isOk()) << alone.status().toString();
  EXPECT_EQ(*alone, evicted.miss);
  EXPECT_NE(encodeEntry(evicted).find(encodeMissAnatomy(evicted.miss)), std::string::npos);
  EXPECT_EQ(encodeMissAnatomy(makeEntry(3).miss), "null");
  auto none = decodeMissAnatomy("null");
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->recorded());
  for (const char* garbled : {"", "{}", "[1]", "{\"tokens_by_cause\": {\"nope\": 1}}"}) {
    EXPECT_EQ(decodeMissAnatomy(garbled).status().code(), StatusCode::kDataLoss) << garbled;
  }
}

TEST(LedgerEntryTest, OnlyCompletedAndCancelledAreBilled) {
  LedgerEntry e = makeEntry(0);
  e.hit_tokens_tier0 = 64;
  e.hit_tokens_disk = 0;
  e.miss_tokens = 10;
  e.output_tokens = 5;
  e.prices.rates = kDeepSeekRates;
  for (EntryStatus s : {EntryStatus::kCompleted, EntryStatus::kCancelled}) {
    e.status = s;
    e.price();
    EXPECT_EQ(usd(e.cost.total()), "0.000006692");
  }
  for (EntryStatus s : {EntryStatus::kFailed, EntryStatus::kRefused}) {
    e.status = s;
    e.price();
    EXPECT_EQ(e.cost.total(), 0);
    EXPECT_EQ(countersOf(e)[kPromptTokens], 74u);  // the work is still counted
    EXPECT_EQ(countersOf(e)[kHitAtMissPrice], 0u);
  }
}

TEST(LedgerTest, FingerprintsAreStableAndDistinguishRoles) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  const SystemPromptFingerprinter f(std::string(32, 'k'));
  EXPECT_EQ(f.fingerprint("team-a", {}), "");
  const std::string a = f.fingerprint("team-a", V{{"system", "You are helpful."}});
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a, f.fingerprint("team-a", V{{"system", "You are helpful."}}));
  EXPECT_NE(a, f.fingerprint("team-a", V{{"developer", "You are helpful."}}));
  EXPECT_NE(f.fingerprint("team-a", V{{"system", "ab"}, {"system", "c"}}),
            f.fingerprint("team-a", V{{"system", "a"}, {"system", "bc"}}));
}

// Issue 21, item 11: the same prompt used to have the same fingerprint in
// every team, so a tenant could fingerprint a guessed prompt through its own
// key and find it among another team's. Keyed per team now; the team is
// length-prefixed, so moving characters between the team and the first role
// does not collide either.
TEST(LedgerTest, FingerprintsAreKeyedPerTeam) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  const SystemPromptFingerprinter f(std::string(32, 'k'));
  const V prompt{{"system", "You are a careful coding agent."}};
  EXPECT_EQ(f.fingerprint("team-a", prompt), f.fingerprint("team-a", prompt));
  EXPECT_NE(f.fingerprint("team-a", prompt), f.fingerprint("team-b", prompt));
  EXPECT_NE(f.fingerprint("team-as", V{{"ystem", "x"}}), f.fingerprint("team-a", V{{"system", "x"}}));
}

// Keyed per installation: the key is made once and kept in the store, so the
// same prompt keeps its fingerprint across reopening; another installation's
// key (or none: a plain hash of the text) gives another, so whoever reads
// fingerprints cannot confirm a guessed prompt by hashing it.
TEST(LedgerTest, FingerprintsAreKeyedWithTheStoresSecret) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  const V prompt{{"system", "You are a careful coding agent."}};
  test::TempDir one, other;
  std::string first;
  for (int reopen = 0; reopen < 2; ++reopen) {
    auto db = BillingDb::open(one.path() + "/billing");
    ASSERT_TRUE(db.isOk());
    auto f = SystemPromptFingerprinter::open(**db);
    ASSERT_TRUE(f.isOk()) << f.status().toString();
    if (reopen == 0) first = f->fingerprint("team-a", prompt);
    EXPECT_EQ(f->fingerprint("team-a", prompt), first);
  }
  auto db = BillingDb::open(other.path() + "/billing");
  ASSERT_TRUE(db.isOk());
  auto f = SystemPromptFingerprinter::open(**db);
  ASSERT_TRUE(f.isOk());
  EXPECT_NE(f->fingerprint("team-a", prompt), first);
  // A store whose key record was damaged refuses to fingerprint with another key.
  ASSERT_TRUE((*db)->write({{"secret/system-prompt", "short"}}).isOk());
  auto damaged = SystemPromptFingerprinter::open(**db);
  ASSERT_FALSE(damaged.isOk());
  EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss);
}

// Without billing.postgres_url (one replica), as before the replicas
// shared a key: the key is the store's own record, 32 bytes made at the
// first open and nothing else written (no mark of a shared key), and the
// fingerprint is the same MAC over the same input (a value computed apart,
// with Python's hmac, for a fixed key).
TEST(LedgerTest, WithoutPostgresTheStoresOwnKeyFingerprintsAsBefore) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  EXPECT_EQ(SystemPromptFingerprinter(std::string(32, 'k')).fingerprint("team-a", V{{"system", "You are helpful."}}),
            "2779fc61025e80e64bf769dbef122587");
  test::TempDir dir;
  auto db = BillingDb::open(dir.path() + "/billing");
  ASSERT_TRUE(db.isOk());
  auto f = SystemPromptFingerprinter::open(**db);
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  auto key = (*db)->get(kSystemPromptKeyRecord);
  ASSERT_TRUE(key.isOk() && key->has_value());
  EXPECT_EQ((*key)->size(), kSystemPromptKeyBytes);
  const V prompt{{"system", "You are a careful coding agent."}};
  EXPECT_EQ(f->fingerprint("team-a", prompt), SystemPromptFingerprinter(**key).fingerprint("team-a", prompt));
  size_t secrets = 0;
  ASSERT_TRUE((*db)->scan("secret/", [&](std::string_view, std::string_view) { return ++secrets, true; }).isOk());
  EXPECT_EQ(secrets, 1u) << "only the key itself";
  bool created = true;
  auto again = SystemPromptFingerprinter::loadOrCreateKey(**db, &created);
  ASSERT_TRUE(again.isOk());
  EXPECT_FALSE(created);
  EXPECT_EQ(*again, **key);
}

// Many threads commit at once; every callback runs once with OK, the writes
// were grouped, and the counters equal the entries.
TEST(LedgerTest, GroupCommitKeepsCountersEqualToEntries) {
  test::TempDir dir;
  constexpr int kThreads = 16;
  constexpr int kPerThread = 250;
  std::map<std::string, Counters> expected_by_team;
  {
    auto db = BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto ledger = Ledger::open(**db);
    ASSERT_TRUE(ledger.isOk());
    std::atomic<int> ok{0}, failed{0}, calls{0};
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          // Wait for each commit, as a request does before its client sees
          // the end: concurrency comes from the threads.
          std::promise<void> done;
          (*ledger)->commit(makeEntry(t * kPerThread + i), std::nullopt, [&](Status s) {
            ++calls;
            (s.isOk() ? ok : failed)++;
            done.set_value();
          });
          done.get_future().wait();
        }
      });
    }
    for (auto& th : threads) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(ok.load(), kThreads * kPerThread);
    EXPECT_EQ(failed.load(), 0);
    EXPECT_EQ(calls.load(), kThreads * kPerThread);
    const LedgerStats st = (*ledger)->stats();
    EXPECT_EQ(st.entries, static_cast<uint64_t>(kThreads * kPerThread));
    EXPECT_LT(st.batches, st.entries) << "commits were not grouped";
    std::printf("group commit: %d threads x %d entries: %.0f entries/s, %llu synced writes (mean %.1f entries, max %.0f), "
                "commit latency p50 %.2f ms p99 %.2f ms max %.2f ms\n",
                kThreads, kPerThread, kThreads * kPerThread / seconds, static_cast<unsigned long long>(st.batches),
                st.batch_size.sum / static_cast<double>(st.batch_size.count), st.batch_size.max,
                st.commit_ms.quantile(0.5), st.commit_ms.quantile(0.99), st.commit_ms.max);

    auto report = (*ledger)->verify();
    ASSERT_TRUE(report.isOk());
    EXPECT_TRUE(report->ok()) << report->mismatches.front();
    EXPECT_EQ(report->entries, static_cast<uint64_t>(kThreads * kPerThread));

    for (int i = 0; i < kThreads * kPerThread; ++i) {
      const LedgerEntry e = makeEntry(i);
      addCounters(expected_by_team[e.team], countersOf(e));
    }
    UsageQuery q;
    q.group_by = GroupBy::kTeam;
    q.from_s = kT0 / kUs;
    q.to_s = kT0 / kUs + 86400;
    auto rows = (*ledger)->usage(q);
    ASSERT_TRUE(rows.isOk());
    ASSERT_EQ(rows->size(), 2u);
    for (const UsageRow& r : *rows) EXPECT_EQ(r.counters, expected_by_team[r.group]) << r.group;
  }
  // Reopened: the same entries and counters.
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  auto report = (*ledger)->verify();
  ASSERT_TRUE(report.isOk());
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->entries, static_cast<uint64_t>(kThreads * kPerThread));
  auto found = (*ledger)->find("req_123");
  ASSERT_TRUE(found.isOk());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(encodeEntry(**found), encodeEntry(makeEntry(123)));
  UsageQuery q;
  q.from_s = 0;
  q.to_s = kT0 / kUs + 86400;
  auto rows = (*ledger)->usage(q);
  ASSERT_TRUE(rows.isOk());
  ASSERT_EQ(rows->size(), 1u);
  Counters all{};
  for (const auto& [team, c] : expected_by_team) addCounters(all, c);
  EXPECT_EQ((*rows)[0].counters, all);
}

TEST(LedgerTest, OneCommitAtATimeIsStillCorrect) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(commitAndWait(**ledger, makeEntry(i)).isOk());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LedgerStats st = (*ledger)->stats();
  EXPECT_EQ(st.batches, 200u);
  std::printf("one commit at a time: %.0f entries/s, commit latency p50 %.2f ms p99 %.2f ms\n", 200 / seconds,
              st.commit_ms.quantile(0.5), st.commit_ms.quantile(0.99));
  EXPECT_TRUE((*ledger)->verify()->ok());
}

TEST(LedgerTest, RequestIdsAreUnique) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  ASSERT_TRUE(commitAndWait(**ledger, makeEntry(1)).isOk());
  EXPECT_EQ(commitAndWait(**ledger, makeEntry(1)).code(), StatusCode::kAlreadyExists);
  // Twice in one batch: one wins.
  std::promise<void> both;
  std::atomic<int> ok{0}, n{0};
  for (int k = 0; k < 2; ++k) {
    (*ledger)->commit(makeEntry(2), std::nullopt, [&](Status s) {
      ok += s.isOk();
      if (++n == 2) both.set_value();
    });
  }
  both.get_future().wait();
  EXPECT_EQ(ok.load(), 1);
  auto report = (*ledger)->verify();
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->entries, 2u);
}

TEST(LedgerTest, MetricsSeeEveryCommitAndTheCostOfEachTeam) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  LedgerMetrics metrics;
  LedgerOptions options;
  options.metrics = &metrics;
  std::map<std::string, int64_t> expected;  // team -> pico-dollars
  {
    auto ledger = Ledger::open(**db, options);
    ASSERT_TRUE(ledger.isOk());
    std::atomic<int> ok{0};
    for (int i = 0; i < 300; ++i) {
      LedgerEntry e = makeEntry(i);
      expected[e.team] += e.cost.total();
      (*ledger)->commit(std::move(e), std::nullopt, [&](Status s) { ok += s.isOk(); });
    }
    // A duplicate request id commits nothing and adds no cost.
    ASSERT_EQ(commitAndWait(**ledger, makeEntry(0)).code(), StatusCode::kAlreadyExists);
    ledger->reset();  // commits what is queued
    EXPECT_EQ(ok.load(), 300);
  }
  metrics::ExpositionWriter w;
  metrics.collect(w);
  const std::string text = w.text();
  for (const auto& [team, pico] : expected) {
    ASSERT_GT(pico, 0);
    const std::string series = "latentgate_cost_picodollars_total{team=\"" + team + "\"} ";
    const size_t at = text.find(series);
    ASSERT_NE(at, std::string::npos) << series << "not in\n" << text;
    EXPECT_EQ(std::strtod(text.c_str() + at + series.size(), nullptr), static_cast<double>(pico)) << team;
  }
  EXPECT_NE(text.find("latentgate_ledger_commit_seconds_count "), std::string::npos);
  EXPECT_EQ(text.find("latentgate_ledger_commit_seconds_count 0\n"), std::string::npos);
}

TEST(LedgerTest, DestructionCommitsWhatIsQueued) {
  test::TempDir dir;
  std::atomic<int> ok{0};
  {
    auto db = BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto ledger = Ledger::open(**db);
    ASSERT_TRUE(ledger.isOk());
    for (int i = 0; i < 500; ++i) (*ledger)->commit(makeEntry(i), std::nullopt, [&](Status s) { ok += s.isOk(); });
  }
  EXPECT_EQ(ok.load(), 500);
  auto db = BillingDb::open(dir.file("billing"));
  auto ledger = Ledger::open(**db);
  EXPECT_EQ((*ledger)->verify()->entries, 500u);
}

// What a shutdown relies on before the outbox's final drain: flush()
// returns only once every commit queued before it is written and its
// callback ran, failed ones too (a request id used twice).
TEST(LedgerTest, FlushWaitsForEveryCommitQueuedBeforeIt) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  (*ledger)->flush();  // nothing queued: returns at once
  std::atomic<int> ok{0}, failed{0};
  for (int i = 0; i < 300; ++i) {
    (*ledger)->commit(makeEntry(i % 250), std::nullopt, [&](Status s) { ++(s.isOk() ? ok : failed); });
  }
  (*ledger)->flush();
  EXPECT_EQ(ok.load(), 250);
  EXPECT_EQ(failed.load(), 50);
  EXPECT_EQ((*ledger)->verify()->entries, 250u);
}

TEST(LedgerTest, IdempotencyKeysAreClaimedOnceAndRemembered) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  Ledger& l = **ledger;
  const std::string hash = idempotencyKeyHash("retry-1");
  EXPECT_EQ(l.claim("key_a", hash)->state, Ledger::ClaimState::kClaimed);
  EXPECT_EQ(l.claim("key_a", hash)->state, Ledger::ClaimState::kInFlight);
  EXPECT_EQ(l.claim("key_b", hash)->state, Ledger::ClaimState::kClaimed);  // keys are per API key
  l.release("key_b", hash);

  // A refused request releases the key without a record: a retry may run.
  LedgerEntry refused = makeEntry(1);
  refused.status = EntryStatus::kRefused;
  ASSERT_TRUE(commitAndWait(l, refused, IdempotencyCommit{"key_a", hash, std::nullopt}).isOk());
  EXPECT_EQ(l.claim("key_a", hash)->state, Ledger::ClaimState::kClaimed);

  // A completed one leaves its record (with the response) for retries.
  IdempotencyRecord r;
  r.request_id = "req_2";
  r.request_digest = requestDigest("/v1/chat/completions", "{}");
  r.content_type = "application/json";
  r.body = R"({"id":"chatcmpl-2"})";
  r.body_kept = true;
  r.created_us = unixMicros();
  ASSERT_TRUE(commitAndWait(l, makeEntry(2), IdempotencyCommit{"key_a", hash, r}).isOk());
  auto done = l.claim("key_a", hash);
  ASSERT_TRUE(done.isOk());
  ASSERT_EQ(done->state, Ledger::ClaimState::kDone);
  EXPECT_EQ(done->record->request_id, "req_2");
  EXPECT_EQ(done->record->body, r.body);
  EXPECT_EQ(done->record->request_digest, r.request_digest);
  EXPECT_EQ(l.claim("key_a", hash)->state, Ledger::ClaimState::kDone);  // kDone holds no claim
}

size_t countKeys(const BillingDb& db, std::string_view prefix) {
  size_t n = 0;
  EXPECT_TRUE(db.scan(prefix, [&](std::string_view, std::string_view) { return ++n, true; }).isOk());
  return n;
}

IdempotencyRecord recordOf(const std::string& request_id, int64_t created_us) {
  IdempotencyRecord r;
  r.request_id = request_id;
  r.request_digest = requestDigest("/v1/chat/completions", "{}");
  r.created_us = created_us;
  r.content_type = "application/json";
  r.body = "{}";
  r.body_kept = true;
  return r;
}

TEST(LedgerTest, IdempotencyRecordsExpireAndTheSweepDeletesThemOldestFirst) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  std::atomic<int64_t> now{kT0};
  LedgerOptions options;
  options.idempotency_ttl_s = 3600;
  options.now_us = [&] { return now.load(); };
  auto ledger = Ledger::open(**db, options);
  ASSERT_TRUE(ledger.isOk());
  Ledger& l = **ledger;
  const std::string h1 = idempotencyKeyHash("one"), h2 = idempotencyKeyHash("two");
  auto claimAndCommit = [&](const std::string& hash, int request, int64_t created_us) {
    ASSERT_EQ(l.claim("key_a", hash)->state, Ledger::ClaimState::kClaimed);
    LedgerEntry e = makeEntry(request);
    ASSERT_TRUE(commitAndWait(l, e, IdempotencyCommit{"key_a", hash, recordOf(e.request_id, created_us)}).isOk());
  };
  claimAndCommit(h1, 1, kT0);
  claimAndCommit(h2, 2, kT0 + 1800 * kUs);
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 2u);

  // One microsecond short of the TTL: still spent, and nothing to sweep.
  now = kT0 + 3600 * kUs - 1;
  EXPECT_EQ(l.claim("key_a", h1)->state, Ledger::ClaimState::kDone);
  EXPECT_EQ(*l.expireIdempotencyRecords(256), 0u);

  // At the TTL the key is free again; the new request replaces the record
  // and its time key, so the old time key does not linger.
  now = kT0 + 3600 * kUs;
  claimAndCommit(h1, 3, now);
  auto again = l.claim("key_a", h1);
  ASSERT_EQ(again->state, Ledger::ClaimState::kDone);
  EXPECT_EQ(again->record->request_id, "req_3");
  EXPECT_EQ(l.claim("key_a", h2)->state, Ledger::ClaimState::kDone);
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 2u);

  // The sweep deletes what expired, and only that.
  now = kT0 + 5400 * kUs;
  EXPECT_EQ(*l.expireIdempotencyRecords(256), 1u);
  EXPECT_FALSE((*db)->get(std::string("led/idem/key_a/") + h2)->has_value());
  EXPECT_TRUE((*db)->get(std::string("led/idem/key_a/") + h1)->has_value());
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 1u);
  now = kT0 + 7200 * kUs;
  EXPECT_EQ(*l.expireIdempotencyRecords(256), 1u);
  EXPECT_EQ(countKeys(**db, "led/idem/"), 0u);
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 0u);

  // A bounded batch at a time, oldest first.
  for (int i = 0; i < 5; ++i) {
    claimAndCommit(idempotencyKeyHash("k" + std::to_string(i)), 10 + i, now.load() + i);
  }
  now = now + 3600 * kUs + 10;
  EXPECT_EQ(*l.expireIdempotencyRecords(2), 2u);
  EXPECT_FALSE((*db)->get(std::string("led/idem/key_a/") + idempotencyKeyHash("k1"))->has_value());
  EXPECT_TRUE((*db)->get(std::string("led/idem/key_a/") + idempotencyKeyHash("k2"))->has_value());
  EXPECT_EQ(*l.expireIdempotencyRecords(2), 2u);
  EXPECT_EQ(*l.expireIdempotencyRecords(2), 1u);
  EXPECT_EQ(*l.expireIdempotencyRecords(2), 0u);
  // The entries themselves stay: expiry only forgets the replay.
  EXPECT_EQ(l.verify()->entries, 8u);
}

TEST(LedgerTest, RecordsWrittenBeforeExpiryAreIndexedAtOpenAndSweptInTheBackground) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  const std::string hash = idempotencyKeyHash("old");
  const int64_t old_us = kT0;
  {
    auto ledger = Ledger::open(**db);
    ASSERT_TRUE(ledger.isOk());
  }
  // What an older version left: a record with no time key, no marker.
  IdempotencyRecord r = recordOf("req_old", old_us);
  const std::string record_key = "led/idem/key_a/" + hash;
  ASSERT_TRUE((*db)->write({{record_key, R"({"request_id":"req_old","request_digest":")" + r.request_digest +
                                             R"(","status":"completed","created_us":)" + std::to_string(old_us) +
                                             R"(,"stream":false,"content_type":"application/json","body":"{}","body_kept":true})"}},
                           {"led/idem-indexed"}).isOk());
  // A clock just before it expires: opening indexes it, the sweep keeps it.
  std::atomic<int64_t> now{old_us + 3600 * kUs - 1};
  LedgerOptions options;
  options.idempotency_ttl_s = 3600;
  options.now_us = [&] { return now.load(); };
  {
    auto ledger = Ledger::open(**db, options);
    ASSERT_TRUE(ledger.isOk());
    EXPECT_EQ(countKeys(**db, "led/idemt/"), 1u);
    EXPECT_EQ((*ledger)->claim("key_a", hash)->state, Ledger::ClaimState::kDone);
  }
  // Reopened after it expired: the committer's first sweep deletes it.
  now = old_us + 3600 * kUs;
  auto ledger = Ledger::open(**db, options);
  ASSERT_TRUE(ledger.isOk());
  for (int i = 0; i < 500 && (*db)->get(record_key)->has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE((*db)->get(record_key)->has_value());
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 0u);
}

TEST(LedgerTest, DamagedIdempotencyDataIsNeverServedAndIsSweptAway) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  const std::string hash = idempotencyKeyHash("damaged");
  const std::string record_key = "led/idem/key_a/" + hash;
  // A record that is not JSON, with no time key (as before expiry existed),
  // and a time key that names no record.
  ASSERT_TRUE((*db)->write({{record_key, "{not json"}, {"led/idemt/0000000000000001/no-hash", ""}}).isOk());
  // At first a clock before one TTL has passed since the epoch, so that the
  // committer's own first sweep finds nothing expired.
  std::atomic<int64_t> now{0};
  LedgerOptions options;
  options.now_us = [&] { return now.load(); };
  auto ledger = Ledger::open(**db, options);
  ASSERT_TRUE(ledger.isOk()) << ledger.status().toString();
  // Not served: the claim fails rather than replaying or reusing the key.
  auto claim = (*ledger)->claim("key_a", hash);
  ASSERT_FALSE(claim.isOk());
  EXPECT_EQ(claim.status().code(), StatusCode::kDataLoss);
  // Indexed as made at time 0: the first sweep after one TTL deletes it and
  // the stray time key.
  now = kT0;
  EXPECT_EQ(*(*ledger)->expireIdempotencyRecords(256), 2u);
  EXPECT_FALSE((*db)->get(record_key)->has_value());
  EXPECT_EQ(countKeys(**db, "led/idemt/"), 0u);
  EXPECT_EQ((*ledger)->claim("key_a", hash)->state, Ledger::ClaimState::kClaimed);
}

TEST(LedgerTest, UsageByGroupAndPeriod) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  constexpr int kN = 300;
  for (int i = 0; i < kN; ++i) ASSERT_TRUE(commitAndWait(**ledger, makeEntry(i)).isOk());

  const auto sum = [](const std::function<bool(const LedgerEntry&)>& match, int64_t from_us = 0,
                      int64_t to_us = INT64_MAX) {
    Counters c{};
    for (int i = 0; i < kN; ++i) {
      const LedgerEntry e = makeEntry(i);
      if (match(e) && e.start_us >= from_us && e.start_us < to_us) addCounters(c, countersOf(e));
    }
    return c;
  };
  const auto query = [&](GroupBy g, int64_t granularity = 0, std::string key = "", std::string team = "") {
    UsageQuery q;
    q.group_by = g;
    q.from_s = kT0 / kUs;
    q.to_s = kT0 / kUs + 86400;
    q.granularity_s = granularity;
    q.key_id = std::move(key);
    q.team = std::move(team);
    auto rows = (*ledger)->usage(q);
    EXPECT_TRUE(rows.isOk()) << rows.status().toString();
    return rows.isOk() ? *rows : std::vector<UsageRow>{};
  };

  auto by_key = query(GroupBy::kKey);
  ASSERT_EQ(by_key.size(), 5u);
  for (const UsageRow& r : by_key) {
    EXPECT_EQ(r.counters, sum([&](const LedgerEntry& e) { return e.key_id == r.group; })) << r.group;
    EXPECT_EQ(r.team, makeEntry(std::stoi(r.group.substr(4))).team);
  }
  auto by_model = query(GroupBy::kModel);
  ASSERT_EQ(by_model.size(), 2u);
  for (const UsageRow& r : by_model) EXPECT_EQ(r.counters, sum([&](const LedgerEntry& e) { return e.model == r.group; }));
  auto by_prompt = query(GroupBy::kSystemPrompt, 0, "", "team-1");
  ASSERT_FALSE(by_prompt.empty());
  for (const UsageRow& r : by_prompt) {
    EXPECT_EQ(r.team, "team-1");
    EXPECT_EQ(r.counters, sum([&](const LedgerEntry& e) { return e.team == "team-1" && e.system_prompt == r.group; }))
        << r.group;
  }
  // Hourly periods of one key.
  auto hourly = query(GroupBy::kNone, 3600, "key_3");
  ASSERT_GE(hourly.size(), 8u);
  Counters total{};
  for (const UsageRow& r : hourly) {
    EXPECT_EQ(r.period_start_s % 3600, 0);
    EXPECT_EQ(r.counters, sum([&](const LedgerEntry& e) { return e.key_id == "key_3"; }, r.period_start_s * kUs,
                              (r.period_start_s + 3600) * kUs));
    addCounters(total, r.counters);
  }
  EXPECT_EQ(total, sum([&](const LedgerEntry& e) { return e.key_id == "key_3"; }));
  // By day: everything is on 2026-01-01.
  auto daily = query(GroupBy::kTeam, 86400);
  ASSERT_EQ(daily.size(), 2u);
  EXPECT_EQ(daily[0].period_start_s, kT0 / kUs);
  // Hours outside the range are left out.
  UsageQuery late;
  late.from_s = kT0 / kUs + 5 * 3600;
  late.to_s = kT0 / kUs + 86400;
  auto rows = (*ledger)->usage(late);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].counters, sum([](const LedgerEntry&) { return true; }, kT0 + 5 * 3600 * kUs));
  // Combinations the counters cannot answer.
  UsageQuery bad;
  bad.group_by = GroupBy::kModel;
  bad.team = "team-0";
  EXPECT_EQ((*ledger)->usage(bad).status().code(), StatusCode::kInvalidArgument);
  // Entries in time order.
  int64_t last = 0;
  int n = 0;
  ASSERT_TRUE((*ledger)->scanEntries(kT0, kT0 + 3600 * kUs, [&](const LedgerEntry& e) {
    EXPECT_GE(e.start_us, last);
    last = e.start_us;
    ++n;
    return true;
  }).isOk());
  EXPECT_EQ(n, 6 * 6);  // 6 ten-minute slots in the first hour, 6 entries each
}

TEST(LedgerTest, VerifyFindsCountersThatDisagree) {
  test::TempDir dir;
  auto db = BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(commitAndWait(**ledger, makeEntry(i)).isOk());
  EXPECT_TRUE((*ledger)->verify()->ok());
  // A counter merged without its entry.
  WriteOps stray;
  stray.merges.emplace_back(aggregateKeys(makeEntry(3))[1], encodeCounters({1}));
  ASSERT_TRUE((*db)->apply(stray, true).isOk());
  auto report = (*ledger)->verify();
  ASSERT_TRUE(report.isOk());
  ASSERT_EQ(report->mismatches.size(), 1u);
  EXPECT_NE(report->mismatches[0].find("agg/team/"), std::string::npos) << report->mismatches[0];
}

// What the dashboard's recent requests read: a bounded reverse scan.
TEST(LedgerRecentEntriesTest, NewestFirstByTeamWithinTheRangeAndBoundedByWhatItReads) {
  test::TempDir dir("lg_dashboard_ledger");
  auto db = BillingDb::open(dir.path() + "/billing");
  ASSERT_TRUE(db.isOk());
  auto ledger = Ledger::open(**db);
  ASSERT_TRUE(ledger.isOk());
  std::atomic<int> committed = 0;
  for (int i = 0; i < 40; ++i) {
    LedgerEntry e;
    e.request_id = "req_" + std::to_string(i);
    e.key_id = "key_" + std::to_string(i % 4);
    e.team = i % 4 == 3 ? "team-rare" : "team-busy";
    e.start_us = kT0 + i * kUs;
    (*ledger)->commit(std::move(e), std::nullopt, [&](Status s) { committed += s.isOk(); });
  }
  while (committed < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto all = (*ledger)->recentEntries(5, "", 0, kT0 + 100 * kUs);
  ASSERT_TRUE(all.isOk());
  ASSERT_EQ(all->size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*all)[i].request_id, "req_" + std::to_string(39 - i));
  // [from, to): the entry at `to` is not in it, the one at `from` is.
  auto ranged = (*ledger)->recentEntries(100, "", kT0 + 10 * kUs, kT0 + 20 * kUs);
  ASSERT_TRUE(ranged.isOk());
  ASSERT_EQ(ranged->size(), 10u);
  EXPECT_EQ(ranged->front().request_id, "req_19");
  EXPECT_EQ(ranged->back().request_id, "req_10");
  auto rare = (*ledger)->recentEntries(100, "team-rare", 0, kT0 + 100 * kUs);
  ASSERT_TRUE(rare.isOk());
  EXPECT_EQ(rare->size(), 10u);
  for (const LedgerEntry& e : *rare) EXPECT_EQ(e.team, "team-rare");
  // Reading at most 8 entries finds the rare team's 2 among them.
  auto bounded = (*ledger)->recentEntries(100, "team-rare", 0, kT0 + 100 * kUs, 8);
  ASSERT_TRUE(bounded.isOk());
  EXPECT_EQ(bounded->size(), 2u);
  EXPECT_TRUE((*ledger)->recentEntries(0, "", 0, kT0 + 100 * kUs)->empty());
  EXPECT_TRUE((*ledger)->recentEntries(5, "", 0, kT0)->empty());
}

}  // namespace
}  // namespace lg::billing

// The ledger of record in PostgreSQL (billing/postgres/) against a real,
// private PostgreSQL: one instance per run of this binary (a gtest
// Environment), one fresh database per test.
#include <atomic>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "billing/postgres/pg_ledger_reader.h"
#include "billing/postgres/pg_ledger_writer.h"
#include "billing/postgres/pg_schema.h"
#include "billing/postgres/pg_sql.h"  // the rollup expressions, to write rows as an older writer did
#include "tests/support/postgres_environment.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace lg::billing::pg {
namespace {

class PgLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    const auto url = test::freshPostgresDatabase("t", &error);
    ASSERT_TRUE(url.has_value()) << error;
    options_.url = *url;
  }

  void migrated() {
    auto report = migrate(options_);
    ASSERT_TRUE(report.isOk()) << report.status().toString();
  }

  PostgresOptions options_;
};

// A plausible entry: tokens and rates within the ledger's ranges, priced as
// the ledger prices it.
LedgerEntry randomEntry(std::mt19937_64& rng, int i) {
  static const char* kTeams[] = {"team-a", "team-b", "team-c"};
  static const char* kModels[] = {"demo", "deepseek-v3"};
  static const EntryStatus kStatuses[] = {EntryStatus::kCompleted, EntryStatus::kCompleted, EntryStatus::kCancelled,
                                          EntryStatus::kFailed, EntryStatus::kRefused};
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  LedgerEntry e;
  e.request_id = "req-" + std::to_string(i);
  e.response_id = "chatcmpl-" + std::to_string(i);
  e.team = kTeams[pick(3)];
  e.key_id = e.team + "-key" + std::to_string(pick(3));
  e.model = kModels[pick(2)];
  e.requested_model = "deepseek-chat";
  e.endpoint = "/v1/chat/completions";
  e.system_prompt = pick(3) == 0 ? "" : "sp" + std::to_string(pick(4));
  e.start_us = 1'750'000'000'000'000 + static_cast<int64_t>(rng() % (3ull * 86400 * 1'000'000));
  e.end_us = e.start_us + 1000;
  e.ttft_us = pick(2) == 0 ? -1 : 500;
  e.hit_tokens_tier0 = pick(5000);
  e.hit_tokens_disk = pick(1000);
  e.miss_tokens = 1 + pick(8000);
  e.prompt_tokens = e.hit_tokens_tier0 + e.hit_tokens_disk + e.miss_tokens;
  e.output_tokens = pick(2000);
  e.choices = 1 + pick(2);
  e.prices.rates = pick(2) == 0 ? kDeepSeekRates : Rates{7'000, 140'000, 210'000};
  e.prices.version = pick(3);
  e.prices.priced_as = "*";
  e.status = kStatuses[pick(5)];
  e.finish_reason = e.status == EntryStatus::kCompleted ? "stop" : "cancelled";
  // Two entries in three have a miss anatomy (the others were written before
  // anatomies, or by a replica without them): the miss tokens split between
  // a few causes, the first miss somewhere in the prompt.
  if (pick(3) != 0) {
    int64_t left = e.miss_tokens;
    while (left > 0) {
      const int64_t n = pick(2) == 0 ? left : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(left));
      e.miss.tokens_by_cause[static_cast<size_t>(pick(static_cast<int>(kMissCauses)))] += n;
      left -= n;
    }
    e.miss.first_miss_token = e.hitTokens();
    e.miss.first_miss_message = pick(2) == 0 ? -1 : pick(12);
    e.miss.first_miss_region = static_cast<PromptRegion>(pick(static_cast<int>(kPromptRegions)));
    for (size_t c = 0; c < kMissCauses; ++c) {
      if (e.miss.tokens_by_cause[c] > 0) e.miss.first_miss_cause = static_cast<MissCause>(c);
    }
    if (e.miss.first_miss_cause == MissCause::kEvicted) {
      e.miss.evicted_tier = pick(2) == 0 ? "pool" : "disk";
      e.miss.evicted_ago_ms = pick(86'400'000);
    }
  }
  e.price();
  return e;
}

// The RocksDB ledger with the same entries: the reference for usage().
class ReferenceLedger {
 public:
  ReferenceLedger() {
    auto db = BillingDb::open(dir_.file("billing"));
    EXPECT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto ledger = Ledger::open(*db_);
    EXPECT_TRUE(ledger.isOk()) << ledger.status().toString();
    ledger_ = std::move(ledger).value();
  }
  void commit(const std::vector<LedgerEntry>& entries) {
    std::vector<std::future<Status>> done;
    for (const LedgerEntry& e : entries) {
      auto p = std::make_shared<std::promise<Status>>();
      done.push_back(p->get_future());
      ledger_->commit(e, std::nullopt, [p](Status s) { p->set_value(s); });
    }
    for (auto& f : done) ASSERT_TRUE(f.get().isOk());
  }
  Ledger& ledger() { return *ledger_; }

 private:
  test::TempDir dir_{"lg_pg_ref"};
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<Ledger> ledger_;
};

void expectSameRows(const std::vector<UsageRow>& got, const std::vector<UsageRow>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].group, want[i].group) << what << " row " << i;
    EXPECT_EQ(got[i].team, want[i].team) << what << " row " << i;
    EXPECT_EQ(got[i].period_start_s, want[i].period_start_s) << what << " row " << i;
    EXPECT_EQ(got[i].counters, want[i].counters) << what << " row " << i << " (" << got[i].group << ")";
  }
}

TEST_F(PgLedgerTest, MigrationsRunOnceWhenReplicasStartTogether) {
  constexpr int kReplicas = 4;
  std::vector<std::future<Result<MigrationReport>>> starts;
  std::promise<void> go;
  std::shared_future<void> ready = go.get_future().share();
  for (int i = 0; i < kReplicas; ++i) {
    starts.push_back(std::async(std::launch::async, [&, ready] {
      ready.wait();
      return migrate(options_);
    }));
  }
  go.set_value();
  int applied = 0;
  for (auto& f : starts) {
    auto r = f.get();
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_EQ(r->version, static_cast<int>(migrations().size()));
    applied += static_cast<int>(r->applied.size());
  }
  EXPECT_EQ(applied, static_cast<int>(migrations().size()));  // each migration by exactly one replica

  auto again = migrate(options_);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_TRUE(again->applied.empty());
  pqxx::connection c(options_.url);
  pqxx::read_transaction tx(c);
  EXPECT_EQ(tx.exec("SELECT count(*) FROM schema_migrations")[0][0].as<int>(), static_cast<int>(migrations().size()));
}

TEST_F(PgLedgerTest, EditedMigrationIsRefused) {
  migrated();
  {
    pqxx::connection c(options_.url);
    pqxx::work tx(c);
    tx.exec("UPDATE schema_migrations SET name = 'something else' WHERE version = 1");
    tx.commit();
  }
  auto r = migrate(options_);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().toString();
}

TEST_F(PgLedgerTest, ReplayedBatchIsCountedOnce) {
  migrated();
  std::mt19937_64 rng(1);
  std::vector<LedgerEntry> batch;
  for (int i = 0; i < 50; ++i) batch.push_back(randomEntry(rng, i));
  PgLedgerWriter writer(options_);
  auto first = writer.write(batch);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ(first->inserted, 50u);
  EXPECT_EQ(first->duplicates, 0u);

  PgLedgerReader reader(options_);
  UsageQuery all;
  all.to_s = std::numeric_limits<int32_t>::max();
  auto before = reader.usage(all);
  ASSERT_TRUE(before.isOk()) << before.status().toString();

  // The drain crashed after the commit, before it removed the batch from its outbox.
  auto replay = writer.write(batch);
  ASSERT_TRUE(replay.isOk()) << replay.status().toString();
  EXPECT_EQ(replay->inserted, 0u);
  EXPECT_EQ(replay->duplicates, 50u);
  // A batch that overlaps the first, with a request id twice in itself.
  std::vector<LedgerEntry> overlap = {batch[0], randomEntry(rng, 100), randomEntry(rng, 100)};
  auto third = writer.write(overlap);
  ASSERT_TRUE(third.isOk()) << third.status().toString();
  EXPECT_EQ(third->inserted, 1u);
  EXPECT_EQ(third->duplicates, 2u);

  auto count = reader.entryCount();
  ASSERT_TRUE(count.isOk());
  EXPECT_EQ(*count, 51);
  auto after = reader.usage(all);
  ASSERT_TRUE(after.isOk());
  ASSERT_EQ(after->size(), 1u);
  Counters expected = (*before)[0].counters;
  addCounters(expected, countersOf(overlap[1]));
  EXPECT_EQ((*after)[0].counters, expected);
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];
  EXPECT_EQ(verified->entries, 51u);
}

TEST_F(PgLedgerTest, RollupsEqualTheSumsOfTheRowsAndTheRocksDbLedger) {
  migrated();
  std::mt19937_64 rng(42);
  std::vector<LedgerEntry> all;
  for (int i = 0; i < 1500; ++i) all.push_back(randomEntry(rng, i));
  PgLedgerWriter writer(options_);
  // Batches of random sizes, each replaying part of what came before.
  size_t next = 0, written = 0;
  while (next < all.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 200, all.size() - next);
    std::vector<LedgerEntry> batch(all.begin() + static_cast<long>(next), all.begin() + static_cast<long>(next + n));
    for (int r = 0; r < 5 && next > 0; ++r) batch.push_back(all[rng() % next]);
    std::shuffle(batch.begin(), batch.end(), rng);
    auto w = writer.write(batch);
    ASSERT_TRUE(w.isOk()) << w.status().toString();
    EXPECT_EQ(w->inserted, n);
    written += w->inserted;
    next += n;
  }
  EXPECT_EQ(written, all.size());

  ReferenceLedger reference;
  reference.commit(all);
  PgLedgerReader reader(options_);
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];
  EXPECT_EQ(verified->entries, all.size());

  const int64_t from = 1'750'000'000 + 3600 * 5;  // a range that cuts the data
  const int64_t to = 1'750'000'000 + 86400 * 2;
  for (GroupBy g : {GroupBy::kNone, GroupBy::kKey, GroupBy::kTeam, GroupBy::kModel, GroupBy::kSystemPrompt}) {
    for (int64_t granularity : {int64_t{0}, int64_t{3600}, int64_t{86400}}) {
      for (const std::string& team : {std::string(), std::string("team-b")}) {
        for (bool whole : {true, false}) {
          if (g == GroupBy::kModel && !team.empty()) continue;
          UsageQuery q;
          q.group_by = g;
          q.granularity_s = granularity;
          q.team = team;
          q.from_s = whole ? 0 : from;
          q.to_s = whole ? std::numeric_limits<int32_t>::max() : to;
          auto got = reader.usage(q);
          auto want = reference.ledger().usage(q);
          ASSERT_TRUE(got.isOk()) << got.status().toString();
          ASSERT_TRUE(want.isOk()) << want.status().toString();
          expectSameRows(*got, *want,
                         std::string(groupByName(g)) + " granularity " + std::to_string(granularity) + " team " + team +
                             (whole ? " all" : " range"));
        }
      }
    }
  }
  UsageQuery by_key;
  by_key.key_id = all[0].key_id;
  by_key.team = all[0].team;
  by_key.to_s = std::numeric_limits<int32_t>::max();
  auto got = reader.usage(by_key);
  auto want = reference.ledger().usage(by_key);
  ASSERT_TRUE(got.isOk() && want.isOk());
  expectSameRows(*got, *want, "one key");
}

// The entries' reads the usage API and the dashboard make through
// billing::LedgerReads give what the RocksDB ledger gives for the same
// entries: scans by start time across pages (a page boundary inside a run of
// entries that share a start time), early stops, the newest entries of a
// range and of a team, and lookups by id. Request ids whose byte order is not
// a collation's ("Req" < "req", "req-10" < "req-9", UTF-8 after ASCII).
TEST_F(PgLedgerTest, EntriesReadAsTheRocksDbLedgerReadsThem) {
  migrated();
  std::mt19937_64 rng(23);
  std::vector<LedgerEntry> all;
  const char* kPrefixes[] = {"req-", "Req-", "req_", "r\u00e9q-", "REQ "};
  for (int i = 0; i < 2500; ++i) {
    LedgerEntry e = randomEntry(rng, i);
    e.request_id = std::string(kPrefixes[i % 5]) + std::to_string(i);
    // About eight entries per start time.
    e.start_us = 1'750'000'000'000'000 + static_cast<int64_t>(rng() % 300) * 1'000'000;
    all.push_back(e);
  }
  std::shuffle(all.begin(), all.end(), rng);
  PgLedgerWriter writer(options_);
  for (size_t at = 0; at < all.size(); at += 700) {
    std::vector<LedgerEntry> batch(all.begin() + static_cast<long>(at),
                                   all.begin() + static_cast<long>(std::min(at + 700, all.size())));
    ASSERT_TRUE(writer.write(batch).isOk());
  }
  ReferenceLedger reference;
  reference.commit(all);
  PgLedgerReader reader(options_);
  const LedgerReads& pg = reader;
  const LedgerReads& rocks = reference.ledger();
  EXPECT_EQ(pg.source(), "postgresql");
  EXPECT_EQ(rocks.source(), "rocksdb");

  const auto scan = [](const LedgerReads& r, int64_t from, int64_t to, size_t stop_after) {
    std::vector<std::string> out;
    const Status s = r.scanEntries(from, to, [&](const LedgerEntry& e) {
      out.push_back(encodeEntry(e));
      return out.size() < stop_after;
    });
    EXPECT_TRUE(s.isOk()) << s.toString();
    return out;
  };
  const int64_t t0 = 1'750'000'000'000'000;
  struct Range {
    int64_t from, to;
    size_t stop_after;
  };
  for (const Range& r : {Range{0, std::numeric_limits<int64_t>::max(), SIZE_MAX}, Range{t0 + 17'000'000, t0 + 250'000'000, SIZE_MAX},
                         Range{-5, t0 + 1, SIZE_MAX}, Range{0, std::numeric_limits<int64_t>::max(), 1001},
                         Range{t0 + 3'000'000, t0 + 3'000'000, SIZE_MAX}}) {
    const auto got = scan(pg, r.from, r.to, r.stop_after);
    const auto want = scan(rocks, r.from, r.to, r.stop_after);
    ASSERT_EQ(got.size(), want.size()) << r.from << ".." << r.to;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "entry " << i << " of " << r.from << ".." << r.to;
  }
  EXPECT_EQ(scan(pg, 0, std::numeric_limits<int64_t>::max(), SIZE_MAX).size(), all.size());

  struct Recent {
    size_t limit;
    std::string team;
    int64_t from, to;
  };
  for (const Recent& q : {Recent{50, "", 0, std::numeric_limits<int64_t>::max()}, Recent{1200, "", 0, t0 + 200'000'000},
                          Recent{40, "team-b", t0 + 10'000'000, t0 + 100'000'000}, Recent{0, "", 0, t0 + 1'000'000'000},
                          Recent{10, "team-none", 0, std::numeric_limits<int64_t>::max()}}) {
    auto got = pg.recentEntries(q.limit, q.team, q.from, q.to, 100'000);
    auto want = rocks.recentEntries(q.limit, q.team, q.from, q.to, 100'000);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    ASSERT_TRUE(want.isOk()) << want.status().toString();
    ASSERT_EQ(got->size(), want->size()) << q.limit << " " << q.team;
    for (size_t i = 0; i < got->size(); ++i) ASSERT_EQ(encodeEntry((*got)[i]), encodeEntry((*want)[i])) << i;
  }
  // A team rare among the newest: the RocksDB ledger's bounded scan finds
  // fewer, PostgreSQL's index all that the limit asks for.
  auto rare = pg.recentEntries(30, "team-c", 0, std::numeric_limits<int64_t>::max(), 5);
  ASSERT_TRUE(rare.isOk());
  EXPECT_EQ(rare->size(), 30u);

  for (size_t i = 0; i < all.size(); i += 311) {
    auto got = pg.find(all[i].request_id);
    ASSERT_TRUE(got.isOk() && got->has_value()) << all[i].request_id;
    EXPECT_EQ(encodeEntry(**got), encodeEntry(all[i]));
  }
  auto none = pg.find("no-such-request");
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->has_value());
}

TEST_F(PgLedgerTest, ConcurrentWritersWithOverlappingBatchesCountEachEntryOnce) {
  migrated();
  std::mt19937_64 rng(7);
  std::vector<LedgerEntry> all;
  for (int i = 0; i < 800; ++i) all.push_back(randomEntry(rng, i));
  constexpr int kWriters = 4;
  std::atomic<size_t> inserted{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      PgLedgerWriter writer(options_);
      std::mt19937_64 local(static_cast<uint64_t>(w));
      // Every writer writes every entry, in its own order and batches: the
      // worst case of replicas replaying each other's outboxes.
      std::vector<LedgerEntry> mine = all;
      std::shuffle(mine.begin(), mine.end(), local);
      for (size_t i = 0; i < mine.size(); i += 100) {
        std::vector<LedgerEntry> batch(mine.begin() + static_cast<long>(i),
                                       mine.begin() + static_cast<long>(std::min(i + 100, mine.size())));
        auto r = writer.write(batch);
        ASSERT_TRUE(r.isOk()) << r.status().toString();
        inserted += r->inserted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(inserted.load(), all.size());
  PgLedgerReader reader(options_);
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];
  EXPECT_EQ(verified->entries, all.size());
}

TEST_F(PgLedgerTest, TheMissAnatomyRoundTripsAndFeedsTheMissCounters) {
  migrated();
  std::mt19937_64 rng(7);
  LedgerEntry evicted = randomEntry(rng, 1);
  evicted.team = "team-a";
  evicted.key_id = "team-a-key0";
  evicted.start_us = 1'750'000'000'000'000;
  evicted.miss_tokens = 300;
  evicted.miss = MissAnatomy{};
  evicted.miss.tokens_by_cause[static_cast<size_t>(MissCause::kEvicted)] = 250;
  evicted.miss.tokens_by_cause[static_cast<size_t>(MissCause::kPartialBlock)] = 50;
  evicted.miss.first_miss_token = 4096;
  evicted.miss.first_miss_message = 3;
  evicted.miss.first_miss_region = PromptRegion::kHistory;
  evicted.miss.first_miss_cause = MissCause::kEvicted;
  evicted.miss.evicted_tier = "disk";
  evicted.miss.evicted_ago_ms = 123'456;
  LedgerEntry fresh = evicted;
  fresh.request_id = "req-fresh";
  fresh.miss_tokens = 1000;
  fresh.miss = MissAnatomy{};
  fresh.miss.tokens_by_cause[static_cast<size_t>(MissCause::kNew)] = 1000;
  fresh.miss.first_miss_token = 0;
  fresh.miss.first_miss_message = 0;
  fresh.miss.first_miss_region = PromptRegion::kSystem;
  LedgerEntry without = evicted;  // committed before anatomies existed
  without.request_id = "req-without";
  without.miss = MissAnatomy{};
  ASSERT_FALSE(without.miss.recorded());
  for (LedgerEntry* e : {&evicted, &fresh, &without}) e->price();

  PgLedgerWriter writer(options_);
  auto w = writer.write({evicted, fresh, without});
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  PgLedgerReader reader(options_);
  for (const LedgerEntry* e : {&evicted, &fresh, &without}) {
    auto found = reader.find(e->request_id);
    ASSERT_TRUE(found.isOk()) << found.status().toString();
    ASSERT_TRUE(found->has_value()) << e->request_id;
    EXPECT_EQ((*found)->miss, e->miss) << e->request_id;
    EXPECT_EQ(encodeEntry(**found), encodeEntry(*e));
  }
  {
    // Without an anatomy the column is NULL, not an empty object.
    pqxx::connection c(options_.url);
    pqxx::read_transaction tx(c);
    EXPECT_TRUE(tx.exec("SELECT miss FROM ledger_entries WHERE request_id = 'req-without'")[0][0].is_null());
    EXPECT_EQ(tx.exec("SELECT miss->>'evicted_tier' FROM ledger_entries WHERE request_id = '" + evicted.request_id + "'")
                  [0][0].as<std::string>(), "disk");
  }

  UsageQuery q;
  q.to_s = std::numeric_limits<int32_t>::max();
  q.team = "team-a";
  auto rows = reader.usage(q);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 1u);
  const Counters& c = (*rows)[0].counters;
  EXPECT_EQ(c[kMissEvicted], 250u);
  EXPECT_EQ(c[kMissPartialBlock], 50u);
  EXPECT_EQ(c[kMissNew], 1000u);
  EXPECT_EQ(c[kMissInFlight], 0u);
  EXPECT_EQ(c[kFirstMissHistory], 300u);  // the evicted entry's miss tokens; the one without counts in none
  EXPECT_EQ(c[kFirstMissSystem], 1000u);
  EXPECT_EQ(c[kFirstMissInput], 0u);
  EXPECT_EQ(c[kMissTokens], 1600u);
  Counters sum{};
  for (const LedgerEntry* e : {&evicted, &fresh, &without}) addCounters(sum, countersOf(*e));
  EXPECT_EQ(c, sum);
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];

  // A rollup that lost a miss-cause increment is found by verify.
  {
    pqxx::connection conn(options_.url);
    pqxx::work tx(conn);
    tx.exec("UPDATE usage_hourly SET miss_evicted = miss_evicted - 1 WHERE dimension = 'key'");
    tx.commit();
  }
  verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  ASSERT_EQ(verified->mismatches.size(), 1u);
  EXPECT_NE(verified->mismatches[0].find("key/"), std::string::npos) << verified->mismatches[0];
}

// A database that had entries and rollups before migration 5: its entries
// read back without an anatomy, its rollups gain zeros (exact: none of its
// entries had one), verify still agrees, and later entries add to the same rows.
TEST_F(PgLedgerTest, EntriesFromBeforeMigrationFiveKeepNoAnatomyAndZeroMissCounters) {
  const size_t kBefore = 4;  // migrations 1..4
  ASSERT_EQ(migrations()[kBefore].version, 5);
  std::mt19937_64 rng(11);
  LedgerEntry old_entry = randomEntry(rng, 1);
  old_entry.miss = MissAnatomy{};
  old_entry.status = EntryStatus::kCompleted;
  old_entry.price();
  {
    pqxx::connection c(options_.url);
    pqxx::work tx(c);
    tx.exec("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())");
    for (size_t i = 0; i < kBefore; ++i) {
      tx.exec(std::string(migrations()[i].sql));
      tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", migrations()[i].version,
                     std::string(migrations()[i].name));
    }
    // The entry and its rollups as the version-4 writer left them: the
    // fourteen counters it had, summed by the same expressions.
    const LedgerEntry& e = old_entry;
    tx.exec_params(
        "INSERT INTO ledger_entries (request_id, response_id, key_id, team, model, requested_model, endpoint,"
        " system_prompt, idempotency_key, start_us, end_us, ttft_us, prompt_tokens, hit_tokens_tier0, hit_tokens_disk,"
        " miss_tokens, output_tokens, choices, rate_hit, rate_miss, rate_output, price_version, priced_as, price_window,"
        " cost_hit, cost_miss, cost_output, status, finish_reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
        " $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)",
        e.request_id, e.response_id, e.key_id, e.team, e.model, e.requested_model, e.endpoint, e.system_prompt,
        e.idempotency_key, e.start_us, e.end_us, e.ttft_us, e.prompt_tokens, e.hit_tokens_tier0, e.hit_tokens_disk,
        e.miss_tokens, e.output_tokens, e.choices, e.prices.rates.input_cache_hit, e.prices.rates.input_cache_miss,
        e.prices.rates.output, e.prices.version, e.prices.priced_as, e.prices.window, e.cost.input_cache_hit,
        e.cost.input_cache_miss, e.cost.output, std::string(entryStatusName(e.status)), e.finish_reason);
    std::string columns, sums;
    for (size_t i = 0; i < kMissNew; ++i) {
      columns += ", " + counterColumns()[i].name;
      sums += ", " + counterColumns()[i].rollup;
    }
    tx.exec("INSERT INTO usage_hourly (dimension, hour_s, team, value" + columns + ")"
            " SELECT d.dimension, greatest(s.start_us, 0) / 3600000000 * 3600, d.team, d.value" + sums +
            " FROM ledger_entries AS s CROSS JOIN LATERAL (VALUES ('key', s.team, s.key_id), ('team', s.team, s.team),"
            " ('model', '', s.model), ('system_prompt', s.team, s.system_prompt)) AS d(dimension, team, value)"
            " GROUP BY 1, 2, 3, 4");
    tx.commit();
  }
  auto report = migrate(options_);
  ASSERT_TRUE(report.isOk()) << report.status().toString();
  EXPECT_EQ(report->applied, std::vector<int>{5});

  PgLedgerReader reader(options_);
  auto found = reader.find(old_entry.request_id);
  ASSERT_TRUE(found.isOk()) << found.status().toString();
  ASSERT_TRUE(found->has_value());
  EXPECT_FALSE((*found)->miss.recorded());
  EXPECT_EQ(encodeEntry(**found), encodeEntry(old_entry));
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];

  // A later entry of the same key and hour, with an anatomy, adds to the old rows.
  LedgerEntry new_entry = old_entry;
  new_entry.request_id = "req-after-migration-5";
  new_entry.miss.tokens_by_cause[static_cast<size_t>(MissCause::kRecomputed)] = new_entry.miss_tokens;
  new_entry.miss.first_miss_token = new_entry.hitTokens();
  new_entry.miss.first_miss_region = PromptRegion::kTools;
  new_entry.miss.first_miss_cause = MissCause::kRecomputed;
  PgLedgerWriter writer(options_);
  ASSERT_TRUE(writer.write({new_entry}).isOk());
  UsageQuery q;
  q.to_s = std::numeric_limits<int32_t>::max();
  q.key_id = old_entry.key_id;
  auto rows = reader.usage(q);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 1u);
  Counters want = countersOf(old_entry);
  addCounters(want, countersOf(new_entry));
  EXPECT_EQ((*rows)[0].counters, want);
  EXPECT_EQ((*rows)[0].counters[kMissRecomputed], static_cast<uint64_t>(new_entry.miss_tokens));
  EXPECT_EQ((*rows)[0].counters[kFirstMissTools], static_cast<uint64_t>(new_entry.miss_tokens));
  verified = reader.verify();
  ASSERT_TRUE(verified.isOk()) << verified.status().toString();
  EXPECT_TRUE(verified->ok()) << verified->mismatches[0];
}

TEST_F(PgLedgerTest, MoneyAndTextRoundTripExactly) {
  migrated();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  LedgerEntry e;
  e.request_id = "req-extreme";
  e.response_id = "chatcmpl-\"quoted\"\t\\back\\slash\nnewline é 漢字 🙂";
  e.key_id = "key'; DROP TABLE ledger_entries; --";
  e.team = "team-x";
  e.model = "m";
  e.requested_model = "{\"json\": [1, 2]}";
  e.endpoint = "/v1/responses";
  e.system_prompt = std::string(64, 'f');
  e.idempotency_key = std::string(64, 'a');
  e.start_us = 1'750'000'000'000'000;
  e.end_us = kMax;
  e.ttft_us = -1;
  e.prompt_tokens = kMax;
  e.hit_tokens_tier0 = kMax;
  e.hit_tokens_disk = 0;
  e.miss_tokens = kMin;
  e.output_tokens = kMax - 1;
  e.choices = std::numeric_limits<int32_t>::max();
  e.prices.rates = {kMax, kMin, 1};
  e.prices.version = kMax;
  e.prices.priced_as = "default";
  e.prices.window = -1;
  e.cost = {kMax, kMin, kMax};
  e.status = EntryStatus::kFailed;  // not billable: its rollup has no hit-at-miss-price product
  e.finish_reason = "error";
  PgLedgerWriter writer(options_);
  auto w = writer.write({e});
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  PgLedgerReader reader(options_);
  auto found = reader.find(e.request_id);
  ASSERT_TRUE(found.isOk()) << found.status().toString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(encodeEntry(**found), encodeEntry(e));  // every field, byte for byte

  // The largest costs the ledger can produce (a rate of $1,000 per 1M
  // tokens, 2^31 - 1 tokens): eight in one hour sum past int64 but within
  // the usage row's uint64, and the rollup holds that exactly.
  const int64_t tokens = std::numeric_limits<int32_t>::max();
  const Rates max_rates{1'000'000'000, 1'000'000'000, 1'000'000'000};
  std::vector<LedgerEntry> big;
  for (int i = 0; i < 8; ++i) {
    LedgerEntry b;
    b.request_id = "req-big-" + std::to_string(i);
    b.key_id = "k";
    b.team = "team-big";
    b.model = "m";
    b.start_us = 1'760'000'000'000'000;
    b.hit_tokens_tier0 = tokens;
    b.miss_tokens = tokens;
    b.output_tokens = tokens;
    b.prompt_tokens = 2 * tokens;
    b.prices.rates = max_rates;
    b.price();
    ASSERT_EQ(b.cost.input_cache_hit, 1'000'000'000 * tokens);
    big.push_back(b);
  }
  ASSERT_TRUE(writer.write(big).isOk());
  UsageQuery q;
  q.team = "team-big";
  q.to_s = std::numeric_limits<int32_t>::max();
  auto usage = reader.usage(q);
  ASSERT_TRUE(usage.isOk()) << usage.status().toString();
  ASSERT_EQ(usage->size(), 1u);
  const uint64_t per_kind = 8ull * 1'000'000'000ull * static_cast<uint64_t>(tokens);
  EXPECT_GT(per_kind, static_cast<uint64_t>(kMax));
  EXPECT_EQ((*usage)[0].counters[kCostHit], per_kind);
  EXPECT_EQ((*usage)[0].counters[kCostMiss], per_kind);
  EXPECT_EQ((*usage)[0].counters[kCostOutput], per_kind);
  EXPECT_EQ((*usage)[0].counters[kHitAtMissPrice], per_kind);
  EXPECT_EQ(costTotal((*usage)[0].counters), static_cast<Int128>(per_kind) * 3);

  // Two more hours' worth pass the uint64 a usage row holds: an error, not a wrapped number.
  for (int i = 8; i < 24; ++i) {
    big[0].request_id = "req-big-" + std::to_string(i);
    ASSERT_TRUE(writer.write({big[0]}).isOk());
  }
  auto too_big = reader.usage(q);
  ASSERT_FALSE(too_big.isOk());
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfRange) << too_big.status().toString();
}

TEST_F(PgLedgerTest, TextPostgresCannotHoldIsRefusedBeforeSending) {
  migrated();
  std::mt19937_64 rng(3);
  LedgerEntry e = randomEntry(rng, 1);
  e.finish_reason = std::string("a\0b", 3);
  PgLedgerWriter writer(options_);
  auto w = writer.write({e});
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  e.finish_reason = "\xff\xfe";
  w = writer.write({e});
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PgLedgerTest, NoServerIsAnUnavailableStatus) {
  PostgresOptions nowhere;
  nowhere.url = "postgresql://lg@127.0.0.1:" + std::to_string(test::freeLoopbackPort()) + "/x";
  auto m = migrate(nowhere);
  ASSERT_FALSE(m.isOk());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status().toString();
  std::mt19937_64 rng(5);
  PgLedgerWriter writer(nowhere);
  auto w = writer.write({randomEntry(rng, 1)});
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable) << w.status().toString();
  PgLedgerReader reader(nowhere);
  auto u = reader.usage(UsageQuery{});
  ASSERT_FALSE(u.isOk());
  EXPECT_EQ(u.status().code(), StatusCode::kUnavailable);
  // Every read fails the same way, and says nothing of the password.
  PostgresOptions secret = nowhere;
  secret.url = "postgresql://lg:s3cr3t-pw@127.0.0.1:" + std::to_string(test::freeLoopbackPort()) + "/x";
  PgLedgerReader guarded(secret);
  const LedgerReads& reads = guarded;
  std::vector<Status> failures = {reads.find("r").status(), reads.recentEntries(5, "", 0, 1, 5).status(),
                                  reads.verify().status(), reads.scanEntries(0, 1, [](const LedgerEntry&) { return true; })};
  for (const Status& s : failures) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.toString();
    EXPECT_EQ(s.message().find("s3cr3t-pw"), std::string::npos) << s.toString();
  }
}

TEST_F(PgLedgerTest, PostgresAwayAndBackWritesTheHeldBatchOnce) {
  migrated();
  std::mt19937_64 rng(9);
  std::vector<LedgerEntry> first, held;
  for (int i = 0; i < 20; ++i) first.push_back(randomEntry(rng, i));
  for (int i = 20; i < 40; ++i) held.push_back(randomEntry(rng, i));
  PgLedgerWriter writer(options_);
  PgLedgerReader reader(options_);
  ASSERT_TRUE(writer.write(first).isOk());
  ASSERT_TRUE(reader.entryCount().isOk());  // both hold a connection that the stop breaks

  const pid_t pid = test::sharedPostgres()->pid();
  test::sharedPostgres()->stop();
  EXPECT_NE(kill(pid, 0), 0);
  auto w = writer.write(held);
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable) << w.status().toString();
  auto c = reader.entryCount();
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().toString();
  w = writer.write(held);  // still away: a fresh connection is refused
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable);

  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  std::vector<LedgerEntry> drain = first;  // the outbox still held the first batch too
  drain.insert(drain.end(), held.begin(), held.end());
  w = writer.write(drain);
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  EXPECT_EQ(w->inserted, held.size());
  c = reader.entryCount();
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(*c, 40);
  auto verified = reader.verify();
  ASSERT_TRUE(verified.isOk());
  EXPECT_TRUE(verified->ok());
}

// Before the drain has migrated the database (a first start while
// PostgreSQL was away) its tables are not there: Unavailable, as when the
// server is away (the routes' 503), not an internal error.
TEST_F(PgLedgerTest, ReadsBeforeTheSchemaIsMigratedAreUnavailable) {
  PgLedgerReader reader(options_);
  UsageQuery all;
  all.to_s = 3600;
  auto early = reader.usage(all);
  ASSERT_FALSE(early.isOk());
  EXPECT_EQ(early.status().code(), StatusCode::kUnavailable) << early.status().toString();
  migrated();
  auto later = reader.usage(all);
  ASSERT_TRUE(later.isOk()) << later.status().toString();
  EXPECT_TRUE(later->empty());
}

// A reader (the usage API's) whose connection PostgreSQL closed while it sat
// idle: its first read after PostgreSQL is back succeeds, on a new connection.
TEST_F(PgLedgerTest, AConnectionClosedWhileIdleIsReplacedOnItsNextUse) {
  migrated();
  PgLedgerReader reader(options_);
  ASSERT_TRUE(reader.entryCount().isOk());
  test::sharedPostgres()->stop();
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  auto n = reader.entryCount();
  ASSERT_TRUE(n.isOk()) << n.status().toString();
  EXPECT_EQ(*n, 0);
}

// Not a benchmark (docs/benchmarks.md will hold one): a bound that shows a
// drain of thousands of entries a second is within reach on this machine.
TEST_F(PgLedgerTest, BatchesOfAThousandWriteQuickly) {
  migrated();
  std::mt19937_64 rng(11);
  std::vector<LedgerEntry> all;
  for (int i = 0; i < 10'000; ++i) all.push_back(randomEntry(rng, i));
  PgLedgerWriter writer(options_);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < all.size(); i += 1000) {
    std::vector<LedgerEntry> batch(all.begin() + static_cast<long>(i), all.begin() + static_cast<long>(i + 1000));
    auto w = writer.write(batch);
    ASSERT_TRUE(w.isOk()) << w.status().toString();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %zu entries in batches of 1000 in %.3f s: %.0f entries/s\n", all.size(), s,
              static_cast<double>(all.size()) / s);
  EXPECT_LT(s, 30.0);
}

}  // namespace
}  // namespace lg::billing::pg

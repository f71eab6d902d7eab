// The ledger's outbox drained into a real, private PostgreSQL
// (billing/postgres/ledger_drain.h): one PostgreSQL per run of this binary,
// a fresh database per test, the real RocksDB Ledger committing entries.
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "billing/postgres/ledger_drain.h"
#include "billing/postgres/pg_ledger_reader.h"
#include "billing/postgres/pg_ledger_writer.h"
#include "billing/postgres/pg_schema.h"
#include "common/metrics.h"
#include "tests/support/postgres_environment.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace lg::billing::pg {
namespace {

using namespace std::chrono_literals;

LedgerEntry entryNumber(int i) {
  LedgerEntry e;
  e.request_id = "req-" + std::to_string(i);
  e.response_id = "chatcmpl-" + std::to_string(i);
  e.team = i % 2 == 0 ? "team-a" : "team-b";
  e.key_id = e.team + "-key";
  e.model = "demo";
  e.requested_model = "deepseek-chat";
  e.endpoint = "/v1/chat/completions";
  e.start_us = 1'750'000'000'000'000 + int64_t{i} * 7'000'000;
  e.end_us = e.start_us + 1000;
  e.ttft_us = 400;
  e.hit_tokens_tier0 = i % 7 * 64;
  e.miss_tokens = 10 + i % 13;
  e.prompt_tokens = e.hit_tokens_tier0 + e.miss_tokens;
  e.output_tokens = 5 + i % 11;
  e.prices.rates = kDeepSeekRates;
  e.prices.priced_as = "*";
  e.status = i % 5 == 4 ? EntryStatus::kCancelled : EntryStatus::kCompleted;
  e.finish_reason = e.status == EntryStatus::kCompleted ? "stop" : "cancelled";
  e.price();
  return e;
}

// A RocksDB ledger in a temporary directory; reopen() closes and opens it again.
class LocalLedger {
 public:
  explicit LocalLedger(bool outbox) { reopen(outbox); }
  void reopen(bool outbox) {
    ledger_.reset();
    db_.reset();
    auto db = BillingDb::open(dir_.file("billing"));
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    LedgerOptions o;
    o.outbox = outbox;
    auto ledger = Ledger::open(*db_, o);
    ASSERT_TRUE(ledger.isOk()) << ledger.status().toString();
    ledger_ = std::move(ledger).value();
  }
  void commit(int from, int to) {
    std::vector<std::future<Status>> done;
    for (int i = from; i < to; ++i) {
      auto p = std::make_shared<std::promise<Status>>();
      done.push_back(p->get_future());
      ledger_->commit(entryNumber(i), std::nullopt, [p](Status s) { p->set_value(s); });
    }
    for (auto& f : done) ASSERT_TRUE(f.get().isOk());
  }
  size_t keysUnder(std::string_view prefix) const {
    size_t n = 0;
    EXPECT_TRUE(db_->scan(prefix, [&](std::string_view, std::string_view) { return ++n, true; }).isOk());
    return n;
  }
  Ledger& ledger() { return *ledger_; }

 private:
  test::TempDir dir_{"lg_drain"};
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<Ledger> ledger_;
};

class LedgerDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    const auto url = test::freshPostgresDatabase("d", &error);
    ASSERT_TRUE(url.has_value()) << error;
    options_.postgres.url = *url;
    options_.postgres.connect_timeout_s = 1;
    options_.postgres.statement_timeout_ms = 5000;
    options_.interval = 20ms;
    options_.retry_min = 20ms;
    options_.retry_max = 100ms;
    options_.batch_size = 64;
  }

  std::unique_ptr<LedgerDrain> startDrain(Ledger& ledger) {
    auto d = LedgerDrain::start(ledger, options_);
    EXPECT_TRUE(d.isOk()) << d.status().toString();
    return d.isOk() ? std::move(d).value() : nullptr;
  }

  // Waits (bounded) until the outbox is empty.
  static bool drained(Ledger& ledger, std::chrono::milliseconds limit = 10s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (ledger.outboxDepth() > 0) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  // PostgreSQL holds exactly the ledger's entries, field for field, and its rollups add up.
  void expectPostgresEqualsLedger(Ledger& ledger, int64_t count) {
    PgLedgerReader reader(options_.postgres);
    auto n = reader.entryCount();
    ASSERT_TRUE(n.isOk()) << n.status().toString();
    EXPECT_EQ(*n, count);
    int64_t seen = 0;
    ASSERT_TRUE(ledger.scanEntries(0, INT64_MAX, [&](const LedgerEntry& e) {
      ++seen;
      auto found = reader.find(e.request_id);
      EXPECT_TRUE(found.isOk() && found->has_value()) << e.request_id;
      if (found.isOk() && found->has_value()) {
        EXPECT_EQ(encodeEntry(**found), encodeEntry(e));
      }
      return true;
    }).isOk());
    EXPECT_EQ(seen, count);
    auto v = reader.verify();
    ASSERT_TRUE(v.isOk()) << v.status().toString();
    EXPECT_TRUE(v->ok()) << (v->mismatches.empty() ? "" : v->mismatches[0]);
  }

  DrainOptions options_;
};

TEST_F(LedgerDrainTest, CommittedEntriesReachPostgresOnceAndTheOutboxEmpties) {
  LocalLedger local(/*outbox=*/true);
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  local.commit(0, 150);
  ASSERT_TRUE(drained(local.ledger()));
  EXPECT_EQ(local.keysUnder("led/outbox/"), 0u);
  expectPostgresEqualsLedger(local.ledger(), 150);
  const DrainStats s = drain->stats();
  EXPECT_EQ(s.drained, 150u);
  EXPECT_EQ(s.duplicates, 0u);
  EXPECT_GT(s.last_success_us, 0);
  EXPECT_EQ(drain->state(), DrainState::kDraining);

  metrics::ExpositionWriter w;
  drain->collect(w);
  EXPECT_NE(w.text().find("latentgate_ledger_outbox_entries 0"), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("latentgate_ledger_drained_total 150"), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("latentgate_ledger_drain_state{state=\"draining\"} 1"), std::string::npos) << w.text();
  EXPECT_EQ(w.dropped(), 0u);
}

TEST_F(LedgerDrainTest, PostgresAwayCommitsContinueTheOutboxHoldsAndDrainsOnReturn) {
  LocalLedger local(/*outbox=*/true);
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  local.commit(0, 40);
  ASSERT_TRUE(drained(local.ledger()));

  test::sharedPostgres()->stop();
  local.commit(40, 140);  // every commit still succeeds: the ledger never waits for PostgreSQL
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (drain->stats().failures == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_GT(drain->stats().failures, 0u);
  EXPECT_EQ(drain->state(), DrainState::kRetrying);
  EXPECT_EQ(local.ledger().outboxDepth(), 100u);
  EXPECT_EQ(local.keysUnder("led/outbox/"), 100u);
  metrics::ExpositionWriter w;
  drain->collect(w);
  EXPECT_NE(w.text().find("latentgate_ledger_outbox_entries 100"), std::string::npos) << w.text();

  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  local.commit(140, 160);
  ASSERT_TRUE(drained(local.ledger()));
  expectPostgresEqualsLedger(local.ledger(), 160);
  EXPECT_EQ(drain->state(), DrainState::kDraining);
}

// A drain that crashed after PostgreSQL's commit and before deleting its
// markers: the next drain writes the same batch again, which adds nothing.
TEST_F(LedgerDrainTest, BatchWrittenAgainAfterACrashIsNotDuplicated) {
  LocalLedger local(/*outbox=*/true);
  local.commit(0, 100);
  ASSERT_EQ(local.ledger().outboxDepth(), 100u);
  {
    ASSERT_TRUE(migrate(options_.postgres).isOk());
    auto batch = local.ledger().readOutbox(70);
    ASSERT_TRUE(batch.isOk());
    PgLedgerWriter writer(options_.postgres);
    auto w = writer.write(batch->entries);  // committed; the "crash" leaves the markers
    ASSERT_TRUE(w.isOk()) << w.status().toString();
    EXPECT_EQ(w->inserted, 70u);
  }
  local.reopen(/*outbox=*/true);  // the restart
  EXPECT_EQ(local.ledger().outboxDepth(), 100u);
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  ASSERT_TRUE(drained(local.ledger()));
  EXPECT_EQ(drain->stats().duplicates, 70u);
  expectPostgresEqualsLedger(local.ledger(), 100);
}

TEST_F(LedgerDrainTest, WithoutPostgresNothingIsWrittenToTheOutbox) {
  LocalLedger local(/*outbox=*/false);
  local.commit(0, 30);
  EXPECT_EQ(local.keysUnder("led/outbox"), 0u);  // no marker, no led/outbox-on
  EXPECT_EQ(local.ledger().outboxDepth(), 0u);
  auto refused = LedgerDrain::start(local.ledger(), options_);
  EXPECT_FALSE(refused.isOk());
}

// Turning PostgreSQL on for a ledger with history queues that history once;
// entries committed while it was off again are queued at the next start.
TEST_F(LedgerDrainTest, ExistingEntriesAreQueuedWhenTheOutboxIsTurnedOn) {
  LocalLedger local(/*outbox=*/false);
  local.commit(0, 50);
  local.reopen(/*outbox=*/true);
  EXPECT_EQ(local.ledger().outboxDepth(), 50u);
  {
    auto drain = startDrain(local.ledger());
    ASSERT_NE(drain, nullptr);
    local.commit(50, 60);
    ASSERT_TRUE(drained(local.ledger()));
  }
  local.reopen(/*outbox=*/false);
  local.commit(60, 70);
  EXPECT_EQ(local.keysUnder("led/outbox/"), 0u);
  local.reopen(/*outbox=*/true);
  EXPECT_EQ(local.ledger().outboxDepth(), 70u);  // every entry again; PostgreSQL keeps what it holds
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  ASSERT_TRUE(drained(local.ledger()));
  EXPECT_EQ(drain->stats().duplicates, 60u);
  expectPostgresEqualsLedger(local.ledger(), 70);
}

TEST_F(LedgerDrainTest, ShutdownDrainsWhatIsLeftWithinItsBound) {
  LocalLedger local(/*outbox=*/true);
  options_.interval = 60s;  // only the final attempt can drain what follows the first batch
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (drain->state() != DrainState::kDraining && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  local.commit(0, 200);
  EXPECT_GT(local.ledger().outboxDepth(), 0u);
  drain.reset();
  EXPECT_EQ(local.ledger().outboxDepth(), 0u);
  expectPostgresEqualsLedger(local.ledger(), 200);

  // PostgreSQL away: the final attempt gives up within its bound, the outbox holds.
  auto again = startDrain(local.ledger());
  ASSERT_NE(again, nullptr);
  while (again->state() != DrainState::kDraining && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  test::sharedPostgres()->stop();
  local.commit(200, 220);
  const auto t0 = std::chrono::steady_clock::now();
  again.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_EQ(local.ledger().outboxDepth(), 20u);
}

// Text PostgreSQL cannot hold is set aside, not left to block the outbox.
TEST_F(LedgerDrainTest, AnEntryPostgresCannotHoldIsRejectedAndTheRestDrain) {
  LocalLedger local(/*outbox=*/true);
  LedgerEntry bad = entryNumber(1000);
  bad.finish_reason = std::string("stop\0x", 6);
  std::promise<Status> p;
  local.ledger().commit(bad, std::nullopt, [&](Status s) { p.set_value(s); });
  ASSERT_TRUE(p.get_future().get().isOk());
  local.commit(0, 20);
  auto drain = startDrain(local.ledger());
  ASSERT_NE(drain, nullptr);
  ASSERT_TRUE(drained(local.ledger()));
  EXPECT_EQ(drain->stats().rejected, 1u);
  EXPECT_EQ(local.keysUnder("led/outbox-rejected/"), 1u);
  PgLedgerReader reader(options_.postgres);
  auto n = reader.entryCount();
  ASSERT_TRUE(n.isOk());
  EXPECT_EQ(*n, 20);
}

}  // namespace
}  // namespace lg::billing::pg

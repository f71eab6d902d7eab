// The control plane in PostgreSQL (billing/postgres/pg_control_plane.h):
// replicas, each with its own billing store (a temporary directory) and the
// real KeyStore, Budgets, PriceBook and Ledger, sharing one real, private
// PostgreSQL (tests/support/postgres_server.h; a fresh database per test).
// Keys, revocations, team deletions, budgets and prices made on one replica
// reach the others within the stated bound (the follower's interval plus one
// poll); concurrent changes lose nothing; an existing install seeds
// PostgreSQL; PostgreSQL away refuses writes and keeps serving the last view.
// And the index of stored responses (pg_response_index.h): which replica
// holds which response, deletion final, PostgreSQL away. And the system
// prompt fingerprint's key (pg_fingerprint_key.h): one for every replica, the
// first replica's, kept in each store; PostgreSQL away at start.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <pqxx/pqxx>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "billing/billing_db.h"
#include "billing/budgets.h"
#include "billing/control_plane.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/postgres/pg_control_plane.h"
#include "billing/postgres/pg_fingerprint_key.h"
#include "billing/postgres/pg_response_index.h"
#include "billing/postgres/pg_schema.h"
#include "billing/prices.h"
#include "billing/prompt_fingerprint.h"
#include "billing/response_index.h"
#include "common/hex.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/unix_time.h"
#include "tests/support/postgres_environment.h"
#include "tests/support/temp_dir.h"

namespace lg::billing::pg {
namespace {

using namespace std::chrono_literals;

// The bound a test holds the follower to: its interval plus one poll, with
// room for a loaded machine (two shared cores).
constexpr auto kInterval = 150ms;
constexpr auto kBound = kInterval + 1500ms;

// Waits (bounded by `limit`) until `done`; how long it took, or nullopt.
std::optional<std::chrono::milliseconds> waitFor(const std::function<bool()>& done,
                                                 std::chrono::milliseconds limit = 10s) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (done()) return elapsed;
    if (elapsed > limit) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

// One replica: a billing store of its own and the stores serve builds over
// it, with PostgreSQL as their control plane (as proxy/server/server.cc).
class Replica {
 public:
  explicit Replica(std::string url) : url_(std::move(url)) {}
  ~Replica() { close(); }

  Status open() {
    LG_ASSIGN_OR_RETURN(db_, BillingDb::open(dir_.file("billing")));
    ControlSyncOptions o;
    o.postgres.url = url_;
    o.postgres.connect_timeout_s = 1;
    o.postgres.statement_timeout_ms = 5000;
    o.interval = kInterval;
    LG_ASSIGN_OR_RETURN(control_, PgControlPlane::create(*db_, o));
    LG_ASSIGN_OR_RETURN(keys_, KeyStore::open(*db_, *control_));
    LG_ASSIGN_OR_RETURN(prices_, PriceBook::open(*db_, *control_));
    LG_ASSIGN_OR_RETURN(ledger_, Ledger::open(*db_));
    LG_ASSIGN_OR_RETURN(budgets_, Budgets::open(*db_, *ledger_, {}, unixSeconds(), *control_));
    keys_->onRevoke([this](const ApiKeyInfo& k) {
      std::lock_guard lock(mu_);
      revoked_.insert(k.id);
    });
    keys_->onTeamDeletedElsewhere([this](const TeamInfo& t) {
      std::lock_guard lock(mu_);
      teams_deleted_elsewhere_.insert(t.id);
    });
    LG_RETURN_IF_ERROR(control_->start());
    return prices_->recordConfigured(PriceTable{}, unixMicros());
  }
  void close() {
    if (control_) control_->stop();  // nothing applied to the stores from here on
    budgets_.reset();
    ledger_.reset();
    prices_.reset();
    keys_.reset();
    control_.reset();
    db_.reset();
  }

  KeyStore& keys() { return *keys_; }
  Budgets& budgets() { return *budgets_; }
  PriceBook& prices() { return *prices_; }
  PgControlPlane& control() { return *control_; }
  BillingDb& db() { return *db_; }
  const std::string& dir() const { return dir_.path(); }
  bool sawRevoked(const std::string& id) {
    std::lock_guard lock(mu_);
    return revoked_.contains(id);
  }
  bool sawTeamDeletedElsewhere(const std::string& team) {
    std::lock_guard lock(mu_);
    return teams_deleted_elsewhere_.contains(team);
  }

 private:
  std::string url_;
  test::TempDir dir_{"lg_control"};
  std::unique_ptr<BillingDb> db_;
  std::unique_ptr<PgControlPlane> control_;
  std::unique_ptr<KeyStore> keys_;
  std::unique_ptr<PriceBook> prices_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Budgets> budgets_;
  std::mutex mu_;
  std::set<std::string> revoked_;                  // guarded by mu_
  std::set<std::string> teams_deleted_elsewhere_;  // guarded by mu_
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    auto url = test::freshPostgresDatabase("c", &error);
    ASSERT_TRUE(url.has_value()) << error;
    url_ = *url;
  }

  std::unique_ptr<Replica> replica() {
    auto r = std::make_unique<Replica>(url_);
    const Status s = r->open();
    EXPECT_TRUE(s.isOk()) << s.toString();
    return s.isOk() ? std::move(r) : nullptr;
  }

  std::string url_;
};

TEST_F(ControlPlaneTest, AKeyMadeOnOneReplicaAuthenticatesOnTheOtherWithinTheBound) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->control().replicaId(), b->control().replicaId());
  const uint64_t writes = a->control().stats().writes;  // the configured price table, recorded by the first
  auto made = a->keys().create("acme", "ci bot");
  ASSERT_TRUE(made.isOk()) << made.status().toString();
  // On the replica that made it: at once.
  ASSERT_TRUE(a->keys().authenticate(made->second).has_value());
  const auto took = waitFor([&] { return b->keys().authenticate(made->second).has_value(); });
  ASSERT_TRUE(took.has_value()) << "the key never reached the other replica";
  EXPECT_LE(*took, kBound);
  const auto who = b->keys().authenticate(made->second);
  EXPECT_EQ(who->key_id, made->first.id);
  EXPECT_EQ(who->team, "acme");
  const auto team = b->keys().team("acme");
  ASSERT_TRUE(team.has_value());
  EXPECT_EQ(team->key_ids, std::vector<std::string>{made->first.id});
  EXPECT_EQ(b->keys().list().size(), 1u);
  EXPECT_EQ(b->control().state(), ControlSyncState::kSynced);
  EXPECT_GE(b->control().stats().applied_remote, 2u);  // the key and its team
  EXPECT_EQ(a->control().stats().writes, writes + 1);
  metrics::ExpositionWriter w;
  b->control().collect(w);
  EXPECT_NE(w.text().find("latentgate_control_sync_age_seconds "), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("latentgate_control_sync_state{state=\"synced\"} 1"), std::string::npos) << w.text();
}

TEST_F(ControlPlaneTest, ARevocationOnOneReplicaIsRefusedByTheOtherWithinTheBoundAndItsObserverFires) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  auto made = a->keys().create("acme", "ci bot");
  ASSERT_TRUE(made.isOk());
  ASSERT_TRUE(waitFor([&] { return b->keys().authenticate(made->second).has_value(); }));
  ASSERT_TRUE(b->keys().revoke(made->first.id).isOk());
  // The revoking replica: refused once revoke() returned.
  EXPECT_FALSE(b->keys().authenticate(made->second).has_value());
  EXPECT_TRUE(b->sawRevoked(made->first.id));
  // The other: within the bound, its observer told (it cancels the key's requests).
  const auto took = waitFor([&] { return a->sawRevoked(made->first.id); });
  ASSERT_TRUE(took.has_value()) << "the revocation never reached the other replica";
  EXPECT_LE(*took, kBound);
  EXPECT_FALSE(a->keys().authenticate(made->second).has_value());
  EXPECT_TRUE(a->keys().list().empty());
  // Revoked twice, from either side: NotFound, read from PostgreSQL.
  EXPECT_EQ(a->keys().revoke(made->first.id).code(), StatusCode::kNotFound);
  EXPECT_EQ(b->keys().revoke(made->first.id).code(), StatusCode::kNotFound);
  // Ids from a request that no record can have: NotFound, never sent as SQL.
  const std::vector<std::string> bad_ids{"", "key_1 OR 1=1", "key_\xff\x01", std::string(600, 'k'), "../team/acme"};
  for (const std::string& bad : bad_ids) {
    EXPECT_EQ(a->keys().revoke(bad).code(), StatusCode::kNotFound) << bad;
    EXPECT_EQ(a->keys().deleteTeam(bad, unixMicros()).status().code(), StatusCode::kNotFound) << bad;
  }
  EXPECT_TRUE(a->keys().team("acme").has_value() && !a->keys().team("acme")->deleted());
}

TEST_F(ControlPlaneTest, DeletingATeamRevokesTheKeysMadeForItOnAnotherReplica) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  auto on_a = a->keys().create("acme", "made on a");
  auto on_b = b->keys().create("acme", "made on b");
  auto bystander = b->keys().create("other", "bystander");
  ASSERT_TRUE(on_a.isOk() && on_b.isOk() && bystander.isOk());
  // At once, before A's follower has necessarily seen B's key: the deletion
  // reads the team's keys from PostgreSQL, not from A's view.
  auto deleted = a->keys().deleteTeam("acme", unixMicros());
  ASSERT_TRUE(deleted.isOk()) << deleted.status().toString();
  std::set<std::string> revoked;
  for (const ApiKeyInfo& k : deleted->revoked) revoked.insert(k.id);
  EXPECT_EQ(revoked, (std::set<std::string>{on_a->first.id, on_b->first.id}));
  EXPECT_TRUE(deleted->team.deleted());
  EXPECT_FALSE(a->keys().authenticate(on_a->second).has_value());
  EXPECT_FALSE(a->keys().authenticate(on_b->second).has_value());
  // B: its own key refused within the bound, its observers told.
  const auto took = waitFor([&] { return b->sawRevoked(on_b->first.id) && b->sawTeamDeletedElsewhere("acme"); });
  ASSERT_TRUE(took.has_value());
  EXPECT_LE(*took, kBound);
  EXPECT_FALSE(b->keys().authenticate(on_b->second).has_value());
  EXPECT_TRUE(b->keys().team("acme")->deleted());
  EXPECT_TRUE(b->keys().authenticate(bystander->second).has_value());
  EXPECT_FALSE(a->sawTeamDeletedElsewhere("acme")) << "A deleted it: its own admin call purges";
  // The id is refused on both until reuse is asked for, which starts generation 1 everywhere.
  EXPECT_EQ(b->keys().create("acme", "again").status().code(), StatusCode::kAlreadyExists);
  auto reused = b->keys().create("acme", "again", /*reuse_deleted_team=*/true);
  ASSERT_TRUE(reused.isOk()) << reused.status().toString();
  EXPECT_EQ(reused->first.team_generation, 1u);
  ASSERT_TRUE(waitFor([&] { return a->keys().authenticate(reused->second).has_value(); }));
  EXPECT_EQ(a->keys().authenticate(reused->second)->team_generation, 1u);
  EXPECT_EQ(a->keys().team("acme")->generation, 1u);
}

TEST_F(ControlPlaneTest, KeysMadeAtOnceOnTwoReplicasAreAllListedInTheirTeam) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  constexpr int kThreads = 2, kEach = 12;
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> made;  // id, key
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (Replica* r : {a.get(), b.get()}) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, r] {
        for (int i = 0; i < kEach; ++i) {
          auto k = r->keys().create("race", "k");
          if (!k.isOk()) {
            ++failures;
            continue;
          }
          std::lock_guard lock(mu);
          made.emplace_back(k->first.id, k->second);
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(made.size(), size_t{2 * kThreads * kEach});
  std::set<std::string> ids;
  for (const auto& [id, key] : made) ids.insert(id);
  for (Replica* r : {a.get(), b.get()}) {
    ASSERT_TRUE(r->control().syncNow().isOk());
    const auto team = r->keys().team("race");
    ASSERT_TRUE(team.has_value());
    EXPECT_EQ(std::set<std::string>(team->key_ids.begin(), team->key_ids.end()), ids) << "a key id was lost";
    EXPECT_EQ(team->key_ids.size(), ids.size());
    for (const auto& [id, key] : made) EXPECT_TRUE(r->keys().authenticate(key).has_value()) << id;
  }
  // And a deletion on either revokes every one of them.
  auto deleted = b->keys().deleteTeam("race", unixMicros());
  ASSERT_TRUE(deleted.isOk());
  EXPECT_EQ(deleted->revoked.size(), ids.size());
}

TEST_F(ControlPlaneTest, ABudgetSetOnOneReplicaBindsOnTheOther) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  auto made = a->keys().create("acme", "k");
  ASSERT_TRUE(made.isOk());
  const Principal who{made->first.id, "acme", "k"};
  const int64_t now = unixSeconds();
  BudgetSetting small;
  small.enabled = true;
  small.limit = 100;
  small.soft_limit = 80;
  small.period = BudgetPeriodSetting::kDay;
  ASSERT_TRUE(a->budgets().set(BudgetScope::kKey, who.key_id, small).isOk());
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(a->budgets().reserve(who, 1000, now)));
  const auto took = waitFor([&] { return !b->budgets().effective(BudgetScope::kKey, who.key_id).is_default; });
  ASSERT_TRUE(took.has_value());
  EXPECT_LE(*took, kBound);
  EXPECT_TRUE(std::holds_alternative<BudgetRefusal>(b->budgets().reserve(who, 1000, now)));
  EXPECT_TRUE(std::holds_alternative<BudgetReservation>(b->budgets().reserve(who, 50, now)));
  // A team budget set on B, cleared on A.
  ASSERT_TRUE(b->budgets().set(BudgetScope::kTeam, "acme", small).isOk());
  auto cleared = a->budgets().clear(BudgetScope::kTeam, "acme");
  ASSERT_TRUE(cleared.isOk());
  EXPECT_TRUE(*cleared) << "the clear reads PostgreSQL, where B's budget is";
  ASSERT_TRUE(b->control().syncNow().isOk());
  EXPECT_TRUE(b->budgets().effective(BudgetScope::kTeam, "acme").is_default);
  EXPECT_FALSE(*a->budgets().clear(BudgetScope::kTeam, "acme"));
}

TEST_F(ControlPlaneTest, APriceTableScheduledOnOneReplicaPricesTheOthersRequests) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  // Both started with the same configured table: recorded once.
  ASSERT_TRUE(b->control().syncNow().isOk());
  EXPECT_EQ(a->prices().history().size(), 1u);
  EXPECT_EQ(b->prices().history().size(), 1u);
  auto table = parsePriceTableJson(R"({"demo": {"input_cache_hit": "0.001", "input_cache_miss": "0.01", "output": "0.1"}})",
                                   "prices");
  ASSERT_TRUE(table.isOk());
  const int64_t now = unixMicros();
  auto v = a->prices().schedule(*table, now, now, "admin");
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(v->version, 2);
  const auto took = waitFor([&] { return b->prices().at("demo", now).version == 2; });
  ASSERT_TRUE(took.has_value());
  EXPECT_LE(*took, kBound);
  EXPECT_EQ(b->prices().at("demo", now).rates, (Rates{1'000, 10'000, 100'000}));
  // Scheduled at once on both: every version gets its own number, in commit order.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (Replica* r : {a.get(), b.get()}) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < 5; ++i) {
        if (!r->prices().schedule(*table, now + 1'000'000, now, "admin").isOk()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(a->control().syncNow().isOk());
  ASSERT_TRUE(b->control().syncNow().isOk());
  const auto ha = a->prices().history(), hb = b->prices().history();
  ASSERT_EQ(ha.size(), 12u);
  ASSERT_EQ(hb.size(), 12u);
  for (size_t i = 0; i < ha.size(); ++i) {
    EXPECT_EQ(ha[i].version, static_cast<int64_t>(i + 1));
    EXPECT_EQ(hb[i].version, ha[i].version);
    EXPECT_EQ(hb[i].recorded_us, ha[i].recorded_us);
  }
}

TEST_F(ControlPlaneTest, AnExistingInstallSeedsPostgresAndOtherReplicasTakeItsRecords) {
  test::TempDir install_dir{"lg_control_install"};
  std::string key, key_id;
  {
    // A single-node install (no PostgreSQL): a key, a budget, a price version.
    auto db = BillingDb::open(install_dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto keys = KeyStore::open(**db);
    ASSERT_TRUE(keys.isOk());
    auto made = (*keys)->create("acme", "old key");
    ASSERT_TRUE(made.isOk());
    key = made->second;
    key_id = made->first.id;
    auto ledger = Ledger::open(**db);
    ASSERT_TRUE(ledger.isOk());
    auto budgets = Budgets::open(**db, **ledger, {}, unixSeconds());
    ASSERT_TRUE(budgets.isOk());
    BudgetSetting b;
    b.enabled = true;
    b.limit = 7;
    b.soft_limit = 7;
    ASSERT_TRUE((*budgets)->set(BudgetScope::kKey, key_id, b).isOk());
    auto prices = PriceBook::open(**db, PriceTable{}, unixMicros());
    ASSERT_TRUE(prices.isOk());
  }
  // The install, now with PostgreSQL: it seeds the empty table.
  auto seeded = std::make_unique<Replica>(url_);
  // Its billing store, moved into the replica's directory.
  std::filesystem::copy(install_dir.file("billing"), seeded->dir() + "/billing", std::filesystem::copy_options::recursive);
  ASSERT_TRUE(seeded->open().isOk());
  EXPECT_TRUE(seeded->keys().authenticate(key).has_value());
  // A new replica takes everything from PostgreSQL before it serves.
  auto fresh = replica();
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(fresh->keys().authenticate(key).has_value());
  EXPECT_EQ(fresh->budgets().effective(BudgetScope::kKey, key_id).budget.limit, 7);
  EXPECT_EQ(fresh->prices().history().size(), 1u);
  EXPECT_TRUE(fresh->keys().team("acme").has_value());
  // Revoked on the fresh one, refused on the old one.
  ASSERT_TRUE(fresh->keys().revoke(key_id).isOk());
  ASSERT_TRUE(waitFor([&] { return !seeded->keys().authenticate(key).has_value(); }));
  // Another installation with keys of its own is not merged in.
  test::TempDir other_dir{"lg_control_other"};
  {
    auto db = BillingDb::open(other_dir.file("billing"));
    ASSERT_TRUE(db.isOk());
    auto keys = KeyStore::open(**db);
    ASSERT_TRUE(keys.isOk());
    ASSERT_TRUE((*keys)->create("elsewhere", "k").isOk());
  }
  auto other = std::make_unique<Replica>(url_);
  std::filesystem::copy(other_dir.file("billing"), other->dir() + "/billing", std::filesystem::copy_options::recursive);
  const Status refused = other->open();
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists) << refused.toString();
}

TEST_F(ControlPlaneTest, WithPostgresAwayWritesAreUnavailableAndTheLastViewServesUntilItIsBack) {
  auto a = replica(), b = replica();
  ASSERT_TRUE(a && b);
  auto made = a->keys().create("acme", "k");
  auto doomed = a->keys().create("acme", "doomed");
  ASSERT_TRUE(made.isOk() && doomed.isOk());
  ASSERT_TRUE(b->control().syncNow().isOk());
  test::sharedPostgres()->stop();
  // Writes: refused, nothing changed.
  auto refused = a->keys().create("acme", "not made");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().toString();
  EXPECT_EQ(b->keys().revoke(doomed->first.id).code(), StatusCode::kUnavailable);
  BudgetSetting budget;
  budget.enabled = true;
  budget.limit = 1;
  EXPECT_EQ(a->budgets().set(BudgetScope::kTeam, "acme", budget).code(), StatusCode::kUnavailable);
  EXPECT_EQ(a->prices().schedule(PriceTable{}, unixMicros() + 1, unixMicros(), "admin").status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(a->control().stats().write_failures + b->control().stats().write_failures, 4u);
  // Reads: the last view, on both.
  for (Replica* r : {a.get(), b.get()}) {
    EXPECT_TRUE(r->keys().authenticate(made->second).has_value());
    EXPECT_TRUE(r->keys().authenticate(doomed->second).has_value());
    EXPECT_EQ(r->keys().list().size(), 2u);
    EXPECT_TRUE(r->budgets().effective(BudgetScope::kTeam, "acme").is_default);
  }
  EXPECT_FALSE(b->control().syncNow().isOk());
  EXPECT_EQ(b->control().state(), ControlSyncState::kStale);
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(b->control().syncAgeSeconds(), 0.25);
  // Back: the follower resumes, and a revocation made then is refused everywhere.
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  ASSERT_TRUE(waitFor([&] { return b->control().state() == ControlSyncState::kSynced; }));
  ASSERT_TRUE(b->keys().revoke(doomed->first.id).isOk());
  const auto took = waitFor([&] { return !a->keys().authenticate(doomed->second).has_value(); });
  ASSERT_TRUE(took.has_value());
  EXPECT_LE(*took, kBound);
  EXPECT_TRUE(a->sawRevoked(doomed->first.id));
  EXPECT_LT(a->control().syncAgeSeconds(), 5.0);
  EXPECT_EQ(a->keys().team("acme")->key_ids.size(), 2u) << "the refused creation left nothing";
}

TEST_F(ControlPlaneTest, AReplicaThatSyncedBeforeStartsOnItsLastViewWhilePostgresIsAway) {
  auto a = replica();
  ASSERT_TRUE(a);
  auto made = a->keys().create("acme", "k");
  ASSERT_TRUE(made.isOk());
  a->close();
  test::sharedPostgres()->stop();
  ASSERT_TRUE(a->open().isOk()) << "a replica that synced before serves its last view";
  EXPECT_TRUE(a->keys().authenticate(made->second).has_value());
  EXPECT_EQ(a->control().state(), ControlSyncState::kStale);
  // One that never synced has no view to serve.
  Replica fresh(url_);
  EXPECT_EQ(fresh.open().code(), StatusCode::kUnavailable);
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  ASSERT_TRUE(waitFor([&] { return a->control().state() == ControlSyncState::kSynced; }));
  // Back in step: a revocation made elsewhere reaches it.
  auto other = replica();
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->keys().revoke(made->first.id).isOk());
  ASSERT_TRUE(waitFor([&] { return !a->keys().authenticate(made->second).has_value(); }));
}

// The stored responses' index: one replica's markers pushed, another's
// lookups answered; a deletion is final whatever order markers come in;
// PostgreSQL away refuses lookups at once after the first failure and keeps
// the markers until it is back.
TEST_F(ControlPlaneTest, TheStoredResponsesIndexSaysWhichReplicaHoldsAResponse) {
  PostgresOptions pg;
  pg.url = url_;
  pg.connect_timeout_s = 1;
  ASSERT_TRUE(migrate(pg).isOk());
  test::TempDir dir_a{"lg_index_a"}, dir_b{"lg_index_b"};
  auto db_a = BillingDb::open(dir_a.file("billing"));
  auto db_b = BillingDb::open(dir_b.file("billing"));
  ASSERT_TRUE(db_a.isOk() && db_b.isOk());
  auto options = [&](std::string replica) {
    ResponseIndexOptions o;
    o.postgres = pg;
    o.replica = std::move(replica);
    o.interval = kInterval;
    o.lookup_backoff = 500ms;
    return o;
  };
  auto a = PgResponseIndex::start(**db_a, options("r-a"));
  auto b = PgResponseIndex::start(**db_b, options("r-b"));
  ASSERT_TRUE(a.isOk() && b.isOk());
  const int64_t later = unixSeconds() + 3600;
  auto mark = [&](BillingDb& db, PgResponseIndex& index, const std::string& owner, const std::string& id,
                  int64_t expires, bool deleted) {
    ASSERT_TRUE(db.write({{responseIndexMarkerKey(owner, id), responseIndexMarkerValue(expires, deleted)}}).isOk());
    index.marked();
  };
  auto holderOf = [](PgResponseIndex& index, const std::string& owner, const std::string& id) {
    auto h = index.holder(owner, id);
    EXPECT_TRUE(h.isOk()) << h.status().toString();
    return h.isOk() ? h->value_or("") : std::string("error");
  };
  auto markers = [](BillingDb& db) {
    size_t n = 0;
    EXPECT_TRUE(db.scan(kResponseIndexMarkers, [&](std::string_view, std::string_view) { return ++n, true; }).isOk());
    return n;
  };
  mark(**db_a, **a, "key_1", "resp_1", later, false);
  mark(**db_a, **a, "key_1", "resp_old", unixSeconds() - 1, false);
  const auto took = waitFor([&] { return holderOf(**b, "key_1", "resp_1") == "r-a"; });
  ASSERT_TRUE(took.has_value());
  EXPECT_LE(*took, kBound);
  EXPECT_TRUE(waitFor([&] { return markers(**db_a) == 0; })) << "pushed markers are forgotten";
  EXPECT_EQ(holderOf(**b, "key_2", "resp_1"), "") << "another key's response is nobody's";
  EXPECT_EQ(holderOf(**b, "key_1", "resp_old"), "") << "an expired response is nobody's";
  EXPECT_EQ(holderOf(**b, "key_1", "resp_1\xff"), "") << "an id no response has is never sent";
  // Deleted, then a stale "live" marker: still deleted (a deletion is final).
  mark(**db_a, **a, "key_1", "resp_1", later, true);
  ASSERT_TRUE((*a)->pushNow().isOk());
  EXPECT_EQ(holderOf(**b, "key_1", "resp_1"), "");
  mark(**db_a, **a, "key_1", "resp_1", later, false);
  ASSERT_TRUE((*a)->pushNow().isOk());
  EXPECT_EQ(holderOf(**b, "key_1", "resp_1"), "");
  // PostgreSQL away: refused, and at once for a while after; markers kept.
  test::sharedPostgres()->stop();
  EXPECT_EQ((*b)->holder("key_1", "resp_2").status().code(), StatusCode::kUnavailable);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ((*b)->holder("key_1", "resp_2").status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms) << "a lookup right after a failure does not wait";
  mark(**db_a, **a, "key_1", "resp_2", later, false);
  EXPECT_FALSE((*a)->pushNow().isOk());
  EXPECT_EQ(markers(**db_a), 1u);
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  ASSERT_TRUE(waitFor([&] {
    auto h = (*b)->holder("key_1", "resp_2");
    return h.isOk() && h->value_or("") == "r-a";
  }));
  metrics::ExpositionWriter w;
  (*a)->collect(w);
  EXPECT_NE(w.text().find("latentgate_stored_response_index_push_failures_total "), std::string::npos) << w.text();
}

// The billing logger's lines while it lives.
class BillingLogCapture {
 public:
  BillingLogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    componentLogger("billing")->sinks().push_back(sink_);
  }
  ~BillingLogCapture() {
    auto& sinks = componentLogger("billing")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> lines() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// The system prompt fingerprint's key (pg_fingerprint_key.h): two replicas
// whose stores hold different keys, on one PostgreSQL, fingerprint one
// team's prompt alike, with the key of the first (an installation that grew
// from one replica keeps its fingerprints); the second's store holds that key
// afterwards, so it keys the same way without PostgreSQL. PostgreSQL away at
// start: no error; a replica that took the key before keeps it, one that
// never did keys with its own (logged) and takes the shared key at its next
// start. The key is in no log line and no error.
TEST_F(ControlPlaneTest, ReplicasFingerprintSystemPromptsWithTheFirstReplicasKey) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  const V prompt{{"system", "You are a careful coding agent."}};
  PostgresOptions pg;
  pg.url = url_;
  pg.connect_timeout_s = 1;
  pg.statement_timeout_ms = 5000;
  test::TempDir dir_a{"lg_fp_a"}, dir_b{"lg_fp_b"}, dir_c{"lg_fp_c"};
  auto storeKey = [](BillingDb& db) { return db.get(kSystemPromptKeyRecord).value().value_or(""); };
  // Each store made its own key first (two single-node installs' worth).
  std::string own_a, own_b, key_a;
  for (auto [dir, own] : {std::pair{&dir_a, &own_a}, std::pair{&dir_b, &own_b}}) {
    auto db = BillingDb::open(dir->file("billing"));
    ASSERT_TRUE(db.isOk());
    auto f = SystemPromptFingerprinter::open(**db);
    ASSERT_TRUE(f.isOk()) << f.status().toString();
    *own = f->fingerprint("team-a", prompt);
    if (dir == &dir_a) key_a = storeKey(**db);
  }
  ASSERT_NE(own_a, own_b);
  ASSERT_EQ(key_a.size(), kSystemPromptKeyBytes);

  BillingLogCapture log;
  auto db_a = BillingDb::open(dir_a.file("billing"));
  auto db_b = BillingDb::open(dir_b.file("billing"));
  ASSERT_TRUE(db_a.isOk() && db_b.isOk());
  auto a = openSharedFingerprinter(**db_a, pg, "r-a");
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  auto b = openSharedFingerprinter(**db_b, pg, "r-b");
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_EQ(a->fingerprint("team-a", prompt), own_a) << "the first replica keeps its key and its fingerprints";
  EXPECT_EQ(b->fingerprint("team-a", prompt), own_a) << "the second takes the first's";
  EXPECT_NE(b->fingerprint("team-b", prompt), own_a) << "still keyed per team";
  EXPECT_EQ(storeKey(**db_b), key_a) << "the second's store holds the shared key in place of its own";
  {
    pqxx::connection c(url_);
    pqxx::read_transaction tx(c);
    const pqxx::result r = tx.exec("SELECT name, replica FROM cluster_secrets");
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0][0].as<std::string>(), std::string(kSystemPromptSecretName));
    EXPECT_EQ(r[0][1].as<std::string>(), "r-a");
  }
  // Reopened without PostgreSQL (its store alone): the same fingerprint.
  db_b->reset();
  db_b = BillingDb::open(dir_b.file("billing"));
  ASSERT_TRUE(db_b.isOk());
  auto b_alone = SystemPromptFingerprinter::open(**db_b);
  ASSERT_TRUE(b_alone.isOk());
  EXPECT_EQ(b_alone->fingerprint("team-a", prompt), own_a);

  // PostgreSQL away at start: B keys as every replica does; C, which never
  // reached it, starts on its own key, and takes the shared one once it can.
  auto db_c = BillingDb::open(dir_c.file("billing"));
  ASSERT_TRUE(db_c.isOk());
  test::sharedPostgres()->stop();
  auto b_away = openSharedFingerprinter(**db_b, pg, "r-b");
  ASSERT_TRUE(b_away.isOk()) << b_away.status().toString();
  EXPECT_EQ(b_away->fingerprint("team-a", prompt), own_a);
  auto c_away = openSharedFingerprinter(**db_c, pg, "r-c");
  ASSERT_TRUE(c_away.isOk()) << "PostgreSQL away never stops a start: " << c_away.status().toString();
  EXPECT_NE(c_away->fingerprint("team-a", prompt), own_a);
  const std::string key_c = storeKey(**db_c);
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  auto c = openSharedFingerprinter(**db_c, pg, "r-c");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->fingerprint("team-a", prompt), own_a);
  EXPECT_EQ(storeKey(**db_c), key_a);

  // A damaged key in PostgreSQL refuses (DataLoss), without the bytes.
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    tx.exec("UPDATE cluster_secrets SET value = '\\x0102'::bytea");
    tx.commit();
  }
  auto damaged = openSharedFingerprinter(**db_a, pg, "r-a");
  ASSERT_FALSE(damaged.isOk());
  EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss) << damaged.status().toString();

  bool warned_own = false;
  for (const std::string& line : log.lines()) {
    warned_own = warned_own || (line.find("never took") != std::string::npos && line.find("own key") != std::string::npos);
    for (const std::string& key : {key_a, key_c}) {
      EXPECT_EQ(line.find(hexLower(key)), std::string::npos) << line;
      EXPECT_EQ(line.find(key), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(warned_own) << "a replica on its own key says so";
  for (const std::string& key : {key_a, key_c}) {
    EXPECT_EQ(damaged.status().toString().find(hexLower(key)), std::string::npos);
  }
}

// Replicas that start together with no key in PostgreSQL: one offer is kept,
// and every replica keys with it.
TEST_F(ControlPlaneTest, ReplicasStartingTogetherAgreeOnOneSystemPromptKey) {
  using V = std::vector<std::pair<std::string_view, std::string_view>>;
  const V prompt{{"developer", "Answer in French."}};
  PostgresOptions pg;
  pg.url = url_;
  pg.connect_timeout_s = 1;
  pg.statement_timeout_ms = 5000;
  constexpr int kReplicas = 4;
  std::vector<std::unique_ptr<test::TempDir>> dirs;
  std::vector<std::unique_ptr<BillingDb>> dbs;
  std::set<std::string> own;
  for (int i = 0; i < kReplicas; ++i) {
    dirs.push_back(std::make_unique<test::TempDir>("lg_fp_together"));
    auto db = BillingDb::open(dirs.back()->file("billing"));
    ASSERT_TRUE(db.isOk());
    auto f = SystemPromptFingerprinter::open(**db);
    ASSERT_TRUE(f.isOk());
    own.insert(f->fingerprint("team-a", prompt));
    dbs.push_back(std::move(*db));
  }
  ASSERT_EQ(own.size(), static_cast<size_t>(kReplicas));
  std::vector<std::string> got(kReplicas);
  std::vector<std::thread> threads;
  for (int i = 0; i < kReplicas; ++i) {
    threads.emplace_back([&, i] {
      auto f = openSharedFingerprinter(*dbs[i], pg, "r-" + std::to_string(i));
      got[i] = f.isOk() ? f->fingerprint("team-a", prompt) : f.status().toString();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(got[i], got[0]) << i;
  EXPECT_TRUE(own.contains(got[0])) << "one replica's own key, kept: " << got[0];
}

}  // namespace
}  // namespace lg::billing::pg

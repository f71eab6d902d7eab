// The dashboard's parts without a server (proxy/dashboard/): the session
// table's bounds and expiry, the overview built directly over a real ledger
// and key store in a temp dir (without budgets, limits or an engine; and
// with fixed scheduler and cache snapshots, whose memory picture it must
// show as they are, the disk tier's error text never), the tenant isolation
// check and the cookie lookup. tests/integration/dashboard_test.cc drives the
// whole server.
#include "proxy/dashboard/dashboard.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/billing_db.h"
#include "billing/metering.h"
#include "common/unix_time.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;
constexpr int64_t kUs = 1'000'000;

// Fixed snapshots: what the memory picture must show.
class FixedScheduler : public serving::SchedulerMetricsSource {
 public:
  serving::SchedulerStats schedulerStats() const override {
    serving::SchedulerStats s;
    s.pool_blocks = 100;
    s.running_blocks = 10;
    s.cached_blocks = 30;
    s.pool_free_blocks = 60;
    s.reserved_blocks = 5;
    s.queued = 2;
    s.decoding = 1;
    return s;
  }
};
class FixedCache : public cache::CacheMetricsSource {
 public:
  cache::CacheStats snapshot() const override {
    cache::CacheStats s;
    s.disk_state = cache::DiskState::kOk;
    s.disk.blocks = 7;
    s.disk.bytes = 7 * 1000;
    s.disk_occupied_bytes = 9000;
    s.disk_error = "/secret/path/kv: should never be shown";
    return s;
  }
};

// A budget for team-a's keys only.
class TeamABudget : public billing::BudgetView {
 public:
  std::optional<billing::BudgetStatus> budgetOf(const billing::Principal& who, int64_t) const override {
    if (who.team != "team-a") return std::nullopt;
    billing::BudgetStatus s;
    s.scope = "team";
    s.period = "month";
    s.period_end_s = 1'800'000'000;
    s.limit = 5'000'000'000'000;  // $5
    s.spent = 1'000'000'000'000;
    s.reserved = 250'000'000;
    return s;
  }
};

// A dashboard over a real ledger and key store, no budgets and no limits.
class DashboardOverviewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = billing::BillingDb::open(dir_.path() + "/billing");
    ASSERT_TRUE(db.isOk());
    db_ = std::move(db).value();
    auto keys = billing::KeyStore::open(*db_);
    ASSERT_TRUE(keys.isOk());
    keys_ = std::move(keys).value();
    auto admin = billing::AdminKey::loadOrCreate("an-admin-key-for-the-dashboard", "", nullptr);
    ASSERT_TRUE(admin.isOk());
    admin_.emplace(std::move(admin).value());
    auto ledger = billing::Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk());
    ledger_ = std::move(ledger).value();
    metering_ = std::make_unique<billing::Metering>();
    limiter_ = std::make_unique<billing::RateLimiter>(billing::RateLimitOptions{});
    admission_ = std::make_unique<Admission>(*keys_, *admin_, std::nullopt, *limiter_, *metering_);
    for (const char* team : {"team-a", "team-a", "team-b", "team-a"}) ASSERT_TRUE(keys_->create(team, "k").isOk());
  }

  json overview(const Dashboard& d) {
    const int64_t now_s = unixMicros() / kUs;
    auto body = d.overviewJson(DashboardViewer{}, "24h", now_s - 86400, now_s + 3600, 3600);
    EXPECT_TRUE(body.isOk()) << body.status().toString();
    return body.isOk() ? json::parse(*body) : json();
  }

  test::TempDir dir_{"lg_dashboard_unit"};
  std::unique_ptr<billing::BillingDb> db_;
  std::unique_ptr<billing::KeyStore> keys_;
  std::optional<billing::AdminKey> admin_;
  std::unique_ptr<billing::Ledger> ledger_;
  std::unique_ptr<billing::Metering> metering_;
  std::unique_ptr<billing::RateLimiter> limiter_;
  std::unique_ptr<Admission> admission_;
};

TEST_F(DashboardOverviewTest, WithoutBudgetsLimitsOrAnEngineTheirSectionsSayNone) {
  Dashboard bare(*ledger_, *keys_, *admission_, nullptr, nullptr, DashboardMemorySources{});
  const json o = overview(bare);
  EXPECT_EQ(o["budget"], nullptr);
  EXPECT_EQ(o["budgets_enabled"], false);
  EXPECT_EQ(o["limits"], nullptr);
  EXPECT_FALSE(o.contains("memory"));
  ASSERT_EQ(o["keys"].size(), 4u);
  for (const json& k : o["keys"]) {
    EXPECT_EQ(k["budget"], nullptr);
    EXPECT_EQ(k["rate_limits"], nullptr);
  }
  EXPECT_EQ(o["totals"]["requests"], 0);
}

TEST_F(DashboardOverviewTest, TheMemoryPictureIsTheSnapshotsAsTheyAreAndNeverTheDiskTiersError) {
  FixedScheduler scheduler;
  FixedCache cache;
  Dashboard d(*ledger_, *keys_, *admission_, nullptr, nullptr,
              DashboardMemorySources{&scheduler, &cache, serving::MemoryFacts{123'456, 1000}});
  const json o = overview(d);
  EXPECT_EQ(o["memory"], json::parse(R"({
    "weights_bytes": 123456,
    "latent_pool": {"block_bytes": 1000, "capacity_blocks": 100, "capacity_bytes": 100000,
                    "running_blocks": 10, "running_bytes": 10000, "cached_blocks": 30, "cached_bytes": 30000,
                    "free_blocks": 60, "free_bytes": 60000, "reserved_blocks": 5},
    "disk_tier": {"blocks": 7, "bytes": 7000, "occupied_bytes": 9000, "state": "ok"},
    "scheduler": {"queued": 2, "looking_up": 0, "prefilling": 0, "decoding": 1}})"));
  EXPECT_EQ(o.dump().find("/secret/path"), std::string::npos);
}

TEST(DashboardSessionsTest, SessionsAreBoundedAndExpiredOnesGoFirst) {
  DashboardSessions sessions(3, 100);
  auto a = sessions.create(DashboardViewer{}, 0);
  auto b = sessions.create(DashboardViewer{}, 10);
  auto c = sessions.create(DashboardViewer{}, 20);
  ASSERT_TRUE(a.isOk() && b.isOk() && c.isOk());
  EXPECT_TRUE(DashboardSessions::wellFormed(*a));
  EXPECT_NE(*a, *b);
  auto d = sessions.create(DashboardViewer{}, 30);  // full: the oldest (a) goes
  EXPECT_EQ(sessions.size(), 3u);
  EXPECT_FALSE(sessions.find(*a, 30).has_value());
  EXPECT_TRUE(sessions.find(*b, 30).has_value());
  auto e = sessions.create(DashboardViewer{}, 115);  // b expired at 110: it goes, c stays
  EXPECT_FALSE(sessions.find(*b, 115).has_value());
  EXPECT_TRUE(sessions.find(*c, 115).has_value());
  EXPECT_TRUE(sessions.find(*d, 115).has_value());
  EXPECT_TRUE(sessions.find(*e, 115).has_value());
  EXPECT_FALSE(sessions.find(*e, 215).has_value());  // expired on lookup
  EXPECT_EQ(sessions.size(), 2u);
}

// Issue 21, item 9: one key churns only its own sessions, and a team's
// sign-in never evicts an admin's session.
TEST(DashboardSessionsTest, AKeyHoldsABoundedShareAndNeverEvictsTheAdmin) {
  DashboardSessions sessions(4, 1000, 2);
  const DashboardViewer admin{};
  const DashboardViewer alice{DashboardViewer::Role::kTeam, "key_a", "team-a", "alice"};
  const DashboardViewer bob{DashboardViewer::Role::kTeam, "key_b", "team-a", "bob"};
  auto root = sessions.create(admin, 0);
  ASSERT_TRUE(root.isOk());
  std::vector<std::string> mine;
  for (int i = 1; i <= 50; ++i) mine.push_back(*sessions.create(alice, i));
  EXPECT_EQ(sessions.size(), 3u) << "the admin's and alice's last two";
  EXPECT_TRUE(sessions.find(*root, 60).has_value());
  EXPECT_TRUE(sessions.find(mine[49], 60).has_value());
  EXPECT_FALSE(sessions.find(mine[47], 60).has_value());
  // Full of admins and one team: a team's sign-in evicts a team's session only.
  auto root2 = sessions.create(admin, 61);
  auto b = sessions.create(bob, 62);
  ASSERT_TRUE(root2.isOk() && b.isOk());
  EXPECT_TRUE(sessions.find(*root, 63).has_value());
  EXPECT_TRUE(sessions.find(*root2, 63).has_value());
  EXPECT_EQ(sessions.size(), 4u);
  // Only admins: a team is refused rather than evict one.
  DashboardSessions admins(2, 1000, 8);
  auto x = admins.create(admin, 0), y = admins.create(admin, 1);
  ASSERT_TRUE(x.isOk() && y.isOk());
  EXPECT_EQ(admins.create(alice, 2).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(admins.find(*x, 3).has_value());
  EXPECT_TRUE(admins.create(admin, 4).isOk()) << "an admin makes room among admins";
}

TEST(SignInThrottleTest, ABucketAMinuteRefillsAndNamesAreBounded) {
  SignInThrottle t(3, 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.take("10.0.0.1", 0), 0) << i;
  EXPECT_FALSE(t.wouldAllow("10.0.0.1", 0));
  EXPECT_EQ(t.take("10.0.0.1", 0), 20) << "one refills in 20 s";
  EXPECT_TRUE(t.wouldAllow("10.0.0.2", 0));
  EXPECT_EQ(t.take("10.0.0.2", 0), 0);
  EXPECT_EQ(t.take("10.0.0.3", 0), 60) << "a third name while none refilled: refused, the others kept";
  EXPECT_FALSE(t.wouldAllow("10.0.0.1", 1'000'000));
  EXPECT_TRUE(t.wouldAllow("10.0.0.1", 21'000'000));
  EXPECT_EQ(t.take("10.0.0.3", 61'000'000), 0) << "refilled names are forgotten for new ones";
  SignInThrottle unlimited(0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(unlimited.take("x", 0), 0);
}

TEST(DashboardIsolationTest, RowsOfAnotherTeamAreDroppedEvenIfAQueryLetThemThrough) {
  std::vector<billing::UsageRow> rows = {{"key_1", "team-a", -1, {}}, {"key_2", "team-b", -1, {}}, {"key_3", "team-a", -1, {}}};
  EXPECT_EQ(dropOtherTeams(rows, "team-a", "key row"), 1u);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].group, "key_1");
  EXPECT_EQ(rows[1].group, "key_3");
  std::vector<billing::LedgerEntry> entries(3);
  entries[0].team = "team-b";
  entries[1].team = "team-a";
  entries[2].team = "";
  EXPECT_EQ(dropOtherTeams(entries, "team-a", "ledger entry"), 2u);
  EXPECT_EQ(entries.size(), 1u);
  std::vector<billing::ApiKeyInfo> keys = {{"key_1", "team-a", "a", 0, ""}, {"key_2", "team-ab", "b", 0, ""}};
  EXPECT_EQ(dropOtherTeams(keys, "team-a", "key"), 1u);
  EXPECT_EQ(keys.size(), 1u);
}

TEST(DashboardCookieTest, TheSessionCookieIsFoundAmongOthers) {
  HttpHeaders h{{"cookie", "a=1; lg_dashboardx=no; lg_dashboard=yes"}, {"Cookie", "lg_dashboard=second"}};
  EXPECT_EQ(cookieValue(h, "lg_dashboard"), "yes");
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", "x=1"}}, "lg_dashboard"), std::nullopt);
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", " lg_dashboard = padded ;"}}, "lg_dashboard"), std::nullopt);
  EXPECT_EQ(cookieValue(HttpHeaders{{"cookie", "lg_dashboard=\"q\""}}, "lg_dashboard"), "q");
}

}  // namespace
}  // namespace lg::proxy

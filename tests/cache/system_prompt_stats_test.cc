#include "cache/system_prompt_stats.h"

#include <string>

#include <gtest/gtest.h>

#include "tests/cache/cache_test_util.h"

namespace lg::cache::testing {
namespace {

TEST(SystemPromptStatsTest, CountsPerTeamWithoutKeepingText) {
  SystemPromptStats stats(testSecret(), sha256("model"));
  for (int i = 0; i < 3; ++i) stats.record(team("team-a"), "You are a coding agent.", 1000);
  stats.record(team("team-b"), "You are a coding agent.", 400);  // same text, another team
  stats.record(team("team-a"), "You are a travel agent.", 200);
  const auto a = stats.top(team("team-a"), 10);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].requests, 3u);
  EXPECT_EQ(a[0].prompt_tokens, 3000u);
  EXPECT_EQ(a[0].overestimate, 0u);
  EXPECT_EQ(a[0].fingerprint, stats.fingerprint(team("team-a"), "You are a coding agent."));
  const auto b = stats.top(team("team-b"), 10);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].requests, 1u);
  EXPECT_NE(b[0].fingerprint, a[0].fingerprint);  // the same text is another entry in another team
  EXPECT_TRUE(stats.top(team("team-c"), 10).empty());
}

TEST(SystemPromptStatsTest, FingerprintsAreKeyedWithTheInstallationSecret) {
  // Without the secret a fingerprint cannot be recomputed from a guessed
  // prompt: another installation's key gives another fingerprint, and no
  // unkeyed hash of the fields matches.
  const auto other = std::make_shared<const CacheSecret>(CacheSecret::fromBytesForTest("other installation"));
  SystemPromptStats mine(testSecret(), sha256("model"));
  SystemPromptStats theirs(other, sha256("model"));
  const Digest fp = mine.fingerprint(team("t"), "You are helpful.");
  EXPECT_NE(fp, theirs.fingerprint(team("t"), "You are helpful."));
  EXPECT_NE(fp, sha256("You are helpful."));
  EXPECT_EQ(fp, mine.fingerprint(team("t"), "You are helpful."));
}

TEST(SystemPromptStatsTest, ATeamsFullTableNeverInheritsAnotherTeamsCounts) {
  SystemPromptStats stats(testSecret(), sha256("model"), /*capacity_per_team=*/4);
  for (int i = 0; i < 50; ++i) stats.record(team("busy"), "hot", 10);
  for (int p = 0; p < 40; ++p) stats.record(team("busy"), "rare " + std::to_string(p), 10);
  for (int i = 0; i < 5; ++i) stats.record(team("busy"), "warm", 10);
  EXPECT_EQ(stats.tracked(team("busy")), 4u);
  const auto top = stats.top(team("busy"), 4);
  EXPECT_EQ(top[0].fingerprint, stats.fingerprint(team("busy"), "hot"));
  EXPECT_EQ(top[0].requests, 50u);
  bool warm_found = false;
  for (const auto& use : top) {
    if (use.fingerprint != stats.fingerprint(team("busy"), "warm")) continue;
    warm_found = true;
    EXPECT_GE(use.requests, 5u);  // never below the truth...
    EXPECT_LE(use.requests - use.overestimate, 5u);  // ...and the bound holds
  }
  EXPECT_TRUE(warm_found);
  // A quiet team's first prompt starts from its own zero, whatever the busy
  // team's table holds.
  stats.record(team("quiet"), "rare 3", 10);
  const auto quiet = stats.top(team("quiet"), 4);
  ASSERT_EQ(quiet.size(), 1u);
  EXPECT_EQ(quiet[0].requests, 1u);
  EXPECT_EQ(quiet[0].overestimate, 0u);
}

}  // namespace
}  // namespace lg::cache::testing

#include "cache/system_prompt_stats.h"

#include <string>

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

TEST(SystemPromptStatsTest, CountsPerNamespaceWithoutKeepingText) {
  SystemPromptStats stats(sha256("model"));
  for (int i = 0; i < 3; ++i) stats.record("team-a", "You are a coding agent.", 1000);
  stats.record("team-b", "You are a coding agent.", 400);  // same text, another team
  stats.record("team-a", "You are a travel agent.", 200);
  const auto top = stats.top(10);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].ns, "team-a");
  EXPECT_EQ(top[0].requests, 3u);
  EXPECT_EQ(top[0].prompt_tokens, 3000u);
  EXPECT_EQ(top[0].overestimate, 0u);
  EXPECT_EQ(top[0].fingerprint, systemPromptFingerprint("team-a", sha256("model"), "You are a coding agent."));
  EXPECT_NE(top[1].fingerprint, top[2].fingerprint);
  EXPECT_EQ(stats.top(1).size(), 1u);
}

TEST(SystemPromptStatsTest, BoundedTableKeepsTheMostUsedAndNeverUndercounts) {
  SystemPromptStats stats(sha256("model"), /*capacity=*/4);
  for (int i = 0; i < 50; ++i) stats.record("t", "hot", 10);
  for (int p = 0; p < 40; ++p) stats.record("t", "rare " + std::to_string(p), 10);
  for (int i = 0; i < 5; ++i) stats.record("t", "warm", 10);
  EXPECT_EQ(stats.tracked(), 4u);
  const auto top = stats.top(4);
  EXPECT_EQ(top[0].fingerprint, systemPromptFingerprint("t", sha256("model"), "hot"));
  EXPECT_EQ(top[0].requests, 50u);
  bool warm_found = false;
  for (const auto& use : top) {
    if (use.fingerprint != systemPromptFingerprint("t", sha256("model"), "warm")) continue;
    warm_found = true;
    EXPECT_GE(use.requests, 5u);  // never below the truth...
    EXPECT_LE(use.requests - use.overestimate, 5u);  // ...and the bound holds
  }
  EXPECT_TRUE(warm_found);
}

}  // namespace
}  // namespace lg::cache

// The restore-or-recompute decision, deterministically: fed observations, the
// model must predict them back and choose the cheaper side.
#include "cache/cost_model.h"

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

TEST(CostModelTest, PairsCountCausalAttention) {
  EXPECT_EQ(CostModel::pairs(0, 1), 1.0);
  EXPECT_EQ(CostModel::pairs(0, 4), 1.0 + 2 + 3 + 4);
  EXPECT_EQ(CostModel::pairs(10, 12), 11.0 + 12);
  EXPECT_EQ(CostModel::pairs(5, 5), 0.0);
  // Chunked prefill sums to the same as one call.
  EXPECT_EQ(CostModel::pairs(0, 100) + CostModel::pairs(100, 250), CostModel::pairs(0, 250));
}

TEST(CostModelTest, UnknownPrefillCostMeansRestore) {
  CostModel m;
  EXPECT_LT(m.recomputeSeconds(0, 100), 0);
  const Decision d = m.decide(RestorePolicy::kAuto, uint64_t{1} << 30, 0, 64);
  EXPECT_EQ(d.choice, RestoreChoice::kRestore);
  EXPECT_LT(d.recompute_seconds, 0);
  EXPECT_EQ(m.decide(RestorePolicy::kAuto, 100, 5, 5).choice, RestoreChoice::kNone);
}

TEST(CostModelTest, LearnsRestoreLatencyAndBandwidth) {
  CostModelOptions o;
  o.alpha = 0.5;
  CostModel m(o);
  // Truth: 1 ms + bytes / 1 GB/s; restores of varying size.
  auto truth = [](uint64_t b) { return 1e-3 + static_cast<double>(b) / 1e9; };
  for (int round = 0; round < 200; ++round) {
    for (uint64_t b : {uint64_t{1} << 16, uint64_t{1} << 24, uint64_t{1} << 27}) m.observeRestore(b, truth(b));
  }
  const CostEstimates e = m.estimates();
  EXPECT_NEAR(e.restore_bandwidth, 1e9, 0.02e9);
  EXPECT_NEAR(e.restore_latency, 1e-3, 0.1e-3);
  for (uint64_t b : {uint64_t{1} << 20, uint64_t{1} << 26}) EXPECT_NEAR(m.restoreSeconds(b), truth(b), 0.05 * truth(b));
  // One size only: that size is still predicted right.
  CostModel one;
  for (int i = 0; i < 20; ++i) one.observeRestore(90'000'000, 0.3);
  EXPECT_NEAR(one.restoreSeconds(90'000'000), 0.3, 0.003);
}

TEST(CostModelTest, PrefillCostGrowsWithContext) {
  CostModel m;
  // Truth: 2 ms per token outside attention, 10 ns per attention pair,
  // observed through chunks at different offsets.
  auto observe = [&](int64_t b, int64_t e) {
    m.observePrefill(e - b, CostModel::pairs(b, e), 2e-3 * static_cast<double>(e - b), 1e-8 * CostModel::pairs(b, e));
  };
  observe(0, 512);
  observe(512, 1024);
  observe(4000, 4100);
  const CostEstimates e = m.estimates();
  EXPECT_NEAR(e.per_token, 2e-3, 1e-12);
  EXPECT_NEAR(e.per_pair, 1e-8, 1e-18);
  // 100 tokens deep in a long context cost more than the same 100 at the start.
  EXPECT_GT(m.recomputeSeconds(7900, 8000), m.recomputeSeconds(0, 100));
  EXPECT_NEAR(m.recomputeSeconds(0, 100), 0.2 + 1e-8 * 5050, 1e-12);
}

TEST(CostModelTest, DecisionPicksTheCheaperSideAndPoliciesOverride) {
  CostModel m;
  m.observePrefill(1000, CostModel::pairs(0, 1000), 1.0, 0.5);  // 1 ms per token + attention
  m.observeRestore(100'000'000, 0.1);                             // ~1 GB/s
  // 64 tokens of 11 KB each: restoring 0.7 MB beats computing 64 tokens.
  Decision d = m.decide(RestorePolicy::kAuto, 64 * 11'520, 0, 64);
  EXPECT_EQ(d.choice, RestoreChoice::kRestore);
  EXPECT_LT(d.restore_seconds, d.recompute_seconds);
  // A huge stored block for few tokens (a slow disk) loses to recomputing.
  d = m.decide(RestorePolicy::kAuto, uint64_t{20} << 30, 0, 8);
  EXPECT_EQ(d.choice, RestoreChoice::kRecompute);
  EXPECT_GT(d.restore_seconds, d.recompute_seconds);
  EXPECT_EQ(m.decide(RestorePolicy::kAlways, uint64_t{20} << 30, 0, 8).choice, RestoreChoice::kRestore);
  EXPECT_EQ(m.decide(RestorePolicy::kNever, 1, 0, 8000).choice, RestoreChoice::kRecompute);
  // The crossover follows the context: the same bytes for deeper tokens favour restoring.
  const uint64_t bytes = static_cast<uint64_t>(m.recomputeSeconds(0, 64) * 1e9 * 1.5);
  EXPECT_EQ(m.decide(RestorePolicy::kAuto, bytes, 0, 64).choice, RestoreChoice::kRecompute);
  EXPECT_EQ(m.decide(RestorePolicy::kAuto, bytes, 100000, 100064).choice, RestoreChoice::kRestore);
}

TEST(CostModelTest, SerializesAndRejectsGarbage) {
  CostModel m;
  m.observePrefill(100, 5050, 0.1, 0.05);
  m.observeRestore(1 << 20, 0.002);
  CostModel back;
  ASSERT_TRUE(back.deserialize(m.serialize()).isOk());
  EXPECT_EQ(back.estimates().per_token, m.estimates().per_token);
  EXPECT_EQ(back.estimates().restore_bandwidth, m.estimates().restore_bandwidth);
  EXPECT_EQ(back.estimates().prefills, 1);
  EXPECT_FALSE(back.deserialize("v2 nan 1 1 1 1 1 0 0 0 0").isOk());
  EXPECT_FALSE(back.deserialize("v1 1 1 1 1 1 1").isOk());
  EXPECT_FALSE(back.deserialize("").isOk());
  EXPECT_EQ(back.estimates().prefills, 1);  // unchanged by the rejected inputs
}

}  // namespace
}  // namespace lg::cache

// ForwardTiming's memory accounting, which the decode benchmark's bandwidth
// bound is computed from: the weights a step's products read (the routed
// experts the batch went to, not all of them) and the latent rows attention
// read.
#include <gtest/gtest.h>

#include "engine/forward_runner.h"
#include "engine/sequence_blocks.h"
#include "tests/engine/golden/golden_util.h"

namespace lg::engine::testing {
namespace {

TEST(ForwardTimingTest, DecodeStepCountsTheWeightsAndLatentsItReads) {
  const Golden g = loadGolden("tiny-v3");
  auto backend = makeBackend("tiny-v3", LatentDType::kF32, 16);
  ASSERT_NE(backend, nullptr);
  const ModelConfig& c = backend->config();
  const Model& model = backend->model();
  const std::span<const int32_t> ids(g.ids);
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += model.layer(l).moe ? 1 : 0;
  ASSERT_GT(moe_layers, 0);
  const LayerWeights& some_moe = model.layer(c.num_hidden_layers - 1);
  const double expert_bytes =
      double(some_moe.experts[0].gate.bytes() + some_moe.experts[0].up.bytes() + some_moe.experts[0].down.bytes());

  SequenceBlocks a(*backend), b(*backend);
  for (SequenceBlocks* s : {&a, &b}) {
    auto step = s->step(ids.first(40), LogitsWanted::kNone);
    ASSERT_TRUE(step.isOk());
    ASSERT_TRUE(backend->forward(ForwardBatch{{*step}}).isOk());
    s->commit(40);
  }
  // One sequence, one token: exactly the active weights of a token (both
  // absorbed products together read kv_b_proj once) and 41 latent rows a layer.
  auto one = a.step(ids.subspan(40, 1), LogitsWanted::kLast);
  ASSERT_TRUE(one.isOk());
  auto out = backend->forward(ForwardBatch{{*one}});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(out->timing.experts_touched, moe_layers * c.num_experts_per_tok);
  EXPECT_DOUBLE_EQ(out->timing.weight_bytes_read, double(model.activeWeightBytesPerToken()));
  EXPECT_DOUBLE_EQ(out->timing.latent_bytes_read,
                   41.0 * c.num_hidden_layers * c.latentDim() * backend->latentLayout().elementBytes());

  // Two sequences: the dense weights once, the union of their experts, one
  // more embedding row; B attends over its own 40 + 1 rows.
  auto sa = a.step(ids.subspan(40, 1), LogitsWanted::kLast);  // recomputes position 40 (not committed)
  auto sb = b.step(ids.subspan(60, 1), LogitsWanted::kLast);
  ASSERT_TRUE(sa.isOk() && sb.isOk());
  auto two = backend->forward(ForwardBatch{{*sa, *sb}});
  ASSERT_TRUE(two.isOk()) << two.status().toString();
  const int32_t touched = two->timing.experts_touched;
  EXPECT_GE(touched, moe_layers * c.num_experts_per_tok);
  EXPECT_LE(touched, 2 * moe_layers * c.num_experts_per_tok);
  const double embedding_row = double(c.hidden_size) * dtypeSize(model.embedding().dtype);
  EXPECT_DOUBLE_EQ(two->timing.weight_bytes_read,
                   out->timing.weight_bytes_read + (touched - moe_layers * c.num_experts_per_tok) * expert_bytes +
                       embedding_row);
  EXPECT_DOUBLE_EQ(two->timing.latent_bytes_read, 2 * out->timing.latent_bytes_read);
}

}  // namespace
}  // namespace lg::engine::testing

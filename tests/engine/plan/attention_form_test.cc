// The attention form choice (engine/attention_form.h): its arithmetic against
// a count done by hand, and the choices it makes on the bench preset.
#include "engine/attention_form.h"

#include <gtest/gtest.h>

#include "engine/model/presets.h"

namespace lg::engine {
namespace {

ModelConfig benchConfig() {
  auto c = presetConfig("bench");
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return *c;
}

TEST(AttentionFormTest, ArithmeticCountsProjectionsAndPairs) {
  const ModelConfig c = benchConfig();  // 16 heads, kv_lora 512, nope 128, rope 64, v 128
  ASSERT_EQ(c.num_attention_heads, 16);
  // 3 queries over 5 cached keys: pairs = 6 + 7 + 8 = 21, context 8.
  const AttentionArithmetic a = attentionArithmetic(c, 5, 3);
  EXPECT_DOUBLE_EQ(a.absorbed_flops, 2.0 * 3 * 16 * (128 * 512 + 512 * 128) + 2.0 * 21 * 16 * (576 + 512));
  EXPECT_DOUBLE_EQ(a.standard_flops, 2.0 * 8 * 512 * 16 * 256 + 2.0 * 21 * 16 * (192 + 128));
}

TEST(AttentionFormTest, AutoPicksStandardForLongFreshChunksOnly) {
  const ModelConfig c = benchConfig();
  auto choose = [&](int64_t cached, int64_t tokens) {
    return chooseAttentionForm(AttentionForm::kAuto, c, cached, tokens);
  };
  EXPECT_EQ(choose(0, 8000), AttentionForm::kStandard);  // fresh prefill
  EXPECT_EQ(choose(0, 1), AttentionForm::kStandard);     // the projections cost the same, pairs less
  EXPECT_EQ(choose(7872, 128), AttentionForm::kAbsorbed);  // short suffix over a long cached prefix
  EXPECT_EQ(choose(7872, 256), AttentionForm::kStandard);  // past the ~171-token break-even
  EXPECT_EQ(choose(8000, 1), AttentionForm::kAbsorbed);    // decode
  EXPECT_EQ(choose(1, 1), AttentionForm::kAbsorbed);
  // The break-even over a long prefix does not depend on the head count.
  ModelConfig many = c;
  many.num_attention_heads = 128;
  EXPECT_EQ(chooseAttentionForm(AttentionForm::kAuto, many, 7872, 128), AttentionForm::kAbsorbed);
  EXPECT_EQ(chooseAttentionForm(AttentionForm::kAuto, many, 7872, 256), AttentionForm::kStandard);
  // Forced forms are returned as they are.
  EXPECT_EQ(chooseAttentionForm(AttentionForm::kAbsorbed, c, 0, 8000), AttentionForm::kAbsorbed);
  EXPECT_EQ(chooseAttentionForm(AttentionForm::kStandard, c, 8000, 1), AttentionForm::kStandard);
}

}  // namespace
}  // namespace lg::engine

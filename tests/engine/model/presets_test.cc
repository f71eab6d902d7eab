// Random-weight checkpoints: every preset is a valid V3 config, the writer
// produces exactly what the loader reads, the weights are deterministic per
// seed, and configs survive a config.json round trip.
#include "engine/model/presets.h"

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/bfloat16.h"
#include "common/file_util.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/forward_runner.h"
#include "engine/model/model.h"
#include "tests/engine/loader/checkpoint_util.h"

namespace lg::engine::testing {
namespace {

ModelConfig smallConfig() {
  ModelConfig c = *presetConfig("demo");
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.intermediate_size = 96;
  c.moe_intermediate_size = 32;
  return c;
}

TEST(PresetsTest, PresetsAreValidV3Configs) {
  for (const std::string& name : presetNames()) {
    auto c = presetConfig(name);
    ASSERT_TRUE(c.isOk()) << name;
    EXPECT_EQ(c->model_type, ModelType::kDeepseekV3);
    EXPECT_EQ(c->vocab_size, 129280);
    EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
    // The JSON we write parses back to the same architecture.
    auto back = parseModelConfig(modelConfigToJson(*c));
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(back->hidden_size, c->hidden_size);
    EXPECT_EQ(back->q_lora_rank, c->q_lora_rank);
    EXPECT_EQ(back->n_group, c->n_group);
    EXPECT_EQ(back->yarn.factor, c->yarn.factor);
    EXPECT_DOUBLE_EQ(back->softmaxScale(), c->softmaxScale());
  }
  EXPECT_FALSE(presetConfig("nope").isOk());
}

TEST(PresetsTest, EndTokensShapeOnlyTheirEmbeddingsAndTheEosRow) {
  EXPECT_GT(presetInitOptions("demo").end_token_rate, 0.0f);   // demo replies end
  EXPECT_EQ(presetInitOptions("bench").end_token_rate, 0.0f);  // bench replies run to their length
  TempDir plain, shaped;
  CheckpointInitOptions options;
  ASSERT_TRUE(writeRandomCheckpoint(smallConfig(), plain.path(), options).isOk());
  options.end_token_rate = 0.25f;
  ASSERT_TRUE(writeRandomCheckpoint(smallConfig(), shaped.path(), options).isOk());
  auto a = Model::load(plain.path());
  auto b = Model::load(shaped.path());
  ASSERT_TRUE(a.isOk() && b.isOk());
  const ModelConfig& c = (*a)->config();
  auto row = [](const WeightView& w, int64_t r) {
    std::vector<float> v(static_cast<size_t>(w.cols));
    for (int64_t j = 0; j < w.cols; ++j) {
      uint16_t bits;
      std::memcpy(&bits, w.at(r, j), 2);
      v[static_cast<size_t>(j)] = bf16ToFloat(bits);
    }
    return v;
  };
  auto norm = [](const std::vector<float>& v) {
    double n = 0;
    for (float x : v) n += double{x} * x;
    return std::sqrt(n);
  };
  // lm_head: only the EOS row changed, to a vector of norm 8 (kEosGain).
  const int eos = c.eos_token_ids.at(0);
  EXPECT_NEAR(norm(row((*b)->lmHead(), eos)), 8.0, 0.05);
  for (int r : {0, 2, 100}) EXPECT_EQ(row((*a)->lmHead(), r), row((*b)->lmHead(), r)) << r;
  // Embeddings: about a quarter of the ordinary rows moved, all along the EOS row's direction.
  const std::vector<float> eos_row = row((*b)->lmHead(), eos);
  int moved = 0, ordinary = 0;
  for (int64_t t = 0; t < std::min<int64_t>(c.vocab_size, 128000); ++t) {
    const std::vector<float> ea = row((*a)->embedding(), t), eb = row((*b)->embedding(), t);
    if (t < 3) {
      EXPECT_EQ(ea, eb) << t;  // BOS, EOS and padding are never end tokens
      continue;
    }
    ++ordinary;
    if (ea == eb) continue;
    ++moved;
    double along = 0;
    for (size_t j = 0; j < ea.size(); ++j) along += double{eb[j] - ea[j]} * eos_row[j] / 8.0;
    EXPECT_NEAR(along, 2.0 * 0.02 * std::sqrt(double(c.hidden_size)), 0.05) << t;
  }
  EXPECT_NEAR(double(moved) / ordinary, 0.25, 0.075);  // 3 sigma of 297 draws
}

TEST(PresetsTest, WrittenCheckpointLoadsRunsAndIsDeterministic) {
  TempDir a, b, c;
  CheckpointInitOptions options;
  options.seed = 11;
  ASSERT_TRUE(writeRandomCheckpoint(smallConfig(), a.path(), options).isOk());
  ASSERT_TRUE(writeRandomCheckpoint(smallConfig(), b.path(), options).isOk());
  options.seed = 12;
  ASSERT_TRUE(writeRandomCheckpoint(smallConfig(), c.path(), options).isOk());
  const std::string wa = *readFile(a.path() + "/model.safetensors");
  EXPECT_EQ(wa, *readFile(b.path() + "/model.safetensors"));
  EXPECT_NE(wa, *readFile(c.path() + "/model.safetensors"));
  EXPECT_EQ(*readFile(a.path() + "/tokenizer_config.json"), std::string(embeddedTokenizerConfigJson()));

  auto model = Model::load(a.path());
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  EXPECT_EQ((*model)->checkpointBytes(), std::filesystem::file_size(a.path() + "/model.safetensors"));
  auto backend = createCpuBackend(std::move(model).value(), BackendOptions{});
  ASSERT_TRUE(backend.isOk());
  std::vector<int32_t> ids = {0, 5, 17, 299, 42};
  auto full = runForward(**backend, ids, {});
  ASSERT_TRUE(full.isOk()) << full.status().toString();
  ForwardRunOptions decode;
  decode.decode_from = 2;
  auto stepwise = runForward(**backend, ids, decode);
  ASSERT_TRUE(stepwise.isOk());
  for (size_t i = 0; i < full->size(); ++i) ASSERT_NEAR((*full)[i], (*stepwise)[i], 1e-4) << i;
}

}  // namespace
}  // namespace lg::engine::testing

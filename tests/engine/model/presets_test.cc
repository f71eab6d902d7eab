// Random-weight checkpoints: every preset is a valid V3 config, the writer
// produces exactly what the loader reads, the weights are deterministic per
// seed, and configs survive a config.json round trip.
#include "engine/model/presets.h"

#include <filesystem>

#include <gtest/gtest.h>

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

// Loading checkpoints: unsupported architectures and options, missing,
// misshapen and mistyped tensors, truncated files, FP8 scales and shards. Every
// failure is a Status that names the field or tensor; nothing crashes.
#include "engine/model/model.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "checkpoint_util.h"
#include "common/file_util.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/forward_runner.h"
#include "tests/engine/golden/golden_util.h"

namespace lg::engine::testing {
namespace {

using nlohmann::json;

Status loadStatus(const std::string& dir) { return Model::load(dir).status(); }

void expectError(const Status& s, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(s.isOk()) << "expected an error mentioning " << needle;
  EXPECT_EQ(s.code(), code) << s.toString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.toString();
}

EditableTensor* find(std::vector<EditableTensor>& ts, const std::string& name) {
  for (auto& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

TEST(ModelLoadTest, UnsupportedConfigurationsAreNamed) {
  struct Case {
    std::function<void(json&)> edit;
    StatusCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model_type"] = "llama"; }, StatusCode::kUnimplemented, "model_type \"llama\""},
      {[](json& j) { j["topk_method"] = "sinkhorn"; }, StatusCode::kUnimplemented, "topk_method \"sinkhorn\""},
      {[](json& j) { j["hidden_act"] = "gelu"; }, StatusCode::kUnimplemented, "hidden_act \"gelu\""},
      {[](json& j) { j["scoring_func"] = "relu"; }, StatusCode::kUnimplemented, "scoring_func"},
      {[](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, StatusCode::kUnimplemented, "linear"},
      {[](json& j) { j["attention_bias"] = true; }, StatusCode::kUnimplemented, "attention_bias"},
      {[](json& j) { j.erase("kv_lora_rank"); }, StatusCode::kInvalidArgument, "\"kv_lora_rank\" is missing"},
      {[](json& j) { j["hidden_size"] = "wide"; }, StatusCode::kInvalidArgument, "\"hidden_size\" must be an integer"},
      {[](json& j) { j["qk_rope_head_dim"] = 15; }, StatusCode::kInvalidArgument, "qk_rope_head_dim must be even"},
      {[](json& j) { j["num_experts_per_tok"] = 99; }, StatusCode::kInvalidArgument, "num_experts_per_tok"},
      {[](json& j) { j["n_group"] = 3; }, StatusCode::kInvalidArgument, "n_group"},
      {[](json& j) { j["quantization_config"] = {{"quant_method", "awq"}}; }, StatusCode::kUnimplemented, "awq"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    writeCheckpoint("tiny-v2", dir.path(), {}, c.edit);
    expectError(loadStatus(dir.path()), c.code, c.needle);
  }
  TempDir dir;
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/config.json", "{\"model_type\": ").isOk());
  expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument, "not valid JSON");
}

TEST(ModelLoadTest, MissingFilesAreNotFound) {
  TempDir dir;
  expectError(loadStatus(dir.path()), StatusCode::kNotFound, "config.json");
  writeConfig("tiny-v2", dir.path());
  expectError(loadStatus(dir.path()), StatusCode::kNotFound, "no model.safetensors");
}

TEST(ModelLoadTest, MissingMisshapenAndMistypedTensorsAreNamed) {
  {
    TempDir dir;
    writeCheckpoint("tiny-v2", dir.path(), [](auto& ts) {
      std::erase_if(ts, [](const EditableTensor& t) { return t.name == "model.layers.1.mlp.experts.3.up_proj.weight"; });
    });
    expectError(loadStatus(dir.path()), StatusCode::kNotFound, "'model.layers.1.mlp.experts.3.up_proj.weight'");
  }
  {
    TempDir dir;  // same bytes, transposed shape
    writeCheckpoint("tiny-v2", dir.path(), [](auto& ts) {
      EditableTensor* t = find(ts, "model.layers.0.self_attn.q_proj.weight");
      std::swap(t->shape[0], t->shape[1]);
    });
    expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument,
                "'model.layers.0.self_attn.q_proj.weight' has shape [192, 144] but the config implies [144, 192]");
  }
  {
    TempDir dir;  // a weight stored as 16-bit integers
    writeCheckpoint("tiny-v2", dir.path(), [](auto& ts) { find(ts, "model.layers.2.self_attn.o_proj.weight")->dtype = DType::kI16; });
    expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument, "'model.layers.2.self_attn.o_proj.weight' has dtype I16");
  }
  {
    TempDir dir;  // a norm vector of the wrong length
    writeCheckpoint("tiny-v2", dir.path(), [](auto& ts) {
      EditableTensor* t = find(ts, "model.norm.weight");
      t->shape = {96};
      t->bytes.resize(192);
    });
    expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument, "'model.norm.weight' has shape [96]");
  }
  {
    TempDir dir;  // the config says 4 layers, the checkpoint has 3
    writeCheckpoint("tiny-v2", dir.path(), {}, [](json& j) { j["num_hidden_layers"] = 4; });
    expectError(loadStatus(dir.path()), StatusCode::kNotFound, "'model.layers.3.input_layernorm.weight'");
  }
  {
    TempDir dir;  // noaux_tc needs the correction bias
    writeCheckpoint("tiny-v3", dir.path(), [](auto& ts) {
      std::erase_if(ts, [](const EditableTensor& t) { return t.name.find("e_score_correction_bias") != std::string::npos; });
    });
    expectError(loadStatus(dir.path()), StatusCode::kNotFound, "e_score_correction_bias");
  }
}

TEST(ModelLoadTest, TruncatedWeightsFileIsDataLoss) {
  TempDir dir;
  writeCheckpoint("tiny-v2", dir.path());
  const std::string path = dir.path() + "/model.safetensors";
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  Status s = loadStatus(dir.path());
  expectError(s, StatusCode::kDataLoss, "run past the data section");
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos);
}

TEST(ModelLoadTest, Fp8ScalesAreCheckedAndRequired) {
  {
    TempDir dir;
    writeCheckpoint("tiny-v3-fp8", dir.path(), [](auto& ts) {
      std::erase_if(ts, [](const EditableTensor& t) { return t.name == "model.layers.0.mlp.down_proj.weight_scale_inv"; });
    });
    expectError(loadStatus(dir.path()), StatusCode::kNotFound, "'model.layers.0.mlp.down_proj.weight_scale_inv'");
  }
  {
    TempDir dir;
    writeCheckpoint("tiny-v3-fp8", dir.path(), [](auto& ts) {
      EditableTensor* t = find(ts, "model.layers.0.mlp.down_proj.weight_scale_inv");
      std::swap(t->shape[0], t->shape[1]);
    });
    expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument, "down_proj.weight_scale_inv' has shape [3, 2]");
  }
  {
    TempDir dir;
    writeCheckpoint("tiny-v3-fp8", dir.path(), {}, [](json& j) { j.erase("quantization_config"); });
    expectError(loadStatus(dir.path()), StatusCode::kInvalidArgument, "F8_E4M3 but config.json has no fp8");
  }
}

// Shards with an index, and the V3 multi-token-prediction layer, which the
// engine ignores: the result still matches the golden logits.
TEST(ModelLoadTest, ShardedCheckpointWithMtpLayerMatchesGolden) {
  TempDir dir;
  std::vector<EditableTensor> ts = readFixtureTensors("tiny-v3");
  std::vector<EditableTensor> mtp;
  for (const auto& t : ts) {
    if (t.name.rfind("model.layers.2.", 0) == 0) {
      EditableTensor copy = t;
      copy.name.replace(0, 15, "model.layers.3.");
      mtp.push_back(std::move(copy));
    }
  }
  ts.insert(ts.end(), mtp.begin(), mtp.end());
  std::vector<EditableTensor> shard1(ts.begin(), ts.begin() + static_cast<long>(ts.size() / 2));
  std::vector<EditableTensor> shard2(ts.begin() + static_cast<long>(ts.size() / 2), ts.end());
  writeTensors(dir.path() + "/model-00001-of-00002.safetensors", shard1);
  writeTensors(dir.path() + "/model-00002-of-00002.safetensors", shard2);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const auto& t : shard1) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : shard2) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/model.safetensors.index.json", index.dump()).isOk());
  writeConfig("tiny-v3", dir.path(), [](json& j) { j["num_nextn_predict_layers"] = 1; });

  auto model = Model::load(dir.path());
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  EXPECT_EQ((*model)->config().num_hidden_layers, 3);
  BackendOptions options;
  auto backend = createCpuBackend(std::move(model).value(), options);
  ASSERT_TRUE(backend.isOk());
  Golden g = loadGolden("tiny-v3");
  auto logits = runForward(**backend, g.ids, {});
  ASSERT_TRUE(logits.isOk());
  EXPECT_LE(maxAbsDiff(*logits, g.logits, g.vocab, 0, static_cast<int64_t>(g.ids.size())), 1e-3);

  // The index naming a tensor its shard lacks, or a file outside the directory.
  index["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/model.safetensors.index.json", index.dump()).isOk());
  if (std::find_if(shard2.begin(), shard2.end(), [](const auto& t) { return t.name == "lm_head.weight"; }) == shard2.end()) {
    expectError(loadStatus(dir.path()), StatusCode::kDataLoss, "'lm_head.weight'");
  }
  index["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors";
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/model.safetensors.index.json", index.dump()).isOk());
  expectError(loadStatus(dir.path()), StatusCode::kDataLoss, "invalid file");
  index["weight_map"]["lm_head.weight"] = "missing.safetensors";
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/model.safetensors.index.json", index.dump()).isOk());
  expectError(loadStatus(dir.path()), StatusCode::kNotFound, "missing.safetensors");
}

TEST(ForwardInputTest, BadInputsAreErrorsAndLeaveTheBackendUsable) {
  auto model = Model::load(fixtureDir("tiny-v2"));
  ASSERT_TRUE(model.isOk());
  BackendOptions options;
  options.max_context = 100;
  auto backend_or = createCpuBackend(std::move(model).value(), options);
  ASSERT_TRUE(backend_or.isOk());
  Backend& backend = **backend_or;
  const std::vector<int32_t> ok = {5, 6, 7};
  expectError(runForward(backend, std::vector<int32_t>{5, 2048, 7}, {}).status(), StatusCode::kInvalidArgument,
              "token id 2048 at index 1");
  expectError(runForward(backend, std::vector<int32_t>{-1}, {}).status(), StatusCode::kInvalidArgument, "token id -1");
  expectError(runForward(backend, std::vector<int32_t>{}, {}).status(), StatusCode::kInvalidArgument, "empty input");
  expectError(runForward(backend, std::vector<int32_t>(101, 3), {}).status(), StatusCode::kOutOfRange,
              "maximum context of 100");
  ForwardRunOptions decode;
  decode.decode_from = 5;
  expectError(runForward(backend, ok, decode).status(), StatusCode::kInvalidArgument, "decode_from");
  // A batch step that overruns the context through the block table API.
  ForwardBatch batch;
  std::vector<BlockId> none;
  batch.sequences.push_back({none, 0, ok, LogitsWanted::kLast});
  expectError(backend.forward(batch).status(), StatusCode::kInvalidArgument, "block table has 0 blocks");
  batch.sequences[0].cached_len = 99;
  expectError(backend.forward(batch).status(), StatusCode::kOutOfRange, "exceeds the maximum of 100");
  expectError(backend.forward(ForwardBatch{}).status(), StatusCode::kInvalidArgument, "empty batch");
  EXPECT_EQ(backend.blocks().numUsed(), 0);
  EXPECT_TRUE(runForward(backend, ok, {}).isOk());
}

TEST(ForwardInputTest, BackendOptionsAreValidated) {
  for (auto edit : {+[](BackendOptions& o) { o.block_tokens = 0; }, +[](BackendOptions& o) { o.max_context = 1 << 20; },
                    +[](BackendOptions& o) { o.max_batch_tokens = 0; }}) {
    auto model = Model::load(fixtureDir("tiny-v2"));
    ASSERT_TRUE(model.isOk());
    BackendOptions options;
    edit(options);
    EXPECT_FALSE(createCpuBackend(std::move(model).value(), options).isOk());
  }
}

}  // namespace
}  // namespace lg::engine::testing

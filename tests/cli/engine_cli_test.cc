// End-to-end tests of `latentgate forward` and `latentgate model init`: the
// written logits against the transformers golden, the stats line, a random
// checkpoint that loads and runs, and clear errors for bad input.
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "engine/model/safetensors.h"
#include "tests/engine/golden/golden_util.h"
#include "tests/engine/loader/checkpoint_util.h"
#include "tests/support/subprocess.h"

namespace lg::engine::testing {
namespace {

using nlohmann::json;
using test::latentgateBinary;
using test::runProcess;

std::vector<float> readLogits(const std::string& path, std::vector<int64_t>* shape) {
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.isOk()) << f.status().toString();
  if (!f.isOk()) return {};
  const TensorInfo* t = f->find("logits");
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  EXPECT_EQ(t->dtype, DType::kF32);
  *shape = t->shape;
  std::vector<float> out(static_cast<size_t>(t->numel()));
  std::memcpy(out.data(), f->data(*t), out.size() * 4);
  return out;
}

TEST(ForwardCliTest, WritesGoldenLogitsInEveryMode) {
  TempDir dir;
  Golden g = loadGolden("tiny-v3-fp8");
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/ids.json", json(g.ids).dump()).isOk());
  const std::vector<std::vector<std::string>> modes = {
      {}, {"--chunk", "7"}, {"--decode-from", std::to_string(g.prompt_len)}};
  for (const auto& extra : modes) {
    std::vector<std::string> argv = {latentgateBinary(), "forward", "--model", fixtureDir("tiny-v3-fp8"), "--ids",
                                     dir.path() + "/ids.json", "--out", dir.path() + "/out.safetensors"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = runProcess(argv, "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json stats = json::parse(r.out);
    EXPECT_EQ(stats["tokens"], g.ids.size());
    EXPECT_EQ(stats["cached_tokens"], 0);
    EXPECT_EQ(stats["computed_tokens"], g.ids.size());
    EXPECT_TRUE(stats.contains("prefill_ms"));
    std::vector<int64_t> shape;
    std::vector<float> logits = readLogits(dir.path() + "/out.safetensors", &shape);
    EXPECT_EQ(shape, (std::vector<int64_t>{static_cast<int64_t>(g.ids.size()), g.vocab}));
    EXPECT_LE(maxAbsDiff(logits, g.logits, g.vocab, 0, static_cast<int64_t>(g.ids.size())), 1e-3);
  }
}

TEST(ForwardCliTest, BadInputsFailCleanly) {
  TempDir dir;
  const std::string out = dir.path() + "/out.safetensors";
  auto forward = [&](const std::string& ids_text, const std::string& model) {
    EXPECT_TRUE(writeFileAtomic(dir.path() + "/ids.json", ids_text).isOk());
    return runProcess({latentgateBinary(), "forward", "--model", model, "--ids", dir.path() + "/ids.json", "--out", out}, "");
  };
  auto r = forward("[1, 2, 5000]", fixtureDir("tiny-v2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token id 5000"), std::string::npos) << r.err;
  r = forward("[]", fixtureDir("tiny-v2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("empty input"), std::string::npos) << r.err;
  r = forward("{\"ids\": 3}", fixtureDir("tiny-v2"));
  EXPECT_EQ(r.exit_code, 2);
  r = forward("[1, 2.5]", fixtureDir("tiny-v2"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("element 1"), std::string::npos) << r.err;
  r = forward("[1, 2]", dir.path() + "/no-such-model");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
  EXPECT_FALSE(r.signaled);
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(ModelInitCliTest, DemoPresetLoadsAndRuns) {
  TempDir dir;
  const std::string model = dir.path() + "/demo";
  auto r = runProcess({latentgateBinary(), "model", "init", "--preset", "demo", "--out", model, "--seed", "7"}, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(model + "/" + f)) << f;
  }
  // The tokenizer files are the embedded copies of the fixture.
  EXPECT_EQ(*readFile(model + "/tokenizer.json"),
            *readFile(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer/tokenizer.json"));
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/ids.json", "[0, 128803, 30594, 128804, 100, 200]").isOk());
  r = runProcess({latentgateBinary(), "forward", "--model", model, "--ids", dir.path() + "/ids.json", "--out",
                  dir.path() + "/out.safetensors", "--decode-from", "4"},
                 "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> shape;
  std::vector<float> logits = readLogits(dir.path() + "/out.safetensors", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{6, 129280}));
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // The tokenizer of the written checkpoint works with `latentgate tokenize`.
  r = runProcess({latentgateBinary(), "tokenize", "--model", model}, "{\"text\": \"Hello\"}\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = runProcess({latentgateBinary(), "model", "init", "--preset", "huge", "--out", model}, "");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown preset 'huge'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace lg::engine::testing

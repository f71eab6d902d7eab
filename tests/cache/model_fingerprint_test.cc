// The model fingerprint: what it covers (config, tokenizer files, headers,
// sampled weight bytes, the engine's latent format) and what it costs.
#include "cache/model_fingerprint.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/cache/cache_test_util.h"

namespace lg::cache {
namespace {

namespace fs = std::filesystem;
using testing::ScopedTempDir;

std::string fixture(const std::string& name) { return std::string(LG_FIXTURES_DIR) + "/" + name; }

void flipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

uint64_t dataStart(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  return 8 + n;
}

class ModelFingerprintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path() + "/m";
    fs::create_directories(model_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture("tiny-v3/") + f, model_ + "/" + f);
  }
  Digest fp(const ModelFingerprintOptions& o = {}) {
    auto r = fingerprintModel(model_, o);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? r->digest : Digest{};
  }
  ScopedTempDir dir_;
  std::string model_;
};

TEST_F(ModelFingerprintTest, StableAndSensitiveToConfigAndTokenizer) {
  const Digest base = fp();
  EXPECT_EQ(fp(), base);
  auto r = fingerprintModel(model_);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->files, (std::vector<std::string>{"config.json", "model.safetensors"}));
  // Same files elsewhere: same fingerprint (paths are not hashed).
  EXPECT_EQ(fingerprintModel(fixture("tiny-v3"))->digest, base);
  EXPECT_NE(fingerprintModel(fixture("tiny-v2"))->digest, base);

  std::string config = *readFile(model_ + "/config.json");
  ASSERT_TRUE(writeFileAtomic(model_ + "/config.json", config + " ").isOk());
  const Digest spaced = fp();
  EXPECT_NE(spaced, base);
  ASSERT_TRUE(writeFileAtomic(model_ + "/config.json", config).isOk());
  EXPECT_EQ(fp(), base);

  fs::copy_file(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer/tokenizer.json", model_ + "/tokenizer.json");
  const Digest with_tokenizer = fp();
  EXPECT_NE(with_tokenizer, base);
  ASSERT_TRUE(writeFileAtomic(model_ + "/tokenizer_config.json", "{}").isOk());
  EXPECT_NE(fp(), with_tokenizer);
}

TEST_F(ModelFingerprintTest, SmallWeightFilesAreHashedWhole) {
  const Digest base = fp();
  const std::string w = model_ + "/model.safetensors";
  const uint64_t size = fs::file_size(w);
  flipByte(w, size / 2 + 3);  // anywhere in the data section
  EXPECT_NE(fp(), base);
  flipByte(w, size / 2 + 3);
  EXPECT_EQ(fp(), base);
}

TEST_F(ModelFingerprintTest, LargeWeightFilesAreSampledCheaply) {
  ModelFingerprintOptions o;
  o.whole_data_limit = 64 << 10;  // treat the 7 MB fixture as "large"
  o.edge_bytes = 16 << 10;
  o.sample_windows = 8;
  o.window_bytes = 1024;
  const std::string w = model_ + "/model.safetensors";
  auto r = fingerprintModel(model_, o);
  ASSERT_TRUE(r.isOk());
  const uint64_t header = dataStart(w);
  const uint64_t config_bytes = fs::file_size(model_ + "/config.json");
  EXPECT_EQ(r->bytes_read, config_bytes + header + 2 * (16 << 10) + 8 * 1024);
  EXPECT_LT(r->bytes_read, fs::file_size(w) / 50);
  const Digest base = r->digest;
  EXPECT_NE(fp(), base);  // the sampling mode is part of the hash

  flipByte(w, header + 100);  // inside the first edge
  EXPECT_NE(fp(o), base);
  flipByte(w, header + 100);
  flipByte(w, fs::file_size(w) - 100);  // inside the last edge
  EXPECT_NE(fp(o), base);
  flipByte(w, fs::file_size(w) - 100);
  flipByte(w, 20);  // inside the header (a tensor name or shape)
  EXPECT_NE(fp(o), base);
  flipByte(w, 20);
  EXPECT_EQ(fp(o), base);
}

TEST_F(ModelFingerprintTest, ShardedCheckpointsFollowTheIndex) {
  const std::string w = model_ + "/model.safetensors";
  fs::rename(w, model_ + "/model-00001-of-00001.safetensors");
  ASSERT_TRUE(writeFileAtomic(model_ + "/model.safetensors.index.json",
                              R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})")
                  .isOk());
  auto r = fingerprintModel(model_);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->files.back(), "model-00001-of-00001.safetensors");
  ASSERT_TRUE(writeFileAtomic(model_ + "/model.safetensors.index.json", R"({"weight_map": {"a": "missing.safetensors"}})")
                  .isOk());
  EXPECT_EQ(fingerprintModel(model_).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(writeFileAtomic(model_ + "/model.safetensors.index.json", R"({"weight_map": {"a": "../x"}})").isOk());
  EXPECT_EQ(fingerprintModel(model_).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(fingerprintModel(dir_.path() + "/nothing").status().code(), StatusCode::kNotFound);
}

// Everything that changes the latents a hit returns is in the identity, so a
// switch of any of them makes every old block a miss (keys chain over it).
TEST(LatentIdentityTest, EverythingThatChangesTheLatentsSeparates) {
  const Digest m = sha256("m");
  engine::LatentLayout a;
  a.layers = 3;
  a.block_tokens = 8;
  a.kv_lora_rank = 64;
  a.latent_dim = 80;
  a.dtype = engine::LatentDType::kF32;
  engine::LatentLayout bf16 = a;
  bf16.dtype = engine::LatentDType::kBF16;
  engine::LatentLayout bigger_blocks = a;
  bigger_blocks.block_tokens = 16;
  lg::testing::FakeLatentPool pool(a, 1, "cpu-fp32");
  lg::testing::FakeLatentPool same(a, 1, "cpu-fp32");
  lg::testing::FakeLatentPool other_backend(a, 1, "cuda-bf16");
  lg::testing::FakeLatentPool bf16_pool(bf16, 1, "cpu-fp32");
  lg::testing::FakeLatentPool block16(bigger_blocks, 1, "cpu-fp32");
  const Digest base = latentIdentity(m, pool, StoredDType::kF32);
  EXPECT_EQ(base, latentIdentity(m, same, StoredDType::kF32));
  EXPECT_NE(base, latentIdentity(m, pool, StoredDType::kBF16));      // stored dtype
  EXPECT_NE(base, latentIdentity(m, pool, StoredDType::kInt8));
  EXPECT_NE(base, latentIdentity(m, other_backend, StoredDType::kF32));  // numerics class
  EXPECT_NE(base, latentIdentity(m, bf16_pool, StoredDType::kF32));      // pool dtype
  EXPECT_NE(base, latentIdentity(m, block16, StoredDType::kF32));        // geometry
  EXPECT_NE(base, latentIdentity(sha256("m2"), pool, StoredDType::kF32));  // checkpoint
  // (engine::kLatentFormatVersion is hashed the same way; it is a constant.)
}

}  // namespace
}  // namespace lg::cache

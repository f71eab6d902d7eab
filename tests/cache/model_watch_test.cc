// Weights that change under a running process: the fingerprint is taken
// from the bytes the engine mapped, a changed file is detected by identity
// (replaced, or written in place) at start and on a timer, and the prefix
// cache then stops serving under the old identity. Also what sampling can
// and cannot notice, against the full fingerprint. Real files, a real model.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "cache/model_fingerprint.h"
#include "cache/prefix_cache.h"
#include "engine/model/model.h"
#include "tests/cache/cache_test_util.h"

namespace lg::cache::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ModelWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/model";
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) {
      fs::copy_file(std::string(LG_FIXTURES_DIR) + "/tiny-v3/" + f, dir_ + "/" + f);
    }
    auto m = engine::Model::load(dir_);
    ASSERT_TRUE(m.isOk()) << m.status().toString();
    model_ = std::move(m).value();
  }
  // Writes a changed copy of the weights and renames it over the original,
  // as a deploy would: the process keeps the old inode mapped.
  void replaceWeights() {
    const std::string tmp = dir_ + "/model.safetensors.new";
    fs::copy_file(dir_ + "/model.safetensors", tmp);
    flipLastByte(tmp);
    fs::rename(tmp, dir_ + "/model.safetensors");
  }
  static void flipLastByte(const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }

  ScopedTempDir tmp_;
  std::string dir_;
  std::unique_ptr<engine::Model> model_;
};

TEST_F(ModelWatchTest, FingerprintOfTheMappedBytesEqualsTheFilesFingerprint) {
  auto from_model = fingerprintModel(*model_);
  auto from_dir = fingerprintModel(dir_);
  ASSERT_TRUE(from_model.isOk() && from_dir.isOk());
  EXPECT_EQ(from_model->digest, from_dir->digest);
  // Replaced after loading: the files now fingerprint differently, the
  // loaded model still as what it computes with.
  replaceWeights();
  EXPECT_NE(fingerprintModel(dir_)->digest, from_model->digest);
  EXPECT_EQ(fingerprintModel(*model_)->digest, from_model->digest);
}

TEST_F(ModelWatchTest, ReplacedOrModifiedFilesAreDetected) {
  EXPECT_TRUE(model_->checkFilesUnchanged().isOk());
  replaceWeights();
  Status s = model_->checkFilesUnchanged();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("model.safetensors was replaced"), std::string::npos) << s.message();

  // In place: same inode, new mtime (a rewrite of config.json).
  auto fresh = engine::Model::load(dir_);
  ASSERT_TRUE(fresh.isOk());
  EXPECT_TRUE((*fresh)->checkFilesUnchanged().isOk());
  std::this_thread::sleep_for(20ms);  // a distinct mtime even on coarse clocks
  { std::ofstream(dir_ + "/config.json", std::ios::app) << "\n"; }
  s = (*fresh)->checkFilesUnchanged();
  EXPECT_NE(s.message().find("config.json was modified in place"), std::string::npos) << s.message();
}

TEST_F(ModelWatchTest, TheCacheStopsServingOnceTheWeightsChange) {
  FakeLatentPool pool(smallLayout(16), 64);
  PrefixCacheOptions o;
  o.secret = testSecret();
  auto fp = fingerprintModel(*model_);
  ASSERT_TRUE(fp.isOk());
  auto cache = PrefixCache::create(pool, nullptr, latentIdentity(fp->digest, pool, o.stored_dtype), o);
  ASSERT_TRUE(cache.isOk());
  engine::Model& model = *model_;
  ASSERT_TRUE((*cache)->guardIdentity([&model] { return model.checkFilesUnchanged(); }, 10ms).isOk());
  const auto ids = tokens(4 * 16 + 1, 1);
  runRequest(**cache, pool, "t", ids);
  EXPECT_EQ(runRequest(**cache, pool, "t", ids).cached_tokens, 4 * 16);

  replaceWeights();
  for (int i = 0; i < 500 && !(*cache)->stale(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE((*cache)->stale()) << "the timer did not notice the replaced weights";
  const CacheStats s = (*cache)->snapshot();
  EXPECT_TRUE(s.identity_stale);
  EXPECT_NE(s.identity_error.find("replaced"), std::string::npos) << s.identity_error;
  EXPECT_EQ(s.tier0.blocks, 0u);  // the index was dropped
  // Nothing is served or kept under the old identity any more.
  RequestResult r = runRequest(**cache, pool, "t", ids);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(runRequest(**cache, pool, "t", ids).cached_tokens, 0);
  cache->reset();
  EXPECT_EQ(pool.allocator().numFree(), pool.allocator().capacity());
}

// Sampling reads a few hundred KB per file; an in-place edit outside the
// sample that keeps size and mtime is invisible to it, and to the identity
// check, but not to the full fingerprint (cache.fingerprint = full).
TEST_F(ModelWatchTest, SamplingMissesWhatTheFullFingerprintSees) {
  ModelFingerprintOptions sampled;
  sampled.whole_data_limit = 0;  // tiny-v3 would be hashed whole: force sampling
  sampled.edge_bytes = 64;
  sampled.sample_windows = 1;
  sampled.window_bytes = 64;
  ModelFingerprintOptions full;
  full.full = true;
  const Digest sampled_before = fingerprintModel(dir_, sampled)->digest;
  const Digest full_before = fingerprintModel(dir_, full)->digest;
  EXPECT_NE(sampled_before, full_before);  // the mode is part of what is hashed

  const std::string weights = dir_ + "/model.safetensors";
  struct stat before {};
  ASSERT_EQ(::stat(weights.c_str(), &before), 0);
  {
    // One byte in the middle of the data section, far from the edges and,
    // with one 64-byte window, almost surely outside the sample.
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(weights) / 2);
    f.seekg(middle);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(middle);
    f.write(&c, 1);
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, weights.c_str(), times, 0), 0);  // the mtime put back

  EXPECT_EQ(fingerprintModel(dir_, sampled)->digest, sampled_before);  // not noticed
  EXPECT_NE(fingerprintModel(dir_, full)->digest, full_before);        // noticed
}

}  // namespace
}  // namespace lg::cache::testing

// `latentgate forward --cache-dir` across processes (spawned binaries, real
// RocksDB): a fresh process reuses the whole blocks an earlier one stored,
// never the last token, with logits equal to the earlier run within 1e-5 and
// the golden within 1e-3; sharing only k blocks reuses exactly k; another
// namespace or model fingerprint reuses nothing.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "engine/model/safetensors.h"
#include "tests/engine/golden/golden_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace lg::cache::testing {
namespace {

namespace fs = std::filesystem;
using engine::testing::Golden;
using engine::testing::loadGolden;
using nlohmann::json;

constexpr int kBt = 16;  // the smallest block the configuration accepts

struct CliRun {
  json stats;
  std::vector<float> logits;
  int64_t first_computed = -1;  // safetensors metadata, -1 when absent
};

class CacheCliTest : public ::testing::Test {
 protected:
  CliRun forward(const std::string& model, const std::vector<int32_t>& ids, std::vector<std::string> extra,
                 std::vector<std::string> env = {"LATENTGATE_CACHE_RESTORE_POLICY=always"}) {
    CliRun run;
    const std::string ids_path = dir_.path() + "/ids.json";
    const std::string out = dir_.path() + "/out.safetensors";
    EXPECT_TRUE(writeFileAtomic(ids_path, json(ids).dump()).isOk());
    std::vector<std::string> argv = {test::latentgateBinary(), "forward", "--model", model, "--ids", ids_path,
                                     "--out", out, "--threads", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    env.push_back("LATENTGATE_CACHE_BLOCK_TOKENS=" + std::to_string(kBt));
    auto r = test::runProcess(argv, "", env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return run;
    run.stats = json::parse(r.out, nullptr, false);
    auto f = engine::SafetensorsFile::open(out);
    EXPECT_TRUE(f.isOk());
    if (!f.isOk()) return run;
    const engine::TensorInfo* t = f->find("logits");
    run.logits.resize(static_cast<size_t>(t->numel()));
    std::memcpy(run.logits.data(), f->data(*t), run.logits.size() * 4);
    if (auto it = f->metadata().find("first_computed_position"); it != f->metadata().end()) {
      run.first_computed = std::stoll(it->second);
    }
    return run;
  }
  std::vector<std::string> cacheFlags(const std::string& ns = "team") {
    return {"--cache-dir", dir_.path() + "/kv", "--namespace", ns};
  }

  test::TempDir dir_{"lg_cache_cli"};
};

TEST_F(CacheCliTest, FreshProcessReusesStoredBlocksOnEveryGoldenModel) {
  for (const char* fixture : {"tiny-v2", "tiny-v3", "tiny-v3-fp8"}) {
    SCOPED_TRACE(fixture);
    fs::remove_all(dir_.path() + "/kv");
    const Golden g = loadGolden(fixture);
    const std::string model = engine::testing::fixtureDir(fixture);
    const int64_t n = static_cast<int64_t>(g.ids.size());
    CliRun first = forward(model, g.ids, cacheFlags());
    ASSERT_FALSE(first.logits.empty());
    EXPECT_EQ(first.stats["cached_tokens"], 0);
    EXPECT_EQ(first.stats["computed_tokens"], n);
    EXPECT_EQ(first.stats["cache"]["stored_blocks"], n / kBt);
    EXPECT_EQ(first.first_computed, 0);

    CliRun second = forward(model, g.ids, cacheFlags());
    ASSERT_FALSE(second.logits.empty());
    const int64_t cached = (n - 1) / kBt * kBt;  // whole blocks, never the last token
    EXPECT_EQ(second.stats["cached_tokens"], cached);
    EXPECT_EQ(second.stats["computed_tokens"], n - cached);
    EXPECT_EQ(second.stats["cache"]["disk_hit_blocks"], cached / kBt);
    EXPECT_EQ(second.stats["cache"]["decision"], "restore");
    EXPECT_EQ(second.first_computed, cached);
    for (int64_t r = 0; r < cached; ++r) ASSERT_TRUE(std::isnan(second.logits[static_cast<size_t>(r * g.vocab)]));
    EXPECT_LE(engine::testing::maxAbsDiff(second.logits, first.logits, g.vocab, cached, n), 1e-5);
    EXPECT_LE(engine::testing::maxAbsDiff(second.logits, g.logits, g.vocab, cached, n), 1e-3);
  }
}

TEST_F(CacheCliTest, SharingTheFirstKBlocksReusesExactlyK) {
  const Golden g = loadGolden("tiny-v3");
  const std::string model = engine::testing::fixtureDir("tiny-v3");
  forward(model, g.ids, cacheFlags());
  for (int k : {1, 4, 7}) {
    std::vector<int32_t> ids(g.ids.begin(), g.ids.begin() + k * kBt);
    ids.push_back((g.ids[static_cast<size_t>(k * kBt)] + 1) % 2048);  // diverges in block k
    ids.insert(ids.end(), g.ids.begin() + k * kBt + 1, g.ids.begin() + (k + 3) * kBt);
    const int64_t n = static_cast<int64_t>(ids.size());
    CliRun cached = forward(model, ids, cacheFlags());
    EXPECT_EQ(cached.stats["cached_tokens"], k * kBt) << k;
    CliRun plain = forward(model, ids, {});
    EXPECT_FALSE(plain.stats.contains("cache"));
    EXPECT_LE(engine::testing::maxAbsDiff(cached.logits, plain.logits, g.vocab, k * kBt, n), 1e-5) << k;
  }
}

TEST_F(CacheCliTest, OtherNamespaceOrModelReusesNothing) {
  const Golden g = loadGolden("tiny-v3");
  const std::string model = engine::testing::fixtureDir("tiny-v3");
  forward(model, g.ids, cacheFlags("team-a"));
  EXPECT_EQ(forward(model, g.ids, cacheFlags("team-b")).stats["cached_tokens"], 0);
  // The same weights with a different config.json: another model fingerprint.
  const std::string copy = dir_.path() + "/model-copy";
  fs::create_directories(copy);
  fs::copy_file(model + "/model.safetensors", copy + "/model.safetensors");
  ASSERT_TRUE(writeFileAtomic(copy + "/config.json", *readFile(model + "/config.json") + "\n").isOk());
  CliRun other = forward(copy, g.ids, cacheFlags("team-a"));
  EXPECT_EQ(other.stats["cached_tokens"], 0);
  EXPECT_NE(other.stats["cache"]["model_fingerprint"],
            forward(model, g.ids, cacheFlags("team-a")).stats["cache"]["model_fingerprint"]);
  // And the original still hits.
  EXPECT_GT(forward(model, g.ids, cacheFlags("team-a")).stats["cached_tokens"], 0);
}

// A cache directory that cannot be a RocksDB store, or bad cache settings: a
// usage error (exit 2) naming the problem, no crash, no output written.
TEST_F(CacheCliTest, UnusableCacheDirOrSettingsAreUsageErrors) {
  const Golden g = loadGolden("tiny-v3");
  const std::string ids_path = dir_.path() + "/ids.json";
  const std::string out = dir_.path() + "/never.safetensors";
  ASSERT_TRUE(writeFileAtomic(ids_path, json(g.ids).dump()).isOk());
  const std::string not_a_dir = dir_.path() + "/plain-file";
  ASSERT_TRUE(writeFileAtomic(not_a_dir, "x").isOk());
  const std::vector<std::string> argv = {test::latentgateBinary(), "forward", "--model",
                                         engine::testing::fixtureDir("tiny-v3"), "--ids", ids_path, "--out", out};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = argv;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto r = test::runProcess(with({"--cache-dir", not_a_dir + "/kv"}), "");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.err.find("prefix cache"), std::string::npos) << r.err;
  r = test::runProcess(with({"--cache-dir", dir_.path() + "/kv"}), "", {"LATENTGATE_CACHE_STORED_DTYPE=fp4"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cache.stored_dtype"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// Stored blocks hold token ids verbatim: whatever `latentgate` creates for
// its store is private, even when started with a permissive umask (the
// process sets 077; the parents of --cache-dir show it, the store's files are
// also tightened by the disk tier itself).
TEST_F(CacheCliTest, TheStoreAndTheDirectoriesCreatedForItArePrivate) {
  const Golden g = loadGolden("tiny-v2");
  const std::string store = dir_.path() + "/data/cache/kv";
  const mode_t old = ::umask(022);  // inherited by the child
  CliRun run = forward(engine::testing::fixtureDir("tiny-v2"), g.ids, {"--cache-dir", store});
  ::umask(old);
  ASSERT_FALSE(run.logits.empty());
  auto mode = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(dir_.path() + "/data"), 0700u);
  EXPECT_EQ(mode(dir_.path() + "/data/cache"), 0700u);
  EXPECT_EQ(mode(store), 0700u);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(store)) {
    EXPECT_EQ(mode(e.path()), e.is_directory() ? 0700u : 0600u) << e.path();
    ++files;
  }
  EXPECT_GT(files, 3);
}

TEST_F(CacheCliTest, AutoPolicyReportsItsDecision) {
  const Golden g = loadGolden("tiny-v2");
  const std::string model = engine::testing::fixtureDir("tiny-v2");
  forward(model, g.ids, cacheFlags(), {});
  CliRun second = forward(model, g.ids, cacheFlags(), {});
  const json& c = second.stats["cache"];
  ASSERT_TRUE(c["decision"] == "restore" || c["decision"] == "recompute") << c.dump();
  EXPECT_TRUE(c["recompute_estimate_ms"].is_number());  // the first process measured its prefill
  EXPECT_GT(c["restore_estimate_ms"].get<double>(), 0.0);
  const bool restore = c["decision"] == "restore";
  EXPECT_EQ(restore, c["restore_estimate_ms"].get<double>() <= c["recompute_estimate_ms"].get<double>());
  EXPECT_EQ(second.stats["cached_tokens"].get<int64_t>() > 0, restore);
}

}  // namespace
}  // namespace lg::cache::testing

// The server's own prefix cache store, as `serve` opens it
// (cli::CacheUser::kServer):
//   - a default store that cannot be opened (its path is a file) degrades the
//     server to tier 0: it starts, serves, hits in memory, and /readyz says
//     "cache_disk": "degraded" while staying ready;
//   - a weight file changed under the running server (its mtime, as a copy
//     over it would) stops the cache within cache.identity_check_seconds: no
//     more hits, and /readyz is 503 with "model_files": "changed";
//   - Server-Timing's `cache` part measures the lookup.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cache/cache_config.h"
#include "tests/integration/harness.h"
#include "tests/support/temp_dir.h"

namespace lg {
namespace {

using nlohmann::json;

json chat(const std::string& user) {
  std::string system = "You are the release agent. ";
  for (int i = 0; i < 8; ++i) system += "Step " + std::to_string(i) + ": check the build, then the tests. ";
  return json{{"model", "demo"},
              {"messages",
               json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}})},
              {"max_tokens", 2},
              {"temperature", 0}};
}

int64_t cachedTokens(test::Harness& h, const std::string& key, const std::string& user) {
  const auto r = h.call("POST", "/v1/chat/completions", key, chat(user));
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

TEST(CacheStoreTest, ADefaultStoreThatCannotBeOpenedDegradesToTierZeroAndStaysReady) {
  test::TempDir data("lg_cache_store");
  test::HarnessOptions o;
  o.disk = true;
  o.data_dir = data.path();
  // The store's directory is a file: RocksDB cannot open it.
  const std::string store = cache::diskTierOptions([&] {
    Config c = o.config;
    c.data_dir = data.path();
    return c;
  }()).path;
  std::filesystem::create_directories(std::filesystem::path(store).parent_path());
  std::ofstream(store) << "not a directory";
  auto h = test::Harness::start(o);
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const auto ready = (*h)->call("GET", "/readyz", "");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(json::parse(ready.body)["cache_disk"], "degraded") << ready.body;
  EXPECT_EQ(json::parse(ready.body)["model_files"], "unchanged") << ready.body;

  const std::string key = (*h)->newKey("team-a");
  EXPECT_EQ(cachedTokens(**h, key, "Ship it."), 0);
  EXPECT_GT(cachedTokens(**h, key, "Ship it."), 0) << "tier 0 still serves";
  const auto metrics = (*h)->call("GET", "/metrics", (*h)->adminKey());
  EXPECT_NE(metrics.body.find("latentgate_cache_disk_state{state=\"degraded\"} 1"), std::string::npos);
}

// Server-Timing's `cache` is the lookup's own time: hashing the prompt's
// blocks and reading the index take microseconds, never nothing (it read 0
// when a lookup resolved within the scheduler step that started it).
TEST(CacheStoreTest, ServerTimingCountsTheLookup) {
  auto h = test::Harness::start();
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string key = (*h)->newKey("team-a");
  for (int i = 0; i < 2; ++i) {  // a miss, then a hit
    const auto r = (*h)->call("POST", "/v1/chat/completions", key, chat("Ship it."));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string timing = r.header("server-timing").value_or("");
    const size_t at = timing.find("cache;dur=");
    ASSERT_NE(at, std::string::npos) << timing;
    const double cache_ms = std::stod(timing.substr(at + std::string("cache;dur=").size()));
    const double total_ms = std::stod(timing.substr(timing.find("total;dur=") + std::string("total;dur=").size()));
    EXPECT_GT(cache_ms, 0) << timing;
    EXPECT_LE(cache_ms, total_ms) << timing;
  }
}

TEST(CacheStoreTest, WeightFilesChangedUnderTheServerStopTheCacheAndMakeItUnready) {
  test::HarnessOptions o;
  o.config.cache.identity_check_seconds = 1;
  auto h = test::Harness::start(o);
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string key = (*h)->newKey("team-a");
  EXPECT_EQ(cachedTokens(**h, key, "Ship it."), 0);
  EXPECT_GT(cachedTokens(**h, key, "Ship it."), 0);
  const auto before = (*h)->call("GET", "/readyz", "");
  EXPECT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(json::parse(before.body)["model_files"], "unchanged");

  // Another modification time on every weight file, as a copy over them would
  // leave (the content is the same: what is checked is the file's identity).
  size_t touched = 0;
  for (const auto& entry : std::filesystem::directory_iterator((*h)->config().engine.model_dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const timespec later[2] = {{0, UTIME_OMIT}, {std::time(nullptr) + 100, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, entry.path().c_str(), later, 0), 0);
    ++touched;
  }
  ASSERT_GT(touched, 0u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  proxy::testing::CurlReply after;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = (*h)->call("GET", "/readyz", "");
  } while (after.status == 200 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(after.status, 503) << after.body;
  const json body = json::parse(after.body);
  EXPECT_EQ(body["status"], "not_ready");
  EXPECT_EQ(body["model_files"], "changed");
  EXPECT_NE(body["reason"].get<std::string>().find("weight files changed"), std::string::npos) << after.body;
  EXPECT_TRUE((*h)->cache()->stale());
  EXPECT_EQ(cachedTokens(**h, key, "Ship it."), 0) << "no latents served once the weights may differ";
}

}  // namespace
}  // namespace lg

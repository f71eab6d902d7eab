// The serving core's metric families without a server: the scheduler's, the
// memory's and vLLM's names from a stats snapshot, read back by the strict parser of the
// Prometheus text (tests/support/prometheus_text.h); the memory picture with
// and without a disk tier. tests/cache/cache_metrics_test.cc has the cache's
// families, tests/proxy/metrics_server_test.cc scrapes them all from a real
// server.
#include "serving/serving_metrics.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/prometheus_text.h"

namespace lg::serving {
namespace {

using test::parsePrometheusText;
using test::PromText;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

SchedulerStats someStats() {
  SchedulerStats s;
  s.queued = 3;
  s.decoding = 2;
  s.pool_blocks = 100;
  s.pool_free_blocks = 60;
  s.running_blocks = 25;
  s.cached_blocks = 15;
  s.reserved_blocks = 7;
  s.finished[static_cast<size_t>(FinishReason::kLength)] = 9;
  s.refused[static_cast<size_t>(Refusal::kQueueFull)] = 4;
  s.prefill_tokens = 1000;
  s.decode_tokens = 50;
  s.step_seconds.observe(0.004);
  s.first_token_seconds.observe(0.2);
  return s;
}

TEST(ServingMetricsTest, SchedulerAndMemoryFamiliesAreWellFormedAndAddUp) {
  const SchedulerStats s = someStats();
  metrics::ExpositionWriter w;
  collectSchedulerStats(w, s);
  collectMemory(w, MemoryFacts{123456789, 4096}, s);
  EXPECT_EQ(w.dropped(), 0u);
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  for (const auto& [name, f] : p.families) {
    EXPECT_TRUE(name.starts_with("latentgate_")) << name;
    EXPECT_FALSE(f.help.empty()) << name;
  }
  EXPECT_EQ(p.value("latentgate_scheduler_requests", {{"state", "queued"}}), 3);
  EXPECT_EQ(p.value("latentgate_scheduler_finished_total", {{"reason", "length"}}), 9);
  EXPECT_EQ(p.value("latentgate_scheduler_refusals_total", {{"reason", "queue_full"}}), 4);
  EXPECT_FALSE(p.find("latentgate_scheduler_refusals_total", {{"reason", "none"}}).has_value());
  EXPECT_EQ(p.value("latentgate_scheduler_step_tokens_total", {{"kind", "prefill"}}), 1000);
  EXPECT_EQ(p.value("latentgate_scheduler_step_seconds_count"), 1);
  EXPECT_EQ(p.value("latentgate_scheduler_time_to_first_token_seconds_count"), 1);

  EXPECT_EQ(p.value("latentgate_model_weights_bytes"), 123456789);
  EXPECT_EQ(p.value("latentgate_latent_pool_capacity_bytes"), 100 * 4096);
  EXPECT_EQ(p.sum("latentgate_latent_pool_blocks"), p.value("latentgate_latent_pool_capacity_blocks"));
  EXPECT_EQ(p.sum("latentgate_latent_pool_bytes"), p.value("latentgate_latent_pool_capacity_bytes"));
  EXPECT_EQ(p.value("latentgate_latent_pool_bytes", {{"state", "running"}}), 25 * 4096);
  EXPECT_EQ(p.value("latentgate_latent_pool_bytes", {{"state", "cached"}}), 15 * 4096);
  EXPECT_EQ(p.value("latentgate_latent_pool_reserved_blocks"), 7);
}

TEST(ServingMetricsTest, VllmFamiliesSayWhatVllmsWouldForTheSameState) {
  SchedulerStats s = someStats();  // 3 queued, 2 decoding; 25 of 100 blocks running, 15 cached
  s.looking_up = 1;
  s.prefilling = 4;
  metrics::ExpositionWriter w;
  collectVllmFamilies(w, VllmFacts{"demo \"model\"", 64}, s);
  EXPECT_EQ(w.dropped(), 0u);
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  ASSERT_EQ(p.families.size(), 4u) << w.text();
  for (const auto& [name, f] : p.families) {
    EXPECT_TRUE(name.starts_with("vllm:")) << name;
    EXPECT_EQ(f.type, "gauge") << name;
  }
  // The model's id as the label (escaped in the text, read back whole).
  const std::map<std::string, std::string> labels = {{"model_name", "demo \"model\""}, {"engine", "0"}};
  EXPECT_EQ(p.find("vllm:num_requests_waiting", labels).value_or(-1), 3);
  EXPECT_EQ(p.find("vllm:num_requests_running", labels).value_or(-1), 1 + 4 + 2);
  // Blocks held by running sequences only: the 15 cached ones are evictable,
  // free to vLLM's way of counting.
  EXPECT_EQ(p.find("vllm:kv_cache_usage_perc", labels).value_or(-1), 0.25);
  EXPECT_EQ(
      p.find("vllm:cache_config_info", {{"block_size", "64"}, {"num_gpu_blocks", "100"}, {"engine", "0"}}).value_or(-1),
      1);

  // An empty pool (no capacity yet) reads 0, not NaN.
  metrics::ExpositionWriter empty;
  collectVllmFamilies(empty, VllmFacts{"demo", 16}, SchedulerStats{});
  EXPECT_EQ(parsePrometheusText(empty.text())
                .find("vllm:kv_cache_usage_perc", {{"model_name", "demo"}, {"engine", "0"}})
                .value_or(-1),
            0);
}

TEST(ServingMetricsTest, TheMemoryPictureTakesTheDiskTierFromTheCacheWhenThereIsOne) {
  const SchedulerStats s = someStats();
  const MemoryPicture none = memoryPicture(MemoryFacts{1000, 64}, s, nullptr);
  EXPECT_EQ(none.weights_bytes, 1000u);
  EXPECT_EQ(none.block_bytes, 64u);
  EXPECT_EQ(none.running_blocks + none.cached_blocks + none.free_blocks, none.capacity_blocks);
  EXPECT_EQ(none.reserved_blocks, 7);
  EXPECT_FALSE(none.has_disk_tier);

  cache::CacheStats c;
  EXPECT_FALSE(memoryPicture(MemoryFacts{}, s, &c).has_disk_tier);  // a cache without a disk tier
  c.disk_state = cache::DiskState::kUnwritable;
  c.disk.blocks = 12;
  c.disk.bytes = 1 << 20;
  c.disk_occupied_bytes = 3 << 20;
  const MemoryPicture disk = memoryPicture(MemoryFacts{}, s, &c);
  EXPECT_TRUE(disk.has_disk_tier);
  EXPECT_EQ(disk.disk_blocks, 12u);
  EXPECT_EQ(disk.disk_bytes, uint64_t{1} << 20);
  EXPECT_EQ(disk.disk_occupied_bytes, uint64_t{3} << 20);
  EXPECT_EQ(disk.disk_state, cache::DiskState::kUnwritable);
}

}  // namespace
}  // namespace lg::serving

// The prefix cache's metric families from a CacheStats snapshot, without a
// cache or a server, read back by the strict parser of the Prometheus text
// (tests/support/prometheus_text.h).
#include "cache/cache_metrics.h"

#include <string>

#include <gtest/gtest.h>

#include "tests/support/prometheus_text.h"

namespace lg::cache {
namespace {

using test::parsePrometheusText;
using test::PromText;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

TEST(CacheMetricsTest, FamiliesAreWellFormedAndCarryNoErrorText) {
  CacheStats c;
  c.tier0.hit_tokens = 640;
  c.disk.hit_tokens = 128;
  c.disk.bytes = 1 << 20;
  c.disk_occupied_bytes = 3 << 20;
  c.write_back_dropped_blocks = 2;
  c.rejected_blocks[1] = 5;
  c.disk_state = DiskState::kUnwritable;
  c.disk_error = "IO error: /srv/secret/path/kv/000123.sst: No space left on device";
  c.restore_seconds = 0.25;

  metrics::ExpositionWriter w;
  collectCacheStats(w, c);
  EXPECT_EQ(w.dropped(), 0u);
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  for (const auto& [name, f] : p.families) {
    EXPECT_TRUE(name.starts_with("latentgate_cache_")) << name;
    EXPECT_FALSE(f.help.empty()) << name;
  }
  EXPECT_EQ(p.value("latentgate_cache_hit_tokens_total", {{"tier", "tier0"}}), 640);
  EXPECT_EQ(p.value("latentgate_cache_hit_tokens_total", {{"tier", "disk"}}), 128);
  EXPECT_EQ(p.value("latentgate_cache_bytes", {{"tier", "disk"}}), 1 << 20);
  EXPECT_EQ(p.value("latentgate_cache_disk_occupied_bytes"), 3 << 20);
  EXPECT_EQ(p.value("latentgate_cache_write_back_blocks_total", {{"outcome", "dropped"}}), 2);
  EXPECT_EQ(p.sum("latentgate_cache_rejected_blocks_total"), 5);
  EXPECT_EQ(p.value("latentgate_cache_disk_state", {{"state", "unwritable"}}), 1);
  EXPECT_EQ(p.sum("latentgate_cache_disk_state"), 1);
  EXPECT_EQ(p.value("latentgate_cache_restore_seconds_total"), 0.25);
  // Error text (paths) never reaches a label or a value.
  EXPECT_EQ(w.text().find("/srv/secret"), std::string::npos);
}

TEST(CacheMetricsTest, MissRatioCurvesPerTierAndSizeFactor) {
  CacheStats c;
  metrics::ExpositionWriter none;
  collectCacheStats(none, c);
  EXPECT_EQ(none.text().find("latentgate_cache_mrc_"), std::string::npos);  // no curves kept: no families

  c.mrc_tier0.present = true;
  c.mrc_tier0.today_blocks = 2048;
  c.mrc_tier0.sampling_rate = 0.5;
  c.mrc_tier0.accesses = 1000;
  c.mrc_tier0.sampled_accesses = 480;
  c.mrc_tier0.samples = 120;
  c.mrc_tier0.memory_bytes = 30000;
  c.mrc_tier0.reliable_from_blocks = 1024;
  c.mrc_tier0.hit_ratio = {0.5, 0.8, 0.85, 0.9, 0.91};
  c.mrc_disk.present = true;
  c.mrc_disk.today_blocks = 1 << 20;
  c.mrc_disk.hit_ratio = {0.1, 0.2, 0.3, 0.4, 0.45};
  metrics::ExpositionWriter w;
  collectCacheStats(w, c);
  EXPECT_EQ(w.dropped(), 0u);
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  EXPECT_EQ(p.value("latentgate_cache_mrc_hit_ratio", {{"tier", "tier0"}, {"size_factor", "1"}}), 0.8);
  EXPECT_EQ(p.value("latentgate_cache_mrc_hit_ratio", {{"tier", "tier0"}, {"size_factor", "0.5"}}), 0.5);
  EXPECT_EQ(p.value("latentgate_cache_mrc_hit_ratio", {{"tier", "disk"}, {"size_factor", "8"}}), 0.45);
  EXPECT_EQ(p.value("latentgate_cache_mrc_size_blocks", {{"tier", "disk"}}), 1 << 20);
  EXPECT_EQ(p.value("latentgate_cache_mrc_sampling_rate", {{"tier", "tier0"}}), 0.5);
  EXPECT_EQ(p.value("latentgate_cache_mrc_accesses_total", {{"tier", "tier0"}}), 1000);
  EXPECT_EQ(p.value("latentgate_cache_mrc_sampled_accesses_total", {{"tier", "tier0"}}), 480);
  EXPECT_EQ(p.value("latentgate_cache_mrc_samples", {{"tier", "tier0"}}), 120);
  EXPECT_EQ(p.value("latentgate_cache_mrc_memory_bytes", {{"tier", "tier0"}}), 30000);
  EXPECT_EQ(p.value("latentgate_cache_mrc_reliable_from_blocks", {{"tier", "tier0"}}), 1024);
}

}  // namespace
}  // namespace lg::cache

// Chunked prefill keeps running streams moving: on the demo preset, while an
// 8,000-token prompt is prefilled in step-budget chunks, 8 running streams
// keep receiving tokens, and the largest gap between two tokens of a stream
// is about one step, far below the long prompt's whole prefill. Prints the
// measured figures (docs/benchmarks.md quotes them).
#include <algorithm>
#include <mutex>

#include <gtest/gtest.h>

#include "engine/model/presets.h"
#include "tests/serving/serving_test_util.h"
#include "tests/support/temp_dir.h"

namespace lg::serving::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kStreams = 8;
constexpr int32_t kLongPrompt = 8000;
constexpr int32_t kStepTokens = 256;

TEST(SchedulerInterleaveTest, LongPrefillDoesNotStallRunningStreams) {
  test::TempDir dir("lg_interleave");
  auto config = engine::presetConfig("demo");
  ASSERT_TRUE(config.isOk());
  ASSERT_TRUE(engine::writeRandomCheckpoint(*config, dir.path(), {}).isOk());
  auto model = engine::Model::load(dir.path());
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  engine::BackendOptions backend_options;
  backend_options.threads = 2;
  backend_options.block_tokens = 64;
  backend_options.num_blocks = 400;  // 25,600 tokens: the long prompt and the 8 streams
  backend_options.max_context = 16384;
  auto backend = engine::createCpuBackend(std::move(model).value(), backend_options);
  ASSERT_TRUE(backend.isOk()) << backend.status().toString();
  SchedulerOptions options;
  options.step_tokens = kStepTokens;
  options.max_running = 16;
  auto created = Scheduler::create(**backend, nullptr, tokenizer(), options);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  Scheduler& scheduler = **created;
  const int32_t vocab = (*backend)->config().vocab_size;

  // Token arrival times per stream, taken on the engine thread as events leave it.
  std::mutex mu;
  std::vector<std::vector<Clock::time_point>> arrivals(kStreams);
  std::vector<RequestHandle> streams;
  for (int i = 0; i < kStreams; ++i) {
    GenerationRequest r = greedy(randomIds(40, static_cast<uint32_t>(i + 1), vocab), 4000);
    Submission s = scheduler.submit(std::move(r), [&, i](StreamEvent&& e) {
      std::lock_guard lock(mu);
      for (size_t k = 0; k < e.token_ids.size(); ++k) arrivals[static_cast<size_t>(i)].push_back(Clock::now());
    });
    ASSERT_TRUE(s) << s.refused.message;
    streams.push_back(s.handle);
  }
  // Let every stream start.
  for (;;) {
    std::this_thread::sleep_for(5ms);
    std::lock_guard lock(mu);
    if (std::all_of(arrivals.begin(), arrivals.end(), [](const auto& a) { return a.size() >= 2; })) break;
  }
  Pending long_prompt;
  const Clock::time_point submitted = Clock::now();
  {
    Submission s = scheduler.submit(greedy(randomIds(kLongPrompt, 77, vocab), 2), long_prompt.queue->sink());
    ASSERT_TRUE(s) << s.refused.message;
    long_prompt.handle = s.handle;
  }
  const Collected c = long_prompt.collect();
  ASSERT_EQ(c.final.finish_reason, FinishReason::kLength) << c.final.message;
  const Clock::time_point first_token = submitted + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(c.final.timing.first_token));
  for (const RequestHandle& h : streams) h.cancel();
  scheduler.shutdown(60s);

  const double prefill_s = std::chrono::duration<double>(first_token - submitted).count();
  double max_gap = 0;
  size_t min_tokens = SIZE_MAX;
  for (const auto& a : arrivals) {
    size_t during = 0;
    for (size_t k = 1; k < a.size(); ++k) {
      if (a[k] <= submitted || a[k - 1] >= first_token) continue;
      ++during;
      max_gap = std::max(max_gap, std::chrono::duration<double>(a[k] - a[k - 1]).count());
    }
    min_tokens = std::min(min_tokens, during);
  }
  const SchedulerStats stats = scheduler.schedulerStats();
  std::printf("[ interleave ] %d-token prefill took %.2f s in steps of %d tokens; %d streams each got >= %zu tokens "
              "meanwhile; largest inter-token gap %.1f ms; step time p50 %.1f ms, max %.1f ms\n",
              kLongPrompt, prefill_s, kStepTokens, kStreams, min_tokens, max_gap * 1e3,
              stats.step_seconds.quantile(0.5) * 1e3, stats.step_seconds.max * 1e3);
  // The prompt took many steps; every stream kept producing throughout.
  const double steps = static_cast<double>(kLongPrompt) / (kStepTokens - kStreams);
  EXPECT_GE(static_cast<double>(min_tokens), steps * 0.5);
  // A gap is one step (plus scheduling noise on a shared machine): generously,
  // well under a quarter of the whole prefill, which a stalled stream would see.
  EXPECT_LT(max_gap, prefill_s / 4);
  EXPECT_LE(stats.step_batch_tokens.max, kStepTokens);
}

}  // namespace
}  // namespace lg::serving::testing

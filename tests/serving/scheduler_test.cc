// The scheduler on the fixture models (tiny-v2, tiny-v3, tiny-v3-fp8):
// batched streams give the tokens of the transformers golden and of the same
// request run alone; memory pressure preempts and evicts without changing a
// token or leaking a block; multi-turn hits; cancellation, refusals, stop
// strings and prompt log-probabilities.
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include <gtest/gtest.h>

#include "tests/engine/golden/golden_util.h"
#include "tests/serving/serving_test_util.h"

namespace lg::serving::testing {
namespace {

using namespace std::chrono_literals;
using engine::testing::Golden;
using engine::testing::loadGolden;

constexpr double kLogprobTolerance = 1e-4;

SchedulerOptions smallSteps(int32_t step_tokens = 32) {
  SchedulerOptions o;
  o.step_tokens = step_tokens;
  o.max_running = 16;
  o.output_reservation_tokens = 16;
  // The fixtures' eos id is an ordinary token of the goldens' greedy paths.
  o.eos_token_ids = {};
  return o;
}

std::unique_ptr<Scheduler> makeScheduler(engine::Backend& backend, cache::PrefixCache* cache,
                                         SchedulerOptions options) {
  auto s = Scheduler::create(backend, cache, tokenizer(), std::move(options));
  EXPECT_TRUE(s.isOk()) << s.status().toString();
  return s.isOk() ? std::move(s).value() : nullptr;
}

void expectSameStream(const Collected& batched, const Collected& alone, const std::string& what) {
  EXPECT_EQ(batched.tokens, alone.tokens) << what;
  EXPECT_EQ(batched.text, alone.text) << what;
  ASSERT_EQ(batched.logprobs.size(), alone.logprobs.size()) << what;
  for (size_t i = 0; i < batched.logprobs.size(); ++i) {
    EXPECT_NEAR(batched.logprobs[i].logprob, alone.logprobs[i].logprob, kLogprobTolerance) << what << " token " << i;
    ASSERT_EQ(batched.logprobs[i].top.size(), alone.logprobs[i].top.size());
    for (size_t k = 0; k < batched.logprobs[i].top.size(); ++k) {
      EXPECT_NEAR(batched.logprobs[i].top[k].logprob, alone.logprobs[i].top[k].logprob, kLogprobTolerance)
          << what << " token " << i << " alternative " << k;
    }
  }
}

class SchedulerGoldenTest : public ::testing::TestWithParam<std::string> {};

// 16 requests of different lengths, some sharing prefixes (the golden's own
// prompt at 8 lengths, and 8 random prompts, half of them over one common
// stem), submitted at once with a small step budget so that prefill chunks
// and decodes share steps: each gives the golden's greedy tokens where the
// golden knows them, and exactly what it gives alone, logprobs included.
// A seeded sampled request gives the same tokens alone and in the batch.
TEST_P(SchedulerGoldenTest, BatchedStreamsMatchTheGoldenAndRunningAlone) {
  const std::string name = GetParam();
  const Golden g = loadGolden(name);
  const auto n = static_cast<int32_t>(g.ids.size());
  const auto prompt_len = static_cast<int32_t>(g.prompt_len);
  ASSERT_GT(n - prompt_len, 4);

  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> expected;  // golden continuation, empty when unknown
  for (int32_t i = 0; i < 8; ++i) {
    const int32_t len = std::min(prompt_len + i, n - 1);
    GenerationRequest r = greedy({g.ids.begin(), g.ids.begin() + len}, n - len);
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 3;
    requests.push_back(r);
    expected.emplace_back(g.ids.begin() + len, g.ids.end());
  }
  const std::vector<int32_t> stem = randomIds(70, 99, static_cast<int32_t>(g.vocab));
  for (int32_t i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt = randomIds(static_cast<size_t>(5 + 11 * i), 100 + i, static_cast<int32_t>(g.vocab));
    if (i % 2 == 0) prompt.insert(prompt.begin(), stem.begin(), stem.end());
    GenerationRequest r = greedy(prompt, 8 + i);
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 3;
    requests.push_back(r);
    expected.emplace_back();
  }
  GenerationRequest seeded = greedy(randomIds(33, 7, static_cast<int32_t>(g.vocab)), 12);
  seeded.sampling.temperature = 0.9f;
  seeded.sampling.top_p = 0.95f;
  seeded.sampling.seed = 1234;
  requests.push_back(seeded);
  expected.emplace_back();

  // Alone: one at a time, no cache.
  auto alone_backend = fixtureBackend(name, /*block_tokens=*/16, /*num_blocks=*/256);
  ASSERT_NE(alone_backend, nullptr);
  std::vector<Collected> alone;
  {
    auto scheduler = makeScheduler(*alone_backend, nullptr, smallSteps());
    ASSERT_NE(scheduler, nullptr);
    for (const GenerationRequest& r : requests) alone.push_back(submitOrFail(*scheduler, r).collect());
  }
  // Together, with a prefix cache: shared prefixes are computed once.
  auto backend = fixtureBackend(name, 16, 256);
  ASSERT_NE(backend, nullptr);
  auto cache = tier0Cache(*backend);
  auto scheduler = makeScheduler(*backend, cache.get(), smallSteps());
  ASSERT_NE(scheduler, nullptr);
  std::vector<Pending> pending;
  for (const GenerationRequest& r : requests) pending.push_back(submitOrFail(*scheduler, r));
  for (size_t i = 0; i < pending.size(); ++i) {
    const Collected batched = pending[i].collect();
    const std::string what = name + " request " + std::to_string(i);
    EXPECT_EQ(batched.final.finish_reason, FinishReason::kLength) << what << ": " << batched.final.message;
    expectSameStream(batched, alone[i], what);
    if (!expected[i].empty()) {
      EXPECT_EQ(batched.tokens, expected[i]) << what << " against the golden";
    }
    EXPECT_EQ(batched.final.usage.completion_tokens, requests[i].sampling.max_tokens);
    EXPECT_EQ(batched.final.usage.prompt_tokens, static_cast<int32_t>(requests[i].prompt.size()));
    EXPECT_EQ(batched.final.usage.hitTokens() + batched.final.usage.miss_tokens, batched.final.usage.prompt_tokens);
  }
  const SchedulerStats stats = scheduler->schedulerStats();
  EXPECT_GT(stats.hit_tokens, 0u) << "shared prefixes were computed more than once";
  // Steps mixed decodes with prefill chunks, under the budget.
  EXPECT_GT(stats.decode_tokens, 0u);
  EXPECT_LE(stats.step_batch_tokens.max, 32.0);
  EXPECT_LT(stats.steps, stats.step_tokens);
  scheduler.reset();
  cache.reset();
  EXPECT_EQ(backend->blocks().numUsed(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SchedulerGoldenTest, ::testing::Values("tiny-v2", "tiny-v3", "tiny-v3-fp8"));

class SchedulerTest : public ::testing::Test {
 protected:
  void make(SchedulerOptions options = smallSteps(), int64_t num_blocks = 256, bool with_cache = true,
            int block_tokens = 16) {
    scheduler_.reset();
    cache_.reset();
    backend_ = fixtureBackend("tiny-v3", block_tokens, num_blocks);
    ASSERT_NE(backend_, nullptr);
    if (with_cache) cache_ = tier0Cache(*backend_);
    scheduler_ = makeScheduler(*backend_, cache_.get(), std::move(options));
    ASSERT_NE(scheduler_, nullptr);
  }
  void TearDown() override {
    scheduler_.reset();
    cache_.reset();
    if (backend_) {
      EXPECT_EQ(backend_->blocks().numUsed(), 0) << "leaked blocks";
    }
  }
  std::vector<int32_t> ids(size_t n, uint32_t seed) { return randomIds(n, seed, backend_->config().vocab_size); }

  std::unique_ptr<engine::Backend> backend_;
  std::unique_ptr<cache::PrefixCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
};

// Three times more requests than the pool holds at once: sequences outgrow
// their reservations, cached blocks are evicted, the youngest sequences are
// preempted and resumed, and every request still gets its tokens.
TEST_F(SchedulerTest, MemoryPressurePreemptsAndEvictsWithoutChangingATokenOrLeaking) {
  constexpr int kRequests = 12;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    // Pairs share a prompt stem, so the cache has something to keep.
    std::vector<int32_t> prompt = randomIds(40, 500 + i / 2, 2048);
    const std::vector<int32_t> tail = randomIds(static_cast<size_t>(3 + i), 600 + i, 2048);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    requests.push_back(greedy(prompt, 40));
  }
  // Alone, in a roomy pool.
  make(smallSteps(), 256, /*with_cache=*/false);
  std::vector<Collected> alone;
  for (const GenerationRequest& r : requests) alone.push_back(submitOrFail(*scheduler_, r).collect());
  // Together: each request needs 6 blocks of 16 by its end; 24 blocks hold 4.
  SchedulerOptions o = smallSteps();
  o.output_reservation_tokens = 4;
  make(o, /*num_blocks=*/24);
  std::vector<Pending> pending;
  for (const GenerationRequest& r : requests) pending.push_back(submitOrFail(*scheduler_, r));
  for (int i = 0; i < kRequests; ++i) {
    const Collected c = pending[static_cast<size_t>(i)].collect();
    EXPECT_EQ(c.final.finish_reason, FinishReason::kLength) << c.final.message;
    EXPECT_EQ(c.tokens, alone[static_cast<size_t>(i)].tokens) << "request " << i;
    EXPECT_EQ(c.text, alone[static_cast<size_t>(i)].text) << "request " << i;
  }
  const SchedulerStats s = scheduler_->schedulerStats();
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_GT(s.admitted, static_cast<uint64_t>(kRequests));  // preempted ones were admitted again
  const cache::CacheStats cs = cache_->snapshot();
  EXPECT_GT(cs.tier0.evicted_blocks, 0u);
  // Idle again: nothing running, every used block is the cache's and unpinned.
  EXPECT_EQ(s.running_blocks, 0);
  EXPECT_EQ(cs.tier0_pinned_blocks, 0u);
  EXPECT_EQ(cs.in_flight_blocks, 0u);
  EXPECT_EQ(backend_->blocks().numUsed(), static_cast<int32_t>(cs.tier0.blocks));
}

// The next turn resends the prompt and the reply: its hit covers every full
// block of both that the first turn computed.
TEST_F(SchedulerTest, SecondTurnHitsTheFirstTurnsPromptAndReply) {
  make();
  const std::vector<int32_t> prompt = ids(37, 1);
  const Collected first = submitOrFail(*scheduler_, greedy(prompt, 30)).collect();
  ASSERT_EQ(first.tokens.size(), 30u);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<int32_t> user = ids(9, 2);
  next.insert(next.end(), user.begin(), user.end());
  const Collected second = submitOrFail(*scheduler_, greedy(next, 4)).collect();
  // The first turn fed its prompt and all but its last sampled token.
  const int32_t computed = static_cast<int32_t>(prompt.size() + first.tokens.size()) - 1;
  EXPECT_EQ(second.final.usage.hitTokens(), computed / 16 * 16);
  EXPECT_GT(second.final.usage.hitTokens(), static_cast<int32_t>(prompt.size()));  // reply blocks too
  EXPECT_EQ(second.final.usage.hit_tokens_tier0, second.final.usage.hitTokens());
  EXPECT_EQ(second.final.usage.miss_tokens, static_cast<int32_t>(next.size()) - second.final.usage.hitTokens());
}

// Two requests with the same new prompt, submitted together: one computes
// the shared blocks, the other waits for them.
TEST_F(SchedulerTest, ConcurrentRequestsWithTheSameNewPrefixComputeItOnce) {
  make(smallSteps(16));
  const std::vector<int32_t> prompt = ids(200, 3);
  Pending a = submitOrFail(*scheduler_, greedy(prompt, 3));
  Pending b = submitOrFail(*scheduler_, greedy(prompt, 3));
  const Collected ca = a.collect();
  const Collected cb = b.collect();
  EXPECT_EQ(ca.tokens, cb.tokens);
  EXPECT_EQ(ca.final.usage.hitTokens() + cb.final.usage.hitTokens(), 192);  // 12 of the 13 blocks, once
  const SchedulerStats s = scheduler_->schedulerStats();
  EXPECT_EQ(s.prefill_tokens, 200u + 8u);  // one full prefill, plus the 8 tokens after the shared blocks
  EXPECT_GT(cache_->snapshot().in_flight_waits, 0u);
}

TEST_F(SchedulerTest, CancellationTakesEffectWithinAStepAndReleasesEverything) {
  make();
  Pending running = submitOrFail(*scheduler_, greedy(ids(50, 4), 500));
  // Wait until it streams, then cancel.
  std::optional<StreamEvent> e = running.queue->popFor(60s);
  ASSERT_TRUE(e.has_value());
  running.handle.cancel();
  const Collected c = running.collect();
  EXPECT_EQ(c.final.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(c.final.usage.completion_tokens, 500);
  EXPECT_EQ(scheduler_->schedulerStats().running_blocks, 0);
  EXPECT_EQ(cache_->snapshot().tier0_pinned_blocks, 0u);
  // A second cancel, after the final event, does nothing.
  running.handle.cancel();
}

TEST_F(SchedulerTest, BadInputIsRefusedBeforeAnyWorkEachWithItsOwnReason) {
  make();
  const int32_t vocab = backend_->config().vocab_size;
  const int32_t context = backend_->maxContext();
  struct Case {
    const char* name;
    std::function<void(GenerationRequest&)> mutate;
    Refusal expected;
  };
  const std::vector<Case> cases = {
      {"empty prompt", [](GenerationRequest& r) { r.prompt.clear(); }, Refusal::kEmptyPrompt},
      {"id too large", [&](GenerationRequest& r) { r.prompt[3] = vocab; }, Refusal::kTokenOutOfRange},
      {"negative id", [](GenerationRequest& r) { r.prompt[0] = -1; }, Refusal::kTokenOutOfRange},
      {"stop id too large", [&](GenerationRequest& r) { r.sampling.stop_token_ids = {vocab + 5}; },
       Refusal::kTokenOutOfRange},
      {"max_tokens 0", [](GenerationRequest& r) { r.sampling.max_tokens = 0; }, Refusal::kMaxTokens},
      {"max_tokens negative", [](GenerationRequest& r) { r.sampling.max_tokens = -3; }, Refusal::kMaxTokens},
      {"max_tokens huge", [](GenerationRequest& r) { r.sampling.max_tokens = std::numeric_limits<int32_t>::max(); },
       Refusal::kContextOverflow},
      {"negative temperature", [](GenerationRequest& r) { r.sampling.temperature = -0.5f; }, Refusal::kTemperature},
      {"NaN temperature", [](GenerationRequest& r) { r.sampling.temperature = std::nanf(""); }, Refusal::kTemperature},
      {"top_p 0", [](GenerationRequest& r) { r.sampling.top_p = 0; }, Refusal::kTopP},
      {"top_p above 1", [](GenerationRequest& r) { r.sampling.top_p = 1.5f; }, Refusal::kTopP},
      {"top_p NaN", [](GenerationRequest& r) { r.sampling.top_p = std::nanf(""); }, Refusal::kTopP},
      {"top_k negative", [](GenerationRequest& r) { r.sampling.top_k = -1; }, Refusal::kTopK},
      {"top_logprobs 21", [](GenerationRequest& r) { r.sampling.top_logprobs = 21; }, Refusal::kLogprobs},
      {"too many stops", [](GenerationRequest& r) { r.sampling.stop = {"a", "b", "c", "d", "e"}; },
       Refusal::kStopStrings},
      {"empty stop", [](GenerationRequest& r) { r.sampling.stop = {""}; }, Refusal::kStopStrings},
      {"prompt over the context",
       [&](GenerationRequest& r) { r.prompt = randomIds(static_cast<size_t>(context) + 1, 1, vocab); },
       Refusal::kContextOverflow},
  };
  for (const Case& c : cases) {
    GenerationRequest r = greedy(ids(20, 5), 8);
    c.mutate(r);
    bool called = false;
    Submission s = scheduler_->submit(r, [&](StreamEvent&&) { called = true; });
    EXPECT_EQ(s.refused.reason, c.expected) << c.name << ": " << s.refused.message;
    EXPECT_FALSE(s.refused.message.empty()) << c.name;
    EXPECT_FALSE(called) << c.name;
  }
  // The context overflow names both numbers.
  GenerationRequest r = greedy(ids(1000, 6), 100);
  Submission s = scheduler_->submit(r, nullptr);
  EXPECT_EQ(s.refused.reason, Refusal::kContextOverflow);
  EXPECT_NE(s.refused.message.find("1000"), std::string::npos) << s.refused.message;
  EXPECT_NE(s.refused.message.find(std::to_string(context)), std::string::npos) << s.refused.message;
  // max_tokens 0 is valid when only the prompt's log-probabilities are wanted.
  GenerationRequest score = greedy(ids(20, 7), 0);
  score.sampling.prompt_logprobs = true;
  EXPECT_TRUE(submitOrFail(*scheduler_, score).collect().final.finish_reason == FinishReason::kLength);
  const SchedulerStats stats = scheduler_->schedulerStats();
  EXPECT_EQ(stats.refused[static_cast<size_t>(Refusal::kTopP)], 3u);
  EXPECT_EQ(stats.refused[static_cast<size_t>(Refusal::kContextOverflow)], 3u);
  EXPECT_EQ(stats.admitted, 1u);  // only the scoring request did any work
}

TEST_F(SchedulerTest, FullQueueAndQueueTimeoutAreRefusedDistinctly) {
  SchedulerOptions o = smallSteps();
  o.max_running = 1;
  o.max_queued = 2;
  o.max_queue_wait = 50ms;  // the busy request streams for far longer
  make(o);
  Pending busy = submitOrFail(*scheduler_, greedy(ids(30, 8), 990));
  ASSERT_TRUE(busy.queue->popFor(60s).has_value());  // admitted and streaming
  Pending waiting = submitOrFail(*scheduler_, greedy(ids(30, 9), 4));
  Pending waiting2 = submitOrFail(*scheduler_, greedy(ids(30, 10), 4));
  Submission full = scheduler_->submit(greedy(ids(30, 11), 4), nullptr);
  EXPECT_EQ(full.refused.reason, Refusal::kQueueFull);
  EXPECT_TRUE(isOverload(full.refused.reason));
  const Collected timed_out = waiting.collect();
  EXPECT_EQ(timed_out.final.finish_reason, FinishReason::kRefused);
  EXPECT_EQ(timed_out.final.refusal, Refusal::kQueueTimeout);
  EXPECT_EQ(timed_out.final.usage.miss_tokens, 0);  // never admitted: nothing computed
  EXPECT_EQ(waiting2.collect().final.refusal, Refusal::kQueueTimeout);
  busy.handle.cancel();
  EXPECT_EQ(busy.collect().final.finish_reason, FinishReason::kCancelled);
}

// A group (a completions request's prompts, a chat request's choices) is
// admitted whole or not at all, as OpenAI and vLLM admit one request: more
// members than can ever run together, or one bad member, refuse it at once;
// it waits until every member fits, and times out together, so no member
// runs while another is refused.
TEST_F(SchedulerTest, AGroupIsAdmittedWholeOrNotAtAll) {
  SchedulerOptions o = smallSteps();
  o.max_running = 3;
  o.max_queue_wait = 50ms;  // the busy request below streams for far longer
  make(o);
  auto group = [&](int n, uint32_t seed, int32_t max_tokens, std::vector<Pending>& pending) {
    std::vector<GenerationRequest> requests;
    std::vector<EventSink> sinks;
    pending.clear();
    pending.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      requests.push_back(greedy(ids(20, seed + static_cast<uint32_t>(i)), max_tokens));
      sinks.push_back(pending[static_cast<size_t>(i)].queue->sink());
    }
    return scheduler_->submitGroup(std::move(requests), std::move(sinks));
  };
  std::vector<Pending> members;
  // Larger than max_running: it could never start whole.
  GroupSubmission too_many = group(4, 20, 4, members);
  EXPECT_EQ(too_many.refused.reason, Refusal::kTooManyChoices);
  EXPECT_NE(too_many.refused.message.find("at most 3"), std::string::npos) << too_many.refused.message;
  // One bad member refuses all of them.
  std::vector<GenerationRequest> bad;
  bad.push_back(greedy(ids(20, 30), 4));
  bad.push_back(greedy({backend_->config().vocab_size}, 4));
  std::vector<Pending> bad_pending(2);
  GroupSubmission refused = scheduler_->submitGroup(std::move(bad), {bad_pending[0].queue->sink(), bad_pending[1].queue->sink()});
  EXPECT_EQ(refused.refused.reason, Refusal::kTokenOutOfRange);
  EXPECT_TRUE(refused.handles.empty());
  EXPECT_EQ(scheduler_->schedulerStats().admitted, 0u);

  // One request holds one of the three slots; a group of three waits for it,
  // not starting two members meanwhile, and times out whole.
  Pending busy = submitOrFail(*scheduler_, greedy(ids(30, 40), 990));
  ASSERT_TRUE(busy.queue->popFor(60s).has_value());  // admitted and streaming
  GroupSubmission waiting = group(3, 50, 4, members);
  ASSERT_TRUE(waiting) << waiting.refused.message;
  for (Pending& m : members) {
    const Collected c = m.collect();
    EXPECT_EQ(c.final.finish_reason, FinishReason::kRefused);
    EXPECT_EQ(c.final.refusal, Refusal::kQueueTimeout);
    EXPECT_EQ(c.final.usage.completion_tokens, 0);  // no member ran
    EXPECT_TRUE(c.tokens.empty());
  }
  EXPECT_EQ(scheduler_->schedulerStats().admitted, 1u);
  // A group of two fits beside it: both run.
  GroupSubmission fits = group(2, 60, 4, members);
  ASSERT_TRUE(fits);
  for (Pending& m : members) EXPECT_EQ(m.collect().final.finish_reason, FinishReason::kLength);
  busy.handle.cancel();
  EXPECT_EQ(busy.collect().final.finish_reason, FinishReason::kCancelled);
  // Freed: a group of three now starts at once.
  GroupSubmission all = group(3, 70, 4, members);
  ASSERT_TRUE(all);
  for (Pending& m : members) EXPECT_EQ(m.collect().final.finish_reason, FinishReason::kLength);
}

// Stop strings end the text right before the match, also when it spans
// tokens; stop token ids end it without showing the token.
TEST_F(SchedulerTest, StopStringsAndStopTokensEndTheStream) {
  make();
  const std::vector<int32_t> prompt = ids(25, 12);
  const Collected free_run = submitOrFail(*scheduler_, greedy(prompt, 24)).collect();
  ASSERT_GE(free_run.tokens.size(), 10u);
  // A stop string that starts inside the 5th token's text and spans into the next.
  const std::string before = tokenizer().decode(std::span(free_run.tokens).first(4)).value();
  const std::string through = tokenizer().decode(std::span(free_run.tokens).first(7)).value();
  ASSERT_GT(through.size(), before.size() + 2);
  std::string stop = through.substr(before.size() + 1);
  GenerationRequest r = greedy(prompt, 24);
  r.sampling.stop = {stop};
  const Collected stopped = submitOrFail(*scheduler_, r).collect();
  EXPECT_EQ(stopped.final.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
  // A stop token id: the stream ends before it.
  GenerationRequest t = greedy(prompt, 24);
  t.sampling.stop_token_ids = {free_run.tokens[5]};
  const Collected by_token = submitOrFail(*scheduler_, t).collect();
  EXPECT_EQ(by_token.final.finish_reason, FinishReason::kStop);
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[5]);
  EXPECT_EQ(by_token.tokens, std::vector<int32_t>(free_run.tokens.begin(), first));
  EXPECT_EQ(by_token.final.usage.completion_tokens, static_cast<int32_t>(by_token.tokens.size()) + 1);
}

// A constraint that allows exactly one token per position: `tokens` in order,
// then the end. (The grammar engine's matchers are tested in tests/text/grammar.)
class SequenceConstraint : public TokenConstraint {
 public:
  explicit SequenceConstraint(std::vector<int32_t> tokens, bool must_end = true, int64_t spin_us = 0)
      : tokens_(std::move(tokens)), must_end_(must_end), spin_us_(spin_us) {}
  void fillAllowed(std::span<uint32_t> bitmask) override {
    std::fill(bitmask.begin(), bitmask.end(), 0u);
    if (spin_us_ > 0) {  // a grammar too slow for the step budget
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    if (at_ < tokens_.size()) bitmask[static_cast<size_t>(tokens_[at_]) / 32] |= 1u << (tokens_[at_] % 32);
  }
  bool accept(int32_t token) override {
    if (at_ >= tokens_.size() || token != tokens_[at_]) return false;
    ++at_;
    return true;
  }
  bool canEnd() const override { return at_ == tokens_.size(); }
  bool mustEnd() const override { return must_end_ && at_ == tokens_.size(); }

 private:
  std::vector<int32_t> tokens_;
  size_t at_ = 0;
  bool must_end_;
  int64_t spin_us_;
};

TEST_F(SchedulerTest, AConstraintDecidesEveryTokenAndEndsTheOutputInABatchWithFreeRequests) {
  SchedulerOptions options = smallSteps();
  options.eos_token_ids = {1};
  make(options);
  const std::vector<int32_t> prompt = ids(40, 21);
  const std::vector<int32_t> forced = {101, 7, 2000, 55, 101};
  const Collected free_alone = submitOrFail(*scheduler_, greedy(prompt, 12)).collect();

  GenerationRequest constrained = greedy(prompt, 12);
  constrained.sampling.temperature = 1.0f;  // sampled, not greedy: only the mask decides
  constrained.sampling.logprobs = true;
  constrained.sampling.constraint = [&] { return std::make_unique<SequenceConstraint>(forced); };
  Pending c = submitOrFail(*scheduler_, constrained);
  Pending f = submitOrFail(*scheduler_, greedy(prompt, 12));
  const Collected got = c.collect();
  const Collected free_batched = f.collect();
  EXPECT_EQ(got.tokens, forced);
  EXPECT_EQ(got.final.finish_reason, FinishReason::kStop);  // complete: ended without an EOS step
  EXPECT_EQ(got.final.usage.completion_tokens, 5);
  for (const SampledToken& t : got.logprobs) EXPECT_NEAR(t.logprob, 0.0f, 1e-6) << "the only allowed token";
  // The free request in the same steps is untouched by its neighbour's mask.
  EXPECT_EQ(free_batched.tokens, free_alone.tokens);

  // Cut by max_tokens before it is complete: "length", as OpenAI's.
  GenerationRequest cut = greedy(prompt, 3);
  cut.sampling.constraint = [&] { return std::make_unique<SequenceConstraint>(forced); };
  const Collected short_run = submitOrFail(*scheduler_, cut).collect();
  EXPECT_EQ(short_run.tokens, std::vector<int32_t>(forced.begin(), forced.begin() + 3));
  EXPECT_EQ(short_run.final.finish_reason, FinishReason::kLength);

  // Complete but open (an end is allowed, not forced): the next token may only be the EOS.
  GenerationRequest open = greedy(prompt, 12);
  open.sampling.constraint = [&] { return std::make_unique<SequenceConstraint>(forced, false); };
  const Collected ended = submitOrFail(*scheduler_, open).collect();
  EXPECT_EQ(ended.tokens, forced);
  EXPECT_EQ(ended.final.finish_reason, FinishReason::kStop);
  EXPECT_EQ(ended.final.usage.completion_tokens, 6);  // the hidden EOS counted
}

TEST_F(SchedulerTest, AConstraintSlowerThanTheStepBudgetFailsOnlyItsOwnRequest) {
  SchedulerOptions options = smallSteps();
  options.max_constraint_step = std::chrono::microseconds(2000);
  make(options);
  const std::vector<int32_t> prompt = ids(30, 22);
  GenerationRequest slow = greedy(prompt, 8);
  slow.sampling.constraint = [] { return std::make_unique<SequenceConstraint>(std::vector<int32_t>{5, 6, 7}, true, 10000); };
  Pending s = submitOrFail(*scheduler_, slow);
  Pending f = submitOrFail(*scheduler_, greedy(prompt, 8));
  const Collected failed = s.collect();
  const Collected fine = f.collect();
  EXPECT_EQ(failed.final.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.final.message.find("ms a step allows"), std::string::npos) << failed.final.message;
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_EQ(fine.final.finish_reason, FinishReason::kLength);
  EXPECT_EQ(fine.tokens.size(), 8u);
  EXPECT_GT(scheduler_->schedulerStats().constraint_mask_seconds.count, 0u);
}

// OpenAI echo with logprobs: every prompt token's log-probability, equal to
// the golden's log-softmax, also when the prompt is cached (hits are not
// used for such requests: their logits are needed).
TEST(SchedulerPromptLogprobsTest, PromptLogprobsMatchTheGolden) {
  const Golden g = loadGolden("tiny-v3");
  auto backend = fixtureBackend("tiny-v3", 16, 256);
  ASSERT_NE(backend, nullptr);
  auto cache = tier0Cache(*backend);
  auto scheduler = makeScheduler(*backend, cache.get(), smallSteps());
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int32_t> prompt(g.ids.begin(), g.ids.end());
  for (int round = 0; round < 2; ++round) {
    GenerationRequest r = greedy(prompt, 0);
    r.sampling.prompt_logprobs = true;
    r.sampling.top_logprobs = 2;
    const Collected c = submitOrFail(*scheduler, r).collect();
    ASSERT_EQ(c.prompt_logprobs.size(), prompt.size()) << "round " << round;
    EXPECT_FALSE(c.prompt_logprobs[0].logprob.has_value());
    EXPECT_EQ(c.final.usage.hitTokens(), 0);
    for (size_t p = 1; p < prompt.size(); ++p) {
      const float* row = g.logits.data() + (p - 1) * static_cast<size_t>(g.vocab);
      double mx = row[0], sum = 0;
      for (int64_t v = 0; v < g.vocab; ++v) mx = std::max(mx, double(row[v]));
      for (int64_t v = 0; v < g.vocab; ++v) sum += std::exp(double(row[v]) - mx);
      const double expected = row[prompt[p]] - mx - std::log(sum);
      ASSERT_TRUE(c.prompt_logprobs[p].logprob.has_value());
      EXPECT_NEAR(*c.prompt_logprobs[p].logprob, expected, 2e-3) << "position " << p;
      EXPECT_EQ(c.prompt_logprobs[p].top.size(), 2u);
    }
  }
  scheduler.reset();
  cache.reset();
  EXPECT_EQ(backend->blocks().numUsed(), 0);
}

}  // namespace
}  // namespace lg::serving::testing

// Helpers for the serving tests: a backend over a fixture model, an optional
// tier-0 prefix cache, the real DeepSeek-V3 tokenizer, and a collector that
// gathers one request's events until its final one.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/prefix_cache.h"
#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "serving/scheduler.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::serving::testing {

inline const text::Tokenizer& tokenizer() {
  static const std::unique_ptr<text::Tokenizer> t = [] {
    auto r = text::Tokenizer::loadFromDir(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer");
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return std::move(r).value();
  }();
  return *t;
}

inline std::unique_ptr<engine::Backend> fixtureBackend(const std::string& name, int block_tokens, int64_t num_blocks,
                                                       int threads = 2) {
  auto model = engine::Model::load(std::string(LG_FIXTURES_DIR) + "/" + name);
  EXPECT_TRUE(model.isOk()) << model.status().toString();
  if (!model.isOk()) return nullptr;
  engine::BackendOptions options;
  options.threads = threads;
  options.block_tokens = block_tokens;
  options.num_blocks = num_blocks;
  options.latent_dtype = engine::LatentDType::kF32;
  auto backend = engine::createCpuBackend(std::move(model).value(), options);
  EXPECT_TRUE(backend.isOk()) << backend.status().toString();
  return backend.isOk() ? std::move(backend).value() : nullptr;
}

// A tier-0 cache (no disk) over the backend's pool.
inline std::unique_ptr<cache::PrefixCache> tier0Cache(engine::Backend& backend) {
  cache::PrefixCacheOptions options;
  auto c = cache::PrefixCache::create(backend.latentPool(), nullptr, cache::sha256("serving test model"), options);
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return c.isOk() ? std::move(c).value() : nullptr;
}

inline cache::TeamNamespace team(std::string_view id = "team") { return cache::TeamNamespace::ofTeam(id).value(); }

// Everything one request streamed.
struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<SampledToken> logprobs;
  std::vector<PromptLogprob> prompt_logprobs;
  StreamEvent final;
  int events = 0;
};

// One request in flight: its handle and its event queue.
struct Pending {
  RequestHandle handle;
  std::unique_ptr<EventQueue> queue = std::make_unique<EventQueue>();

  Collected collect(std::chrono::seconds timeout = std::chrono::seconds(300)) {
    Collected c;
    for (;;) {
      std::optional<StreamEvent> e = queue->popFor(timeout);
      if (!e) {
        ADD_FAILURE() << "request " << handle.id() << ": no final event within " << timeout.count() << " s";
        return c;
      }
      ++c.events;
      c.text += e->text;
      c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
      c.logprobs.insert(c.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
      if (!e->prompt_logprobs.empty()) c.prompt_logprobs = e->prompt_logprobs;
      if (e->final) {
        c.final = std::move(*e);
        return c;
      }
    }
  }
};

inline Pending submitOrFail(Scheduler& scheduler, GenerationRequest request) {
  Pending p;
  Submission s = scheduler.submit(std::move(request), p.queue->sink());
  EXPECT_TRUE(s) << refusalName(s.refused.reason) << ": " << s.refused.message;
  p.handle = s.handle;
  return p;
}

inline GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens, std::string_view team_id = "team") {
  GenerationRequest r(team(team_id));
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

inline std::vector<int32_t> randomIds(size_t n, uint32_t seed, int32_t vocab) {
  std::vector<int32_t> v(n);
  uint32_t x = seed * 2654435761u + 7;
  for (auto& t : v) {
    x = x * 1103515245u + 12345u;
    t = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return v;
}

}  // namespace lg::serving::testing

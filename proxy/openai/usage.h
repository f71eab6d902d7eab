// Usage: one set of counters per response (summed over its choices), and the
// one builder of its JSON for all endpoints.
//
// Chat Completions and Completions (UsageStyle::kChat):
//   {"prompt_tokens", "completion_tokens", "total_tokens",
//    "prompt_tokens_details": {"cached_tokens"},
//    "completion_tokens_details": {"reasoning_tokens"},
//    "prompt_cache_hit_tokens", "prompt_cache_miss_tokens"}   (DeepSeek's; hit + miss = prompt)
// Responses (UsageStyle::kResponses):
//   {"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens"},
//    "output_tokens", "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}
// Both get "cost" when the cost hook returns an object (billing:
// {"currency", "input_cache_hit", "input_cache_miss", "output", "total"} as
// exact decimal strings, docs/openai-api.md, docs/billing.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "serving/events.h"

namespace lg::proxy::openai {

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;   // prompt tokens whose latent KV came from the cache (any tier)
  int64_t miss_tokens = 0;  // prompt tokens computed
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;  // of completion_tokens, those inside <think> (counted per event: approximate)

  void add(const serving::Usage& usage) {
    prompt_tokens += usage.prompt_tokens;
    hit_tokens += usage.hitTokens();
    miss_tokens += usage.miss_tokens;
    completion_tokens += usage.completion_tokens;
  }
  int64_t totalTokens() const { return prompt_tokens + completion_tokens; }
};

enum class UsageStyle : uint8_t { kChat, kResponses };

// THE COST HOOK. The generation call sets it on the responder (proxy/gateway/generation.h):
// called with the response's final counts when the responder builds the end
// of the response; the object it returns is added as usage.cost. The gateway
// sends that end only once the request's ledger entry is durable. Empty hook
// or nullopt: no cost field.
using UsageCostHook = std::function<std::optional<nlohmann::json>(const UsageCounts&)>;

nlohmann::json usageJson(const UsageCounts& usage, UsageStyle style, const UsageCostHook& cost = {});

}  // namespace lg::proxy::openai

#include "proxy/openai/usage.h"

namespace lg::proxy::openai {

using nlohmann::json;

json usageJson(const UsageCounts& u, UsageStyle style, const UsageCostHook& cost) {
  json out;
  if (style == UsageStyle::kResponses) {
    out = json{{"input_tokens", u.prompt_tokens},
               // cache_write_tokens: the prompt tokens this request computed, whose
               // latents the cache keeps for the next request (whole blocks of them).
               {"input_tokens_details", json{{"cached_tokens", u.hit_tokens}, {"cache_write_tokens", u.miss_tokens}}},
               {"output_tokens", u.completion_tokens},
               {"output_tokens_details", json{{"reasoning_tokens", u.reasoning_tokens}}},
               {"total_tokens", u.totalTokens()}};
  } else {
    out = json{{"prompt_tokens", u.prompt_tokens},
               {"completion_tokens", u.completion_tokens},
               {"total_tokens", u.totalTokens()},
               {"prompt_tokens_details", json{{"cached_tokens", u.hit_tokens}}},
               {"completion_tokens_details", json{{"reasoning_tokens", u.reasoning_tokens}}},
               {"prompt_cache_hit_tokens", u.hit_tokens},
               {"prompt_cache_miss_tokens", u.miss_tokens}};
  }
  if (cost) {
    if (std::optional<json> c = cost(u)) out["cost"] = std::move(*c);
  }
  return out;
}

}  // namespace lg::proxy::openai

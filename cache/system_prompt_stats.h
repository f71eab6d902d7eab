// SystemPromptStats: how often each system prompt is sent, per team, for
// analytics (which system prompts a team reuses, how many requests and prompt
// tokens each one brings). The text itself is never kept: entries are keyed by
// a fingerprint keyed with the installation secret (cache_secret.h), so
// whoever reads the fingerprints (a dashboard, a log, a metrics scrape) cannot
// confirm a guessed system prompt offline. The fingerprint never addresses
// cached data (a system prompt's blocks are found by their chain keys).
//
// Each team has its own table, so one team's traffic never shows up in, or
// is inherited by, another team's entries. Bounded per team: at most
// `capacity_per_team` fingerprints. A new fingerprint that arrives when the
// team's table is full replaces that team's least used one and inherits its
// count plus one (the Space-Saving rule), so the most used prompts are kept
// and no count is ever lower than the truth; `overestimate` bounds the error.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/cache_secret.h"
#include "cache/fingerprint.h"
#include "cache/namespace.h"

namespace lg::cache {

struct SystemPromptUse {
  Digest fingerprint;
  uint64_t requests = 0;       // may exceed the truth by at most `overestimate`
  uint64_t overestimate = 0;   // 0 unless this entry replaced an evicted one
  uint64_t prompt_tokens = 0;  // tokens of the requests counted here (same caveat)
};

class SystemPromptStats {
 public:
  SystemPromptStats(std::shared_ptr<const CacheSecret> secret, const Digest& model, size_t capacity_per_team = 1024);

  // One request of `team` whose system prompt is `system_text`, with
  // `prompt_tokens` tokens in the whole prompt.
  void record(const TeamNamespace& team, std::string_view system_text, uint64_t prompt_tokens);

  // The team's `n` most used system prompts, most requests first.
  std::vector<SystemPromptUse> top(const TeamNamespace& team, size_t n) const;
  size_t tracked(const TeamNamespace& team) const;

  // The fingerprint `record` files a prompt under (keyed, per team and model).
  Digest fingerprint(const TeamNamespace& team, std::string_view system_text) const;

 private:
  using Table = std::unordered_map<Digest, SystemPromptUse, DigestHash>;

  const std::shared_ptr<const CacheSecret> secret_;
  const Digest model_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Table> teams_;  // guarded by mu_: by team namespace key
};

}  // namespace lg::cache

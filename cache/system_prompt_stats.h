// SystemPromptStats: how often each system prompt is sent, per namespace, for
// analytics (which system prompts a team reuses, how many requests and prompt
// tokens each one brings). Entries are keyed by systemPromptFingerprint(), so
// the text itself is never kept, and the fingerprint never addresses cached
// data (a system prompt's blocks are found by their chain keys like any other).
//
// Bounded: at most `capacity` fingerprints are tracked. A new fingerprint that
// arrives when the table is full replaces the least used one and inherits its
// count plus one (the Space-Saving rule), so the most used prompts are kept
// and no count is ever lower than the truth; `overestimate` bounds the error.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/fingerprint.h"

namespace lg::cache {

struct SystemPromptUse {
  Digest fingerprint;
  std::string ns;
  uint64_t requests = 0;       // may exceed the truth by at most `overestimate`
  uint64_t overestimate = 0;   // 0 unless this entry replaced an evicted one
  uint64_t prompt_tokens = 0;  // tokens of the requests counted here (same caveat)
};

class SystemPromptStats {
 public:
  explicit SystemPromptStats(const Digest& model, size_t capacity = 4096);

  // One request in `ns` whose system prompt is `system_text`, with
  // `prompt_tokens` tokens in the whole prompt.
  void record(std::string_view ns, std::string_view system_text, uint64_t prompt_tokens);

  // The `n` most used system prompts, most requests first.
  std::vector<SystemPromptUse> top(size_t n) const;
  size_t tracked() const;

 private:
  const Digest model_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<Digest, SystemPromptUse, DigestHash> uses_;  // guarded by mu_
};

}  // namespace lg::cache

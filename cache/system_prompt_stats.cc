#include "cache/system_prompt_stats.h"

#include <algorithm>

namespace lg::cache {

SystemPromptStats::SystemPromptStats(const Digest& model, size_t capacity)
    : model_(model), capacity_(std::max<size_t>(capacity, 1)) {}

void SystemPromptStats::record(std::string_view ns, std::string_view system_text, uint64_t prompt_tokens) {
  const Digest fp = systemPromptFingerprint(ns, model_, system_text);  // hashed outside the lock
  std::lock_guard lock(mu_);
  auto it = uses_.find(fp);
  if (it == uses_.end()) {
    SystemPromptUse use{fp, std::string(ns), 0, 0, 0};
    if (uses_.size() >= capacity_) {
      // Space-Saving: the newcomer takes the least used entry's place and count.
      auto least = std::min_element(uses_.begin(), uses_.end(),
                                    [](const auto& a, const auto& b) { return a.second.requests < b.second.requests; });
      use.requests = use.overestimate = least->second.requests;
      use.prompt_tokens = least->second.prompt_tokens;
      uses_.erase(least);
    }
    it = uses_.emplace(fp, std::move(use)).first;
  }
  ++it->second.requests;
  it->second.prompt_tokens += prompt_tokens;
}

std::vector<SystemPromptUse> SystemPromptStats::top(size_t n) const {
  std::vector<SystemPromptUse> out;
  {
    std::lock_guard lock(mu_);
    out.reserve(uses_.size());
    for (const auto& [fp, use] : uses_) out.push_back(use);
  }
  const size_t k = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(k), out.end(),
                    [](const SystemPromptUse& a, const SystemPromptUse& b) { return a.requests > b.requests; });
  out.resize(k);
  return out;
}

size_t SystemPromptStats::tracked() const {
  std::lock_guard lock(mu_);
  return uses_.size();
}

}  // namespace lg::cache

#include "cache/system_prompt_stats.h"

#include <algorithm>

#include "common/check.h"

namespace lg::cache {

SystemPromptStats::SystemPromptStats(std::shared_ptr<const CacheSecret> secret, const Digest& model,
                                     size_t capacity_per_team)
    : secret_(std::move(secret)), model_(model), capacity_(std::max<size_t>(capacity_per_team, 1)) {
  LG_CHECK(secret_ != nullptr, "SystemPromptStats needs the cache secret: unkeyed fingerprints can be confirmed offline");
}

Digest SystemPromptStats::fingerprint(const TeamNamespace& team, std::string_view system_text) const {
  // Length-delimited fields under one key: (team, model, text).
  std::string data;
  data.reserve(team.key().size() + system_text.size() + 48);
  const auto put = [&](std::string_view field) {
    const uint64_t n = field.size();
    for (int i = 0; i < 8; ++i) data.push_back(static_cast<char>(n >> (8 * i)));
    data.append(field);
  };
  put(team.key());
  put(model_.view());
  put(system_text);
  return secret_->keyedDigest("latentgate/system-prompt/v2", data);
}

void SystemPromptStats::record(const TeamNamespace& team, std::string_view system_text, uint64_t prompt_tokens) {
  const Digest fp = fingerprint(team, system_text);  // hashed outside the lock
  std::lock_guard lock(mu_);
  Table& uses = teams_[team.key()];
  auto it = uses.find(fp);
  if (it == uses.end()) {
    SystemPromptUse use{fp, 0, 0, 0};
    if (uses.size() >= capacity_) {
      // Space-Saving, within this team: the newcomer takes the least used
      // entry's place and count.
      auto least = std::min_element(uses.begin(), uses.end(),
                                    [](const auto& a, const auto& b) { return a.second.requests < b.second.requests; });
      use.requests = use.overestimate = least->second.requests;
      use.prompt_tokens = least->second.prompt_tokens;
      uses.erase(least);
    }
    it = uses.emplace(fp, use).first;
  }
  ++it->second.requests;
  it->second.prompt_tokens += prompt_tokens;
}

std::vector<SystemPromptUse> SystemPromptStats::top(const TeamNamespace& team, size_t n) const {
  std::vector<SystemPromptUse> out;
  {
    std::lock_guard lock(mu_);
    auto t = teams_.find(team.key());
    if (t == teams_.end()) return out;
    out.reserve(t->second.size());
    for (const auto& [fp, use] : t->second) out.push_back(use);
  }
  const size_t k = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(k), out.end(),
                    [](const SystemPromptUse& a, const SystemPromptUse& b) { return a.requests > b.requests; });
  out.resize(k);
  return out;
}

size_t SystemPromptStats::tracked(const TeamNamespace& team) const {
  std::lock_guard lock(mu_);
  auto t = teams_.find(team.key());
  return t == teams_.end() ? 0 : t->second.size();
}

}  // namespace lg::cache

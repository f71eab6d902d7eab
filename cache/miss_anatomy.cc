#include "cache/miss_anatomy.h"

#include <chrono>

namespace lg::cache {

int64_t steadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view blockMissName(BlockMiss cause) {
  switch (cause) {
    case BlockMiss::kNew: return "new";
    case BlockMiss::kEvicted: return "evicted";
    case BlockMiss::kModelChanged: return "model_changed";
    case BlockMiss::kInFlight: return "in_flight";
    case BlockMiss::kRecomputed: return "recomputed";
    case BlockMiss::kCount: break;
  }
  return "?";
}

std::string_view blockTierName(BlockTier tier) { return tier == BlockTier::kPool ? "pool" : "disk"; }

void EvictedBlocks::record(const Digest& key, BlockTier tier, int64_t now_ms) {
  if (capacity_ == 0) return;
  const uint64_t k = shortKey(key);
  std::lock_guard lock(mu_);
  const uint64_t seq = next_seq_++;
  slots_[k] = Slot{Eviction{tier, now_ms}, seq};
  order_.emplace_back(k, seq);
  // A key evicted again leaves its older place in order_ behind: those are
  // skipped, and dropped, as the front reaches them.
  while (slots_.size() > capacity_ || order_.size() > 2 * capacity_) {
    const auto [old_key, old_seq] = order_.front();
    order_.pop_front();
    auto it = slots_.find(old_key);
    if (it != slots_.end() && it->second.seq == old_seq) slots_.erase(it);
  }
}

std::optional<EvictedBlocks::Eviction> EvictedBlocks::find(const Digest& key) const {
  if (capacity_ == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = slots_.find(shortKey(key));
  if (it == slots_.end()) return std::nullopt;
  return it->second.eviction;
}

size_t EvictedBlocks::size() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

}  // namespace lg::cache

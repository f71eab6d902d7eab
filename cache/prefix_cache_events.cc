// Part of PrefixCache (prefix_cache.h): what routers hear of the cache's
// blocks (block_events.h). Blocks are reported as they enter and leave tier 0
// (insertReadyLocked, eraseLocked) and the disk tier (the writer and
// DiskTier); this file sets the sink and re-announces what tier 0 holds.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {

void PrefixCache::setBlockEvents(BlockEventSink* sink) {
  std::lock_guard lock(mu_);
  events_.store(sink, std::memory_order_release);
  if (disk_ != nullptr) disk_->setBlockEvents(sink);
}

size_t PrefixCache::announceResident() {
  std::lock_guard lock(mu_);  // no block comes or goes meanwhile: nothing is announced after its removal
  BlockEventSink* events = events_.load(std::memory_order_acquire);
  if (events == nullptr) return 0;
  // Each ready block's depth along its parents inside tier 0 (a parent that is
  // not in tier 0 ends the walk: the block is a root here), so that a
  // subscriber hears of a parent before its children, as routers require.
  std::unordered_map<Digest, uint32_t, DigestHash> depth;
  depth.reserve(index_.size());
  std::vector<const Digest*> path;
  auto depthOf = [&](const Digest& start) {
    if (auto known = depth.find(start); known != depth.end()) return known->second;
    path.clear();
    uint32_t base = 0;
    const Digest* cur = &start;
    for (;;) {
      if (cur != &start) {
        if (auto known = depth.find(*cur); known != depth.end()) {
          base = known->second + 1;
          break;
        }
      }
      auto it = index_.find(*cur);
      if (it == index_.end() || it->second.state != State::kReady) break;
      path.push_back(&it->first);
      if (!it->second.has_parent) break;
      cur = &it->second.parent;
    }
    // path: start, its parent, ...; the last one sits at `base`.
    for (size_t i = 0; i < path.size(); ++i) depth[*path[i]] = base + static_cast<uint32_t>(path.size() - 1 - i);
    return depth[start];
  };
  std::vector<std::pair<uint32_t, const Digest*>> order;
  order.reserve(index_.size());
  for (const auto& [key, e] : index_) {
    if (e.state == State::kReady) order.emplace_back(depthOf(key), &key);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [d, key] : order) {
    const Entry& e = index_.at(*key);
    events->blockStored(BlockTier::kPool, *key, e.has_parent ? &e.parent : nullptr, e.ids);
  }
  return order.size();
}

}  // namespace lg::cache

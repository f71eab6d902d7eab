// Part of PrefixCache (prefix_cache.h): what routers hear of the cache's
// blocks (block_events.h). Blocks are reported as they enter and leave tier 0
// (insertReadyLocked, eraseLocked) and the disk tier (the writer and
// DiskTier); this file sets the sink and re-announces what tier 0 holds.
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {

void PrefixCache::setBlockEvents(BlockEventSink* sink) {
  std::lock_guard lock(mu_);
  // The disk tier reports to disk_reports_, which passes reports on to events_.
  events_.store(sink, std::memory_order_release);
}

size_t PrefixCache::announceResident() {
  std::lock_guard lock(mu_);  // no block comes or goes meanwhile: nothing is announced after its removal
  BlockEventSink* events = events_.load(std::memory_order_acquire);
  if (events == nullptr) return 0;
  // Chain by chain, depth first from each root (a block whose parent is not
  // in tier 0), so that a subscriber hears of a parent before its children,
  // as routers require, and a chain's blocks go out one after the other (the
  // publisher merges them into one BlockStored).
  std::unordered_map<Digest, std::vector<const Digest*>, DigestHash> children;
  std::vector<const Digest*> stack;
  for (const auto& [key, e] : index_) {
    if (e.state != State::kReady) continue;
    auto parent = e.has_parent ? index_.find(e.parent) : index_.end();
    if (parent != index_.end() && parent->second.state == State::kReady) {
      children[e.parent].push_back(&key);
    } else {
      stack.push_back(&key);
    }
  }
  size_t told = 0;
  while (!stack.empty()) {
    const Digest* key = stack.back();
    stack.pop_back();
    const Entry& e = index_.at(*key);
    events->blockStored(BlockTier::kPool, *key, e.has_parent ? &e.parent : nullptr, e.ids);
    ++told;
    if (auto it = children.find(*key); it != children.end()) stack.insert(stack.end(), it->second.begin(), it->second.end());
  }
  return told;
}

}  // namespace lg::cache

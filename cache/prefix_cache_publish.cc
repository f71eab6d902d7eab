// Part of PrefixCache (prefix_cache.h): publishing what a request computed.
// The lease's publish() and extend() (generated tokens), indexing newly
// filled full blocks (turning the lease's claims into blocks, which resumes
// their waiters), and writing blocks through to disk while a request still
// holds them.
#include "cache/prefix_cache.h"

#include <algorithm>
#include <limits>

#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

using engine::BlockId;

}  // namespace

Status PrefixLease::publish(std::span<const BlockId> blocks, int32_t filled_len) {
  if (cache_ == nullptr || state_ == nullptr) return invalidArgument("publish: the lease is empty");
  if (!ready()) return invalidArgument("publish: the lease is still pending");
  LeaseState& s = *state_;
  if (filled_len < 0) return invalidArgument("publish: negative filled length " + std::to_string(filled_len));
  const int64_t full = std::min<int64_t>(filled_len, static_cast<int64_t>(s.ids.size())) / s.block_tokens;
  if (static_cast<int64_t>(blocks.size()) < full) {
    return invalidArgument("publish: " + std::to_string(blocks.size()) + " blocks cannot hold " +
                           std::to_string(filled_len) + " positions");
  }
  for (int64_t j = s.published_upto; j < full; ++j) {
    if (!cache_->allocator_.isLive(blocks[static_cast<size_t>(j)])) {
      return invalidArgument("publish: block " + std::to_string(blocks[static_cast<size_t>(j)]) + " is not allocated");
    }
  }
  cache_->publish(s, blocks, static_cast<int32_t>(full) * s.block_tokens);
  return Status::ok();
}

Status PrefixLease::extend(std::span<const int32_t> generated) {
  if (cache_ == nullptr || state_ == nullptr) return invalidArgument("extend: the lease is empty");
  if (!ready()) return invalidArgument("extend: the lease is still pending");
  LeaseState& s = *state_;
  s.ids.insert(s.ids.end(), generated.begin(), generated.end());
  // Chain the keys of the blocks that are now full (the same keys a later
  // lookup of these ids computes with chainBlockKeys).
  const size_t full = s.ids.size() / static_cast<size_t>(s.block_tokens);
  while (s.keys.size() < full) {
    const size_t j = s.keys.size();
    const Digest previous = j == 0 ? Digest{} : s.keys.back();
    s.keys.push_back(blockKey(s.ns, cache_->model_, previous,
                              std::span<const int32_t>(s.ids).subspan(j * s.block_tokens, s.block_tokens)));
  }
  return Status::ok();
}

void PrefixCache::publish(LeaseState& s, std::span<const BlockId> blocks, int32_t filled_len) {
  const int32_t bt = block_tokens_;
  const int32_t n = std::min(filled_len / bt, static_cast<int32_t>(s.keys.size()));
  if (n <= s.published_upto || stale()) return;
  const bool through_now = writer_ != nullptr && options_.write_through_hits == 0;
  std::vector<Victim> write_through;
  std::vector<Victim> victims;
  {
    std::lock_guard lock(mu_);
    for (int32_t j = s.published_upto; j < n; ++j) {
      const Digest& key = s.keys[static_cast<size_t>(j)];
      const BlockId block = blocks[static_cast<size_t>(j)];
      const Digest* parent = j == 0 ? nullptr : &s.keys[static_cast<size_t>(j - 1)];
      auto it = index_.find(key);
      if (it == index_.end()) {
        Entry e;
        e.ids = s.blockIds(j);
        e.ns_tag = s.ns_tag;
        it = index_.emplace(key, std::move(e)).first;
        insertReadyLocked(key, it->second, block, parent);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else if (it->second.state == State::kInFlight && it->second.owner == s.id) {
        insertReadyLocked(key, it->second, block, parent);
        std::erase(s.claimed, j);
        counters_->published.fetch_add(1, std::memory_order_relaxed);
      } else {
        continue;  // already indexed, or claimed by another request that will publish it
      }
      if (through_now) {
        it->second.on_disk = true;
        write_through.push_back(victimOf(key, it->second, true));
      }
    }
    for (int32_t k = n - 1; k >= 0; --k) {
      auto it = index_.find(s.keys[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    s.published_upto = n;
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
  }
  writeThrough(write_through);  // the request still holds these blocks
  finishEviction(victims);
}

void PrefixCache::writeThrough(const std::vector<Victim>& blocks) {
  if (stale()) return;
  for (const Victim& v : blocks) {
    WriteBackItem item = Victim(v).item(block_bytes_);
    const bool exported = pool_.exportBlocks(std::span(&v.block, 1), item.latents).isOk();
    if (!exported) counters_->export_errors.fetch_add(1, std::memory_order_relaxed);
    if (exported && writer_->tryPush(std::move(item))) {
      counters_->write_through.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    std::lock_guard lock(mu_);  // not written after all: let eviction write it back
    auto it = index_.find(v.key);
    if (it != index_.end() && it->second.state == State::kReady && it->second.block == v.block) {
      it->second.on_disk = false;
    }
  }
}

}  // namespace lg::cache

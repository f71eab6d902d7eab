// Part of PrefixCache (prefix_cache.h): why lookups miss (miss_anatomy.h).
// The classification of a finished lookup's missed blocks, the evictions the
// disk tier reports, and the identities the disk tier had before.
#include "cache/prefix_cache.h"

#include <algorithm>
#include <string>

#include "cache/cache_log.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

// The disk tier's record of the latent identities it was written under,
// newest first, 32 bytes each.
constexpr std::string_view kIdentitiesMeta = "latent-identities";
// How many earlier identities are kept (and their chains hashed on a miss
// that reads as new).
constexpr size_t kPriorIdentities = 2;

}  // namespace

void PrefixCache::DiskReports::blockStored(BlockTier tier, const Digest& key, const Digest* parent,
                                           std::span<const int32_t> ids) {
  if (BlockEventSink* events = cache.events_.load(std::memory_order_acquire)) events->blockStored(tier, key, parent, ids);
}

void PrefixCache::DiskReports::blockRemoved(BlockTier tier, const Digest& key) {
  cache.evicted_.record(key, tier, steadyMillis());
  if (BlockEventSink* events = cache.events_.load(std::memory_order_acquire)) events->blockRemoved(tier, key);
}

void PrefixCache::loadPriorIdentities() {
  if (disk_ == nullptr) return;
  Result<std::optional<std::string>> stored = disk_->getMeta(kIdentitiesMeta);
  if (!stored.isOk()) {
    cacheLog()->warn("prefix cache: cannot read the disk tier's earlier identities: {}", stored.status().message());
    return;
  }
  std::string record(model_.view());
  if (*stored) {
    const std::string& bytes = **stored;
    for (size_t at = 0; at + 32 <= bytes.size() && prior_identities_.size() < kPriorIdentities; at += 32) {
      Digest d;
      std::copy_n(bytes.begin() + static_cast<ptrdiff_t>(at), 32, d.bytes.begin());
      if (d == model_) continue;
      prior_identities_.push_back(d);
      record += d.view();
    }
  }
  if (!*stored || **stored != record) {
    if (Status s = disk_->putMeta(kIdentitiesMeta, record); !s.isOk()) {
      cacheLog()->warn("prefix cache: cannot record the latent identity in the disk tier: {}", s.message());
    }
  }
}

void PrefixCache::classifyMissesLocked(LeaseState& s, std::vector<int32_t>& unexplained) {
  LookupMisses& m = s.misses;
  m.block_tokens = s.block_tokens;
  const int64_t now_ms = steadyMillis();
  std::optional<BlockMiss> previous;  // the cause of the block before, once one missed
  for (int32_t j = s.hit_blocks; j < s.max_hit; ++j) {
    const Digest& key = s.keys[static_cast<size_t>(j)];
    std::optional<BlockMiss> cause;
    auto it = index_.find(key);
    const bool claimed = it != index_.end() && it->second.state == State::kInFlight;
    const bool claimed_by_other = claimed && it->second.owner != s.id;
    const bool own_claim = claimed && it->second.owner == s.id;  // this lookup computes it
    const bool ready = it != index_.end() && it->second.state == State::kReady;
    const bool on_disk = (it == index_.end() || own_claim) && disk_ != nullptr && disk_->contains(key);
    const bool present = ready || on_disk;
    if (claimed_by_other) {
      cause = BlockMiss::kInFlight;
    } else if (present) {
      if (previous) {
        cause = previous;  // lost with the block before it: a prefix is reused up to its first gap
        if (*cause == BlockMiss::kEvicted) ++m.evicted_from[static_cast<size_t>(m.evicted_tier)];
      } else if (ready) {
        cause = BlockMiss::kInFlight;  // published since the walk passed it (or gave up waiting on it)
      } else if (s.decision.choice == RestoreChoice::kRecompute) {
        cause = BlockMiss::kRecomputed;
      }
      // Else on disk but not restored: the restore rejected it (a damaged
      // block, deleted since); read below as the eviction it now is.
    }
    if (!cause) {
      if (std::optional<EvictedBlocks::Eviction> ev = evicted_.find(key)) {
        cause = BlockMiss::kEvicted;
        ++m.evicted_from[static_cast<size_t>(ev->tier)];
        if (m.first_block < 0) {
          m.evicted_tier = ev->tier;
          m.evicted_ago_ms = std::max<int64_t>(0, now_ms - ev->at_ms);
        }
      } else if (present) {
        cause = BlockMiss::kEvicted;  // a rejected disk block, deleted as the restore found it
        ++m.evicted_from[static_cast<size_t>(BlockTier::kDisk)];
        if (m.first_block < 0) {
          m.evicted_tier = BlockTier::kDisk;
          m.evicted_ago_ms = 0;
        }
      } else {
        cause = BlockMiss::kNew;
        unexplained.push_back(j);
      }
    }
    if (m.first_block < 0) {
      m.first_block = j;
      m.first_cause = *cause;
    }
    ++m.blocks[static_cast<size_t>(*cause)];
    previous = cause;
  }
}

void PrefixCache::classifyAsOlderIdentity(LeaseState& s, const std::vector<int32_t>& unexplained) {
  if (unexplained.empty() || prior_identities_.empty() || disk_ == nullptr) return;
  LookupMisses& m = s.misses;
  // SHA-256 chains under each earlier identity, up to the last unexplained
  // block: a lookup that misses pays one more chain per identity kept.
  const size_t upto = static_cast<size_t>(unexplained.back() + 1) * static_cast<size_t>(s.block_tokens);
  std::vector<bool> older(unexplained.size(), false);
  for (const Digest& identity : prior_identities_) {
    const std::vector<Digest> keys = chainBlockKeys(s.ns, identity, std::span(s.ids).first(upto), s.block_tokens);
    for (size_t i = 0; i < unexplained.size(); ++i) {
      if (!older[i] && disk_->contains(keys[static_cast<size_t>(unexplained[i])])) older[i] = true;
    }
  }
  for (size_t i = 0; i < unexplained.size(); ++i) {
    if (!older[i]) continue;
    --m.blocks[static_cast<size_t>(BlockMiss::kNew)];
    ++m.blocks[static_cast<size_t>(BlockMiss::kModelChanged)];
    if (unexplained[i] == m.first_block) m.first_cause = BlockMiss::kModelChanged;
  }
}

const LookupMisses& PrefixLease::misses() const { return readyState().misses; }

}  // namespace lg::cache

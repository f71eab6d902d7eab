// Part of PrefixCache (prefix_cache.h): the admin side of namespaces.
// Publishing a team's cached prefix into a shared namespace, granting and
// revoking a team's reads of one, purging a namespace from tier 0 and the
// disk tier, and the keyed namespace tags stored blocks carry. Which shared
// namespaces a lookup reads is decided in prefix_cache_lookup.cc.
#include "cache/prefix_cache.h"

#include "cache/cache_log.h"

namespace lg::cache {
namespace {

using engine::BlockId;

}  // namespace

Result<int32_t> PrefixCache::publishToNamespace(const TeamNamespace& from_ns, const SharedNamespace& to_ns,
                                                std::span<const int32_t> ids) {
  const std::vector<Digest> from = chainBlockKeys(from_ns.key(), model_, ids, block_tokens_);
  const std::vector<Digest> to = chainBlockKeys(to_ns.key(), model_, ids, block_tokens_);
  const Digest to_tag = namespaceTag(to_ns.key());
  std::lock_guard lock(mu_);
  int32_t published = 0;
  for (size_t j = 0; j < from.size(); ++j) {
    auto src = index_.find(from[j]);
    if (src == index_.end() || src->second.state != State::kReady) break;
    auto dst = index_.find(to[j]);
    if (dst == index_.end()) {
      Entry e;
      e.ids = src->second.ids;
      e.ns_tag = to_tag;
      dst = index_.emplace(to[j], std::move(e)).first;
      insertReadyLocked(to[j], dst->second, src->second.block, j == 0 ? nullptr : &to[j - 1]);
    }
    ++published;
  }
  if (published == 0) return notFound("publishToNamespace: the prefix is not cached in namespace " + from_ns.key());
  return published;
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeNamespace(const TeamNamespace& team) {
  return purgeTag(namespaceTag(team.key()));
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeNamespace(const SharedNamespace& shared) {
  return purgeTag(namespaceTag(shared.key()));
}

Result<PrefixCache::PurgeCounts> PrefixCache::purgeTag(const Digest& tag) {
  PurgeCounts counts;
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    // No write-back: the point is to forget them.
    counts.tier0 = dropReadyLocked([&tag](const Entry& e) { return e.ns_tag == tag; }, release);
  }
  for (BlockId b : release) allocator_.release(b);
  if (disk_ != nullptr) {
    // Blocks of the namespace already queued for writing land first, then go.
    if (writer_ != nullptr) writer_->drain();
    LG_ASSIGN_OR_RETURN(counts.disk, disk_->purge(tag));
  }
  cacheLog()->info("purged a namespace: {} blocks from tier 0, {} from disk", counts.tier0, counts.disk);
  return counts;
}

void PrefixCache::grantShared(const SharedNamespace& shared, const TeamNamespace& team) {
  std::lock_guard lock(mu_);
  grants_.emplace(shared.key(), team.key());
}

void PrefixCache::revokeShared(const SharedNamespace& shared, const TeamNamespace& team) {
  std::lock_guard lock(mu_);
  grants_.erase({shared.key(), team.key()});
}

Digest PrefixCache::namespaceTag(const std::string& ns_key) const {
  // Keyed, so a stored block's tag does not tell a reader of the store which
  // team it belongs to; without a disk tier nothing is stored, and a plain
  // digest serves to find a namespace's blocks in tier 0.
  if (options_.secret != nullptr) return options_.secret->keyedDigest("latentgate/namespace/v1", ns_key);
  return Sha256().update("latentgate/namespace/v1").update(ns_key).finish();
}

}  // namespace lg::cache

// BlockEventSink: what the prefix cache tells about the blocks it holds, for
// routers that send each request where its prefix is (vLLM-format KV events,
// cache/kv_events/). The cache reports a block as stored when it becomes
// servable on a tier (indexed in the pool; written to the disk tier) and as
// removed when it stops being servable there (evicted, purged, expired,
// rejected, the cache gone stale).
//
// Calls come from whichever thread changed the tier, often under the cache's
// own lock, so that a block's stored and removed reports reach the sink in
// the order they happened: an implementation must only queue (bounded, never
// blocking) and must not call back into the cache.
//
// What a report carries: the block's chain key (cache/fingerprint.h, per
// namespace: two teams' identical prompts are different blocks), the key of
// the block before it in its prompt (none for a prompt's first block), and
// the block's token ids, which routers need to compute keys of their own.
#pragma once

#include <cstdint>
#include <span>

#include "cache/fingerprint.h"

namespace lg::cache {

enum class BlockTier : uint8_t { kPool, kDisk };

class BlockEventSink {
 public:
  virtual ~BlockEventSink() = default;
  // One block became servable on `tier`. `parent` is null for a prompt's first block.
  virtual void blockStored(BlockTier tier, const Digest& key, const Digest* parent, std::span<const int32_t> token_ids) = 0;
  virtual void blockRemoved(BlockTier tier, const Digest& key) = 0;
};

}  // namespace lg::cache

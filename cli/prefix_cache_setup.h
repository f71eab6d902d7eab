// The persistent prefix cache of a command (`forward`, `generate`, `serve`):
// the disk tier in a directory and the index over the backend's pool, keyed
// by the fingerprint of the very weights the backend mapped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cache/disk_tier.h"
#include "cache/prefix_cache.h"
#include "common/status.h"
#include "config/options.h"
#include "engine/backend.h"

namespace lg::cli {

struct OpenedCache {
  std::unique_ptr<cache::DiskTier> disk;       // null: tier 0 only
  std::unique_ptr<cache::PrefixCache> index;  // destroyed before the disk tier
  double fingerprint_ms = 0;
  std::string fingerprint_hex;
  cache::StoredDType stored_dtype = cache::StoredDType::kF32;
};

// Who opens the cache, which decides what a store that cannot be opened does.
enum class CacheUser : uint8_t {
  // A command run on a store the user named (--cache-dir): an unusable store
  // is an error.
  kCommand,
  // A long-running server on its default store: an unusable store degrades
  // it to tier 0 (logged; CacheStats::disk_state "degraded", shown at
  // /readyz), and the weight files are compared with those loaded every
  // cache.identity_check_seconds, so a changed file stops the cache serving
  // latents of other weights (PrefixCache::guardIdentity).
  kServer,
};

// An empty cache_dir opens tier 0 only (the latent pool, nothing on disk).
Result<OpenedCache> openPrefixCache(const Config& config, const std::string& cache_dir, engine::Backend& backend,
                                    CacheUser user = CacheUser::kCommand);

}  // namespace lg::cli

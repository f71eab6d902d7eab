// The persistent prefix cache of one command run (`forward`, `generate`): the
// disk tier in a directory and the index over the backend's pool, keyed by
// the fingerprint of the very weights the backend mapped.
#pragma once

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

// An empty cache_dir opens tier 0 only (the latent pool, nothing on disk).
Result<OpenedCache> openPrefixCache(const Config& config, const std::string& cache_dir, engine::Backend& backend);

}  // namespace lg::cli

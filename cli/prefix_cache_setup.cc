#include "cli/prefix_cache_setup.h"

#include <chrono>

#include "cache/cache_config.h"
#include "cache/cache_secret.h"
#include "cache/model_fingerprint.h"

namespace lg::cli {

Result<OpenedCache> openPrefixCache(const Config& config, const std::string& cache_dir, engine::Backend& backend) {
  using Clock = std::chrono::steady_clock;
  OpenedCache c;
  const auto t0 = Clock::now();
  // The fingerprint of the very bytes the engine mapped, and a check that
  // none of its files changed since they were loaded.
  LG_ASSIGN_OR_RETURN(cache::ModelFingerprint fp,
                      cache::fingerprintModel(backend.model(), cache::fingerprintOptions(config)));
  LG_RETURN_IF_ERROR(backend.model().checkFilesUnchanged());
  c.fingerprint_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  c.fingerprint_hex = fp.digest.hex();
  const engine::LatentLayout& layout = backend.latentLayout();
  cache::PrefixCacheOptions options = cache::prefixCacheOptions(config, layout.dtype);
  if (cache_dir.empty()) {
    const cache::Digest identity = cache::latentIdentity(fp.digest, backend.latentPool(), options.stored_dtype);
    LG_ASSIGN_OR_RETURN(c.index, cache::PrefixCache::create(backend.latentPool(), nullptr, identity, options));
    return c;
  }
  cache::DiskTierOptions disk_options = cache::diskTierOptions(config);
  disk_options.path = cache_dir;
  LG_ASSIGN_OR_RETURN(cache::CacheSecret secret, cache::CacheSecret::loadOrCreate(cache::secretPath(config, cache_dir)));
  LG_ASSIGN_OR_RETURN(c.disk, cache::DiskTier::open(disk_options));
  options.secret = std::make_shared<const cache::CacheSecret>(std::move(secret));
  c.stored_dtype = options.stored_dtype;
  const cache::Digest identity = cache::latentIdentity(fp.digest, backend.latentPool(), options.stored_dtype);
  LG_ASSIGN_OR_RETURN(c.index, cache::PrefixCache::create(backend.latentPool(), c.disk.get(), identity, options));
  return c;
}

}  // namespace lg::cli

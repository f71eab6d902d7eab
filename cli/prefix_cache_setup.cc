#include "cli/prefix_cache_setup.h"

#include <chrono>

#include "cache/cache_config.h"
#include "cache/cache_log.h"
#include "cache/cache_secret.h"
#include "cache/model_fingerprint.h"

namespace lg::cli {

Result<OpenedCache> openPrefixCache(const Config& config, const std::string& cache_dir, engine::Backend& backend,
                                    CacheUser user) {
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
  c.stored_dtype = options.stored_dtype;
  if (!cache_dir.empty()) {
    cache::DiskTierOptions disk_options = cache::diskTierOptions(config);
    disk_options.path = cache_dir;
    if (user == CacheUser::kCommand) {
      LG_ASSIGN_OR_RETURN(cache::CacheSecret secret,
                          cache::CacheSecret::loadOrCreate(cache::secretPath(config, cache_dir)));
      LG_ASSIGN_OR_RETURN(c.disk, cache::DiskTier::open(disk_options));
      options.secret = std::make_shared<const cache::CacheSecret>(std::move(secret));
    } else {
      cache::DiskTierOpen opened = cache::openDiskTierOrDegrade(disk_options);
      if (opened.tier != nullptr) {
        // The key that authenticates stored blocks: without it the store
        // cannot be read, which degrades the server the same way.
        auto secret = cache::CacheSecret::loadOrCreate(cache::secretPath(config, cache_dir));
        if (secret.isOk()) {
          c.disk = std::move(opened.tier);
          options.secret = std::make_shared<const cache::CacheSecret>(std::move(secret).value());
        } else {
          opened.error = secret.status().toString();
          cache::cacheLog()->error("latent store {}: its key cannot be read ({}); serving with tier 0 only",
                                   cache_dir, opened.error);
        }
      }
      options.disk_error = std::move(opened.error);
    }
  }
  const cache::Digest identity = cache::latentIdentity(fp.digest, backend.latentPool(), options.stored_dtype);
  LG_ASSIGN_OR_RETURN(c.index, cache::PrefixCache::create(backend.latentPool(), c.disk.get(), identity, options));
  if (user == CacheUser::kServer) {
    const engine::Model& model = backend.model();
    LG_RETURN_IF_ERROR(c.index->guardIdentity([&model] { return model.checkFilesUnchanged(); },
                                              std::chrono::seconds(config.cache.identity_check_seconds)));
  }
  return c;
}

}  // namespace lg::cli

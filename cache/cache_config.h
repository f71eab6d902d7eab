// The prefix cache's options from the process configuration: the one place
// where cache.* becomes PrefixCacheOptions and DiskTierOptions. The values
// were validated when the Config was loaded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cache/disk_tier.h"
#include "cache/model_fingerprint.h"
#include "cache/namespace.h"
#include "cache/prefix_cache.h"
#include "config/options.h"
#include "engine/latent_pool.h"

namespace lg::cache {

// "pool" stores blocks in the pool's own dtype (no conversion, no loss).
StoredDType storedDType(StoredDTypeSetting setting, engine::LatentDType pool);
RestorePolicy restorePolicy(RestorePolicySetting setting);
PrefixCacheOptions prefixCacheOptions(const Config& config, engine::LatentDType pool);
ModelFingerprintOptions fingerprintOptions(const Config& config);
// The store lives at cache.disk_path, by default data_dir/kv.
DiskTierOptions diskTierOptions(const Config& config);
// The cache secret's file: cache.secret_file, by default beside the store
// (`store_path`.key), outside the store's directory.
std::string secretPath(const Config& config, const std::string& store_path);

// cache.shared_namespaces as namespaces: each shared namespace and the teams
// granted it. InvalidArgument for a name the namespaces refuse (a Config that
// passed validateConfig has none).
struct SharedGrant {
  SharedNamespace shared;
  std::vector<TeamNamespace> teams;
};
Result<std::vector<SharedGrant>> sharedGrants(const Config& config);

// Grants each team its shared namespaces in `cache`, and returns per team id
// the shared namespaces its requests must name to read them (a lookup reads
// only the namespaces a request names and the cache has granted its team).
std::map<std::string, std::vector<SharedNamespace>> applySharedGrants(const std::vector<SharedGrant>& grants,
                                                                     PrefixCache& cache);

}  // namespace lg::cache

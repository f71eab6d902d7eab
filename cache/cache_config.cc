#include "cache/cache_config.h"

#include <algorithm>

namespace lg::cache {

StoredDType storedDType(StoredDTypeSetting setting, engine::LatentDType pool) {
  switch (setting) {
    case StoredDTypeSetting::kPool: return pool == engine::LatentDType::kF32 ? StoredDType::kF32 : StoredDType::kBF16;
    case StoredDTypeSetting::kF32: return StoredDType::kF32;
    case StoredDTypeSetting::kBF16: return StoredDType::kBF16;
    case StoredDTypeSetting::kInt8: return StoredDType::kInt8;
  }
  return StoredDType::kF32;
}

RestorePolicy restorePolicy(RestorePolicySetting setting) {
  switch (setting) {
    case RestorePolicySetting::kAuto: return RestorePolicy::kAuto;
    case RestorePolicySetting::kAlways: return RestorePolicy::kAlways;
    case RestorePolicySetting::kNever: return RestorePolicy::kNever;
  }
  return RestorePolicy::kAuto;
}

PrefixCacheOptions prefixCacheOptions(const Config& config, engine::LatentDType pool) {
  const CacheOptions& c = config.cache;
  PrefixCacheOptions o;
  o.tier0_budget_bytes = static_cast<uint64_t>(c.tier0_budget_bytes);
  o.write_through_hits = c.write_through_hits;
  o.stored_dtype = storedDType(c.stored_dtype, pool);
  o.write_back_queue_blocks = static_cast<size_t>(c.write_back_queue_blocks);
  o.write_back_batch_blocks = static_cast<size_t>(c.write_back_batch_blocks);
  o.restore_policy = restorePolicy(c.restore_policy);
  o.in_flight_wait = std::chrono::milliseconds(c.in_flight_wait_ms);
  o.io_threads = c.io_threads;
  o.mrc_enabled = c.mrc_max_samples > 0;
  o.mrc_sampling_rate = static_cast<double>(c.mrc_sampling_ppm) / 1e6;
  o.mrc_max_samples = static_cast<size_t>(std::max(c.mrc_max_samples, 1));
  o.evicted_blocks_tracked = static_cast<size_t>(c.evicted_blocks_tracked);
  return o;
}

ModelFingerprintOptions fingerprintOptions(const Config& config) {
  ModelFingerprintOptions o;
  o.full = config.cache.fingerprint == FingerprintSetting::kFull;
  return o;
}

DiskTierOptions diskTierOptions(const Config& config) {
  const CacheOptions& c = config.cache;
  DiskTierOptions o;
  o.path = c.disk_path.empty() ? config.data_dir + "/kv" : c.disk_path;
  o.max_bytes = static_cast<uint64_t>(c.disk_max_bytes);
  o.ttl = std::chrono::seconds(c.disk_ttl_seconds);
  o.verify_store_checksums = c.disk_verify_checksums;
  return o;
}

std::string secretPath(const Config& config, const std::string& store_path) {
  if (!config.cache.secret_file.empty()) return config.cache.secret_file;
  std::string base = store_path;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + ".key";
}

Result<std::vector<SharedGrant>> sharedGrants(const Config& config) {
  std::vector<SharedGrant> out;
  for (const auto& [name, teams] : config.cache.shared_namespaces) {
    LG_ASSIGN_OR_RETURN(SharedNamespace shared, SharedNamespace::named(name));
    SharedGrant grant{std::move(shared), {}};
    for (const std::string& team : teams) {
      LG_ASSIGN_OR_RETURN(TeamNamespace ns, TeamNamespace::ofTeam(team));
      grant.teams.push_back(std::move(ns));
    }
    out.push_back(std::move(grant));
  }
  return out;
}

std::map<std::string, std::vector<SharedNamespace>> applySharedGrants(const std::vector<SharedGrant>& grants,
                                                                     PrefixCache& cache) {
  std::map<std::string, std::vector<SharedNamespace>> by_team;
  for (const SharedGrant& grant : grants) {
    for (const TeamNamespace& team : grant.teams) {
      cache.grantShared(grant.shared, team);
      std::vector<SharedNamespace>& named = by_team[std::string(team.id())];
      if (std::find(named.begin(), named.end(), grant.shared) == named.end()) named.push_back(grant.shared);
    }
  }
  return by_team;
}

}  // namespace lg::cache

#include "cache/cache_config.h"

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

}  // namespace lg::cache

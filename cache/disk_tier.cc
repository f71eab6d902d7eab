#include "cache/disk_tier.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "cache/cache_log.h"

namespace lg::cache {
namespace {

constexpr const char* kBlocksCf = "blocks";
constexpr const char* kAccessCf = "access";

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Access stamps are microseconds since the epoch, made strictly increasing so
// that LRU order is exact even for blocks touched within the same microsecond.
int64_t nextStamp() {
  static std::atomic<int64_t> last{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  int64_t prev = last.load(std::memory_order_relaxed);
  int64_t next;
  do {
    next = std::max(now, prev + 1);
  } while (!last.compare_exchange_weak(prev, next, std::memory_order_relaxed));
  return next;
}

rocksdb::Slice slice(const Digest& d) { return {reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size()}; }

Status fromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::ok();
  std::string m = std::string(what) + ": " + s.ToString();
  if (s.IsCorruption()) return dataLoss(std::move(m));
  return unavailable(std::move(m));
}

rocksdb::Options dbOptions() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  o.keep_log_file_num = 3;
  return o;
}

rocksdb::ColumnFamilyOptions blockCfOptions() {
  rocksdb::ColumnFamilyOptions o;
  // Latent blocks are tens of KB to MBs of near-random floats: keep them in blob
  // files (integrated BlobDB), uncompressed, with GC reclaiming deleted blobs.
  o.enable_blob_files = true;
  o.min_blob_size = 1024;
  o.blob_file_size = uint64_t{256} << 20;
  o.blob_compression_type = rocksdb::kNoCompression;
  o.enable_blob_garbage_collection = true;
  o.blob_garbage_collection_age_cutoff = 0.5;
  o.compression = rocksdb::kNoCompression;
  o.write_buffer_size = uint64_t{32} << 20;
  return o;
}

}  // namespace

DiskTier::~DiskTier() {
  if (db_ == nullptr) return;
  enforceLimits();  // persists dirty access times
  closeDb();
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return unavailable("cannot create " + options.path + ": " + ec.message());

  auto tier = std::unique_ptr<DiskTier>(new DiskTier());
  tier->options_ = options;
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kBlocksCf, blockCfOptions()},
      {kAccessCf, rocksdb::ColumnFamilyOptions()},
  };
  auto try_open = [&]() -> Status {
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    LG_RETURN_IF_ERROR(fromRocks(rocksdb::DB::Open(dbOptions(), options.path, families, &handles, &db),
                                 "opening latent store " + options.path));
    tier->db_.reset(db);
    tier->default_cf_ = handles[0];
    tier->blocks_cf_ = handles[1];
    tier->access_cf_ = handles[2];
    // The access table is read in full at open, so a damaged SST under it
    // shows up here rather than at the first lookup.
    return tier->loadAccessTable();
  };
  Status s = try_open();
  if (s.code() == StatusCode::kDataLoss) {
    tier->closeDb();
    const std::string aside = options.path + ".corrupt-" + std::to_string(unixNow());
    cacheLog()->warn("latent store {} is corrupt ({}); moving it to {} and starting empty", options.path, s.message(),
                aside);
    std::filesystem::rename(options.path, aside, ec);
    if (ec) return dataLoss("cannot set aside corrupt store " + options.path + ": " + ec.message());
    std::filesystem::create_directories(options.path, ec);
    tier->recovered_ = true;
    s = try_open();
  }
  LG_RETURN_IF_ERROR(s);
  tier->enforceLimits();
  return tier;
}

void DiskTier::closeDb() {
  if (db_ == nullptr) return;
  for (auto* cf : {default_cf_, blocks_cf_, access_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf);
  }
  default_cf_ = blocks_cf_ = access_cf_ = nullptr;
  (void)db_->Close();  // a failed close leaves nothing to recover: the next open replays the WAL
  db_.reset();
  std::lock_guard lock(mu_);
  entries_.clear();
  dirty_access_.clear();
  total_bytes_ = 0;
}

Result<std::optional<std::string>> DiskTier::getMeta(std::string_view key) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_cf_, rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  LG_RETURN_IF_ERROR(fromRocks(s, "reading latent store metadata"));
  return std::optional<std::string>(std::move(value));
}

Status DiskTier::putMeta(std::string_view key, std::string_view value) {
  return fromRocks(db_->Put(rocksdb::WriteOptions(), default_cf_, rocksdb::Slice(key.data(), key.size()),
                            rocksdb::Slice(value.data(), value.size())),
                   "writing latent store metadata");
}

Status DiskTier::loadAccessTable() {
  // Each block and its access record are written and deleted in one atomic
  // WriteBatch, so the access table alone describes the store; reading it avoids
  // touching the (large) blob values at startup.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), access_cf_));
  std::lock_guard lock(mu_);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != 32 || it->value().size() != 16) continue;
    Digest d;
    std::memcpy(d.bytes.data(), it->key().data(), 32);
    Entry e;
    std::memcpy(&e.last_access, it->value().data(), 8);
    std::memcpy(&e.bytes, it->value().data() + 8, 8);
    entries_[d] = e;
    total_bytes_ += e.bytes;
  }
  return fromRocks(it->status(), "reading the latent store's access table");
}

void DiskTier::multiGet(std::span<const Digest> keys, ReadBuffers& out) {
  const size_t n = keys.size();
  out.values.resize(std::max(out.values.size(), n));
  out.found.assign(n, 0);
  if (n == 0) return;
  std::vector<rocksdb::Slice> slices;
  slices.reserve(n);
  for (const Digest& k : keys) slices.push_back(slice(k));
  // Each PinnableSlice copies its value into out.values[i] (reusing its
  // capacity) rather than into a fresh allocation.
  std::vector<rocksdb::PinnableSlice> values;
  values.reserve(n);
  for (size_t i = 0; i < n; ++i) values.emplace_back(&out.values[i]);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = options_.verify_store_checksums;  // see DiskTierOptions
  ro.fill_cache = false;  // blocks are promoted to tier 0; do not double-cache them
  db_->MultiGet(ro, blocks_cf_, n, slices.data(), values.data(), statuses.data());
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].ok()) {
      // A value pinned elsewhere (memtable, block cache) is copied into the buffer.
      if (values[i].IsPinned()) out.values[i].assign(values[i].data(), values[i].size());
      out.found[i] = 1;
      recordAccess(keys[i], values[i].size(), nextStamp());
    } else if (!statuses[i].IsNotFound()) {
      read_errors_.fetch_add(1, std::memory_order_relaxed);
      cacheLog()->warn("latent store read of block {} failed: {}; dropping it", keys[i].hex().substr(0, 16),
                  statuses[i].ToString());
      remove(keys[i]);
    }
  }
}

std::vector<std::optional<std::string>> DiskTier::multiGet(std::span<const Digest> keys) {
  ReadBuffers buffers;
  multiGet(keys, buffers);
  std::vector<std::optional<std::string>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (buffers.found[i]) out[i] = std::move(buffers.values[i]);
  }
  return out;
}

Status DiskTier::putBatch(std::span<const std::pair<Digest, std::string>> blocks) {
  if (blocks.empty()) return Status::ok();
  rocksdb::WriteBatch batch;
  std::vector<int64_t> stamps;
  stamps.reserve(blocks.size());
  for (const auto& [key, value] : blocks) {
    const int64_t now = nextStamp();
    stamps.push_back(now);
    batch.Put(blocks_cf_, slice(key), value);
    char access[16];
    const uint64_t bytes = value.size();
    std::memcpy(access, &now, 8);
    std::memcpy(access + 8, &bytes, 8);
    batch.Put(access_cf_, slice(key), rocksdb::Slice(access, 16));
  }
  rocksdb::WriteOptions wo;
  wo.sync = false;  // losing the newest blocks on a crash is fine; they are recomputed
  LG_RETURN_IF_ERROR(fromRocks(db_->Write(wo, &batch), "writing latent blocks"));
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& [key, value] = blocks[i];
    auto [it, inserted] = entries_.try_emplace(key, Entry{stamps[i], value.size()});
    if (!inserted) {
      total_bytes_ -= it->second.bytes;
      it->second = Entry{stamps[i], value.size()};
    }
    total_bytes_ += value.size();
  }
  return Status::ok();
}

void DiskTier::recordAccess(const Digest& key, uint64_t bytes, int64_t now) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = entries_.try_emplace(key, Entry{now, bytes});
  if (inserted) {
    total_bytes_ += bytes;
  } else {
    it->second.last_access = now;
  }
  dirty_access_.push_back(key);
}

void DiskTier::eraseLocked(const Digest& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  total_bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void DiskTier::remove(const Digest& key) {
  rocksdb::WriteBatch batch;
  batch.Delete(blocks_cf_, slice(key));
  batch.Delete(access_cf_, slice(key));
  (void)db_->Write(rocksdb::WriteOptions(), &batch);  // best effort: a failed delete is retried on next reject
  std::lock_guard lock(mu_);
  eraseLocked(key);
}

bool DiskTier::contains(const Digest& key) const {
  std::lock_guard lock(mu_);
  return entries_.count(key) != 0;
}

void DiskTier::enforceLimits() {
  std::vector<Digest> victims;
  rocksdb::WriteBatch batch;
  {
    std::lock_guard lock(mu_);
    const int64_t now = nextStamp();
    // Persist access times touched since the last call.
    for (const Digest& d : dirty_access_) {
      auto it = entries_.find(d);
      if (it == entries_.end()) continue;
      char access[16];
      std::memcpy(access, &it->second.last_access, 8);
      std::memcpy(access + 8, &it->second.bytes, 8);
      batch.Put(access_cf_, slice(d), rocksdb::Slice(access, 16));
    }
    dirty_access_.clear();
    const int64_t ttl = std::chrono::duration_cast<std::chrono::microseconds>(options_.ttl).count();
    if (ttl > 0) {
      for (const auto& [key, e] : entries_) {
        if (now - e.last_access > ttl) victims.push_back(key);
      }
    }
    if (total_bytes_ > options_.max_bytes) {
      // Oldest first until 90% of the cap, so eviction runs in batches.
      std::vector<std::pair<int64_t, Digest>> by_age;
      by_age.reserve(entries_.size());
      for (const auto& [key, e] : entries_) by_age.emplace_back(e.last_access, key);
      std::sort(by_age.begin(), by_age.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      uint64_t bytes = total_bytes_;
      const uint64_t target = options_.max_bytes / 10 * 9;
      for (const auto& [age, key] : by_age) {
        if (bytes <= target) break;
        bytes -= entries_[key].bytes;
        victims.push_back(key);
      }
    }
    for (const Digest& key : victims) {
      eraseLocked(key);
      batch.Delete(blocks_cf_, slice(key));
      batch.Delete(access_cf_, slice(key));
    }
  }
  if (batch.Count() == 0) return;
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) cacheLog()->warn("latent store maintenance write failed: {}", s.ToString());
  evicted_.fetch_add(victims.size(), std::memory_order_relaxed);
}

Status DiskTier::flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return fromRocks(db_->Flush(fo, {blocks_cf_, access_cf_}), "flushing latent store");
}

DiskTierStats DiskTier::stats() const {
  DiskTierStats s;
  {
    std::lock_guard lock(mu_);
    s.blocks = entries_.size();
    s.bytes = total_bytes_;
  }
  s.evicted_blocks = evicted_.load(std::memory_order_relaxed);
  s.read_errors = read_errors_.load(std::memory_order_relaxed);
  s.recovered_from_corruption = recovered_;
  return s;
}

}  // namespace lg::cache

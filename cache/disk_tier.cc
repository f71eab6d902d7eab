#include "cache/disk_tier.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <shared_mutex>
#include <system_error>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "cache/cache_log.h"
#include "common/unix_time.h"

namespace lg::cache {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kBlocksCf = "blocks";
constexpr const char* kAccessCf = "access";

// Stored blocks hold tenants' token ids verbatim: only the owner may read them.
constexpr mode_t kPrivateDirMode = 0700;
constexpr mode_t kPrivateFileMode = 0600;

// Over the cap, the space of deleted blocks is reclaimed (flush + compaction)
// once it covers the excess over 90% of the cap, or reaches this much: a cap
// smaller than RocksDB's own files would otherwise compact after every batch.
constexpr uint64_t kReclaimMinBytes = uint64_t{1} << 20;
// The first reclaim relocates the live values of the older half of the blob
// files (least recently used blocks are mostly there); only if the store is
// still over the cap does a second one rewrite all of them.
constexpr double kReclaimFirstAgeCutoff = 0.5;

// Access stamps are microseconds since the epoch, made strictly increasing so
// that LRU order is exact even for blocks touched within the same microsecond.
int64_t nextStamp() {
  static std::atomic<int64_t> last{0};
  const int64_t now = unixMicros();
  int64_t prev = last.load(std::memory_order_relaxed);
  int64_t next;
  do {
    next = std::max(now, prev + 1);
  } while (!last.compare_exchange_weak(prev, next, std::memory_order_relaxed));
  return next;
}

rocksdb::Slice slice(const Digest& d) { return {reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size()}; }

// An access record: the block's last access stamp, its stored bytes and its
// namespace tag (what purge() finds a namespace's blocks by without reading
// them). Records of 16 bytes, from before namespace tags, read as untagged.
constexpr size_t kAccessBytes = 32;

std::string accessRecord(int64_t stamp, uint64_t bytes, const NamespaceTag& tag) {
  std::string r(kAccessBytes, '\0');
  std::memcpy(r.data(), &stamp, 8);
  std::memcpy(r.data() + 8, &bytes, 8);
  std::memcpy(r.data() + 16, tag.data(), tag.size());
  return r;
}

Status fromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::ok();
  std::string m = std::string(what) + ": " + s.ToString();
  if (s.IsCorruption()) return dataLoss(std::move(m));
  return unavailable(std::move(m));
}

std::string errnoText() { return std::strerror(errno); }

// --- private files ------------------------------------------------------------

// RocksDB 7.8 creates every file 0644 and every directory 0755 (fs_posix).
// Its one switch, Env::SetAllowNonOwnerAccess(false), returns OK on Debian's
// build but leaves new files 0644 (tried), and would be process-wide anyway.
// So the store's file system is wrapped: whatever RocksDB creates is made
// 0600 (directories 0700) right after. The store's directory is 0700 before
// RocksDB starts, so nobody else can reach a file in the moment between.
class PrivateFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit PrivateFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target) : FileSystemWrapper(target) {}
  const char* Name() const override { return "LatentGatePrivateFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* d) override {
    return tighten(target()->NewWritableFile(f, o, r, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return tighten(target()->ReopenWritableFile(f, o, r, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return tighten(target()->ReuseWritableFile(f, old, o, r, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r, rocksdb::IODebugContext* d) override {
    return tighten(target()->NewRandomRWFile(f, o, r, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::FileLock** l,
                             rocksdb::IODebugContext* d) override {
    return tighten(target()->LockFile(f, o, l, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o, std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* d) override {
    return tighten(target()->NewLogger(f, o, r, d), f, kPrivateFileMode);
  }
  rocksdb::IOStatus CreateDir(const std::string& f, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    return tighten(target()->CreateDir(f, o, d), f, kPrivateDirMode);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& f, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override {
    return tighten(target()->CreateDirIfMissing(f, o, d), f, kPrivateDirMode);
  }

 private:
  // Best effort: a file that cannot be chmod'ed (a file system without modes)
  // still lies in the 0700 directory that DiskTier::open insisted on.
  static rocksdb::IOStatus tighten(rocksdb::IOStatus s, const std::string& path, mode_t mode) {
    if (s.ok()) (void)::chmod(path.c_str(), mode);
    return s;
  }
};

// One per process, never destroyed (RocksDB's background threads may use it
// until exit). Thread pools are Env::Default()'s.
rocksdb::Env* privateEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<PrivateFileSystem>(rocksdb::FileSystem::Default())).release();
  return env;
}

// Creates `path` 0700 (its parents as the umask says); fails if it exists and
// is not a directory.
Status createPrivateDir(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) return unavailable("cannot create " + path + ": " + ec.message());
  }
  if (::mkdir(path.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) {
    return unavailable("cannot create " + path + ": " + errnoText());
  }
  if (!fs::is_directory(fs::symlink_status(p, ec))) {
    return unavailable("cannot use " + path + " as the latent store: it is not a directory");
  }
  return Status::ok();
}

// Tightens a directory to 0700 and everything under it to 0700 (directories)
// or 0600 (files). Symbolic links are neither followed nor changed.
Status makePrivate(const std::string& dir) {
  if (::chmod(dir.c_str(), kPrivateDirMode) != 0) {
    return permissionDenied("cannot make " + dir + " private (chmod 700): " + errnoText());
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;  // deleted meanwhile
    mode_t want = 0;
    if (S_ISDIR(st.st_mode)) {
      want = kPrivateDirMode;
    } else if (S_ISREG(st.st_mode)) {
      want = kPrivateFileMode;
    } else {
      continue;
    }
    if ((st.st_mode & 07777) != want && ::chmod(it->path().c_str(), want) != 0) {
      return permissionDenied("cannot make " + it->path().string() + " private: " + errnoText());
    }
  }
  if (ec) return unavailable("cannot list " + dir + ": " + ec.message());
  return Status::ok();
}

// Bytes allocated on disk to the files under `dir` (recursively); files that
// vanish while it counts are skipped.
uint64_t diskBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

// --- set-aside corrupt stores -------------------------------------------------

struct AsideStore {
  std::string path;
  int64_t time = 0;  // unix seconds, from the name
};

// PATH.corrupt-<unix time>[-<n>] directories beside the store, oldest first.
std::vector<AsideStore> listCorruptStores(const std::string& path) {
  std::vector<AsideStore> out;
  const fs::path p(path);
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".corrupt-";
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dash = rest.find('-');
    const std::string secs = rest.substr(0, dash);
    const std::string seq = dash == std::string::npos ? "0" : rest.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(secs) || !digits(seq)) continue;  // not ours: left alone
    std::error_code sec;
    if (!fs::is_directory(fs::symlink_status(it->path(), sec))) continue;
    out.push_back(AsideStore{it->path().string(), std::stoll(secs)});
  }
  std::sort(out.begin(), out.end(), [](const AsideStore& a, const AsideStore& b) {
    return a.time != b.time ? a.time < b.time : a.path < b.path;
  });
  return out;
}

// A name PATH.corrupt-<now> that does not exist yet.
std::string asideName(const std::string& path) {
  const std::string base = path + ".corrupt-" + std::to_string(unixSeconds());
  std::string name = base;
  std::error_code ec;
  for (int n = 1; fs::exists(fs::symlink_status(name, ec)); ++n) name = base + "-" + std::to_string(n);
  return name;
}

// --- RocksDB options ------------------------------------------------------------

// RocksDB's info log goes to the cache's logger at debug level (fatal
// messages at error), not to a LOG file in the store: on a full disk a failed LOG
// append leaves that file's writer in error, and the next log line aborts the
// process in Debian's RocksDB build (an assert in WritableFileWriter;
// measured with the disk-full test). It also keeps log files out of the
// store's byte cap. The conditions that matter are logged by DiskTier itself,
// once each (RocksDB repeats its errors on every failed write).
class RocksDbLogger final : public rocksdb::Logger {
 public:
  RocksDbLogger() : Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    const spdlog::level::level_enum to =
        level >= rocksdb::InfoLogLevel::FATAL_LEVEL ? spdlog::level::err : spdlog::level::debug;
    if (!cacheLog()->should_log(to)) return;
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    cacheLog()->log(to, "rocksdb: {}", line);
  }
};

rocksdb::Options dbOptions(const DiskTierOptions& options, std::shared_ptr<rocksdb::EventListener> listener) {
  rocksdb::Options o;
  o.env = privateEnv();
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  static const auto logger = std::make_shared<RocksDbLogger>();
  o.info_log = logger;
  // No preallocation: by default each WAL reserves 1.1 x the write buffer
  // up front, which would count against the cap and eat a nearly full disk.
  o.allow_fallocate = false;
  // The small families (access times, metadata) rarely fill a memtable and
  // would keep old WAL files alive; this bounds the WAL by flushing them.
  o.max_total_wal_size = 2 * options.write_buffer_bytes;
  // Errors that stop writes are recovered from by the writer thread
  // (DiskTier::reopen); RocksDB's own retries would resume the DB in ways
  // that are unsafe in 7.8 (see reopen).
  o.max_bgerror_resume_count = 0;
  o.listeners.push_back(std::move(listener));
  return o;
}

rocksdb::ColumnFamilyOptions blockCfOptions(const DiskTierOptions& options) {
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
  o.write_buffer_size = options.write_buffer_bytes;
  return o;
}

}  // namespace

// Hears about RocksDB's background errors (a flush or compaction that failed,
// for instance on a full disk), which stop all writes: the tier is then
// unwritable at once, not only after the next put fails. RocksDB's own
// recovery from a full disk (its SstFileManager polls free space every 5 s
// and resumes the DB) is turned off for errors that stop writes: the writer
// thread recovers instead, with its own backoff (mayWrite, reopen).
// Callbacks run on RocksDB's threads without its mutex; they touch only the
// tier's health state.
class DiskTier::Listener final : public rocksdb::EventListener {
 public:
  explicit Listener(DiskTier* tier) : tier_(tier) {}
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status* error) override {
    if (error != nullptr && !error->ok() && error->severity() >= rocksdb::Status::Severity::kHardError) {
      tier_->noteWriteFailure(error->ToString());
    }
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status error,
                            bool* auto_recovery) override {
    if (error.severity() >= rocksdb::Status::Severity::kHardError) *auto_recovery = false;
    error.PermitUncheckedError();
  }

 private:
  DiskTier* const tier_;
};

DiskTier::~DiskTier() {
  enforceLimits();  // persists dirty access times
  std::unique_lock db_lock(db_mu_);
  closeDbLocked();
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  if (options.path.empty()) return invalidArgument("the latent store path is empty");
  if (options.write_buffer_bytes < (uint64_t{64} << 10)) {
    return invalidArgument("latent store write buffer must be at least 64 KiB, got " +
                           std::to_string(options.write_buffer_bytes));
  }
  LG_RETURN_IF_ERROR(createPrivateDir(options.path));
  LG_RETURN_IF_ERROR(makePrivate(options.path));  // a store created before, or by an older version

  auto tier = std::unique_ptr<DiskTier>(new DiskTier());
  tier->options_ = options;
  tier->listener_ = std::make_shared<Listener>(tier.get());
  std::unique_lock db_lock(tier->db_mu_);
  Status s = tier->openDbLocked();
  if (s.code() == StatusCode::kDataLoss) {
    tier->closeDbLocked();
    const std::string aside = asideName(options.path);
    cacheLog()->warn("latent store {} is corrupt ({}); moving it to {} and starting empty", options.path, s.message(),
                     aside);
    std::error_code ec;
    std::filesystem::rename(options.path, aside, ec);
    if (ec) return dataLoss("cannot set aside corrupt store " + options.path + ": " + ec.message());
    LG_RETURN_IF_ERROR(createPrivateDir(options.path));
    tier->recovered_ = true;
    s = tier->openDbLocked();
  }
  if (!s.isOk()) {
    tier->closeDbLocked();
    return s;
  }
  db_lock.unlock();
  tier->pruneCorruptStores(/*all=*/false);
  tier->enforceLimits();
  return tier;
}

DiskTierOpen openDiskTierOrDegrade(const DiskTierOptions& options) {
  DiskTierOpen out;
  auto opened = DiskTier::open(options);
  if (opened.isOk()) {
    out.tier = std::move(opened).value();
    return out;
  }
  out.error = opened.status().toString();
  cacheLog()->error(
      "latent store {} cannot be opened ({}); serving with tier 0 only: no prefix survives a restart and evicted "
      "blocks are recomputed",
      options.path, out.error);
  return out;
}

Status DiskTier::openDbLocked() {
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kBlocksCf, blockCfOptions(options_)},
      {kAccessCf, rocksdb::ColumnFamilyOptions()},
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  LG_RETURN_IF_ERROR(fromRocks(rocksdb::DB::Open(dbOptions(options_, listener_), options_.path, families, &handles, &db),
                               "opening latent store " + options_.path));
  db_.reset(db);
  default_cf_ = handles[0];
  blocks_cf_ = handles[1];
  access_cf_ = handles[2];
  // The access table is read in full at open, so a damaged SST under it
  // shows up here rather than at the first lookup.
  return loadAccessTable();
}

// How a store that stopped writing comes back. Not DB::Resume(): RocksDB
// 7.8 refuses it after errors other than "no space" (EIO, EDQUOT, EFBIG are
// fatal with paranoid_checks), and after a failed WAL append it resumes
// without replacing the failed WAL writer, so the next write hits a writer
// with a previous error, which aborts the process in Debian's build (an
// assert; rocksdb#11643, #12998) — measured here, as was a Resume() that
// hung waiting for its flush. Closing and opening again replays the WAL up
// to the failed write, so everything acknowledged is still there; the
// access table is read again.
void DiskTier::reopen() {
  // Access times not persisted yet are newer than the access table's.
  std::unordered_map<Digest, int64_t, DigestHash> recent;
  {
    std::lock_guard lock(mu_);
    for (const Digest& d : dirty_access_) {
      if (auto it = entries_.find(d); it != entries_.end()) recent[d] = it->second.last_access;
    }
  }
  // Closing waits for RocksDB's background jobs, and a flush that failed
  // sleeps a second before it gives its thread back: closed without db_mu_,
  // so that reads meanwhile miss instead of waiting.
  Detached old;
  {
    std::unique_lock db_lock(db_mu_);
    old = detachLocked();
  }
  closeDetached(std::move(old));
  std::unique_lock db_lock(db_mu_);
  if (Status s = openDbLocked(); !s.isOk()) {
    closeDbLocked();  // reads miss, writes are refused; tried again at the next retry
    cacheLog()->debug("latent store {}: reopening failed: {}", options_.path, s.toString());
    return;
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& [d, stamp] : recent) {
      auto it = entries_.find(d);
      if (it == entries_.end()) continue;
      it->second.last_access = std::max(it->second.last_access, stamp);
      dirty_access_.push_back(d);
    }
  }
  cacheLog()->debug("latent store {} reopened after a write error", options_.path);
}

DiskTier::Detached DiskTier::detachLocked() {
  Detached d;
  d.db = std::move(db_);
  d.handles = {default_cf_, blocks_cf_, access_cf_};
  default_cf_ = blocks_cf_ = access_cf_ = nullptr;
  std::lock_guard lock(mu_);
  entries_.clear();
  dirty_access_.clear();
  total_bytes_ = 0;
  return d;
}

void DiskTier::closeDetached(Detached d) {
  if (d.db == nullptr) return;
  for (auto* cf : d.handles) {
    if (cf != nullptr) d.db->DestroyColumnFamilyHandle(cf);
  }
  (void)d.db->Close();  // a failed close leaves nothing to recover: the next open replays the WAL
}

void DiskTier::closeDbLocked() { closeDetached(detachLocked()); }

void DiskTier::pruneCorruptStores(bool all) {
  const std::vector<AsideStore> stores = listCorruptStores(options_.path);
  const int64_t now = unixSeconds();
  const size_t keep_from = stores.size() > kKeptCorruptStores ? stores.size() - kKeptCorruptStores : 0;
  std::vector<std::string> kept;
  uint64_t bytes = 0;
  for (size_t i = 0; i < stores.size(); ++i) {
    const AsideStore& a = stores[i];
    const char* why = all                                         ? "the latent store is over its byte cap"
                      : i < keep_from                             ? "more set-aside stores than kept"
                      : now - a.time > kCorruptStoreMaxAge.count() ? "older than kept"
                                                                  : nullptr;
    if (why != nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(a.path, ec);
      if (!ec) {
        removed_corrupt_.fetch_add(1, std::memory_order_relaxed);
        cacheLog()->info("removed set-aside corrupt latent store {} ({})", a.path, why);
        continue;
      }
      cacheLog()->warn("cannot remove set-aside corrupt latent store {}: {}", a.path, ec.message());
    }
    // Kept, for a look at what went wrong: as private as the store it was.
    if (Status s = makePrivate(a.path); !s.isOk()) cacheLog()->warn("{}", s.message());
    kept.push_back(a.path);
    bytes += diskBytes(a.path);
  }
  std::lock_guard lock(corrupt_mu_);
  corrupt_stores_ = std::move(kept);
  corrupt_bytes_ = bytes;
}

uint64_t DiskTier::measureOccupied() const {
  const uint64_t store = diskBytes(options_.path);
  std::lock_guard lock(corrupt_mu_);
  return store + corrupt_bytes_;
}

Result<std::optional<std::string>> DiskTier::getMeta(std::string_view key) {
  std::shared_lock db_lock(db_mu_);
  if (db_ == nullptr) return unavailable("latent store " + options_.path + " is closed after a write error");
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_cf_, rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  LG_RETURN_IF_ERROR(fromRocks(s, "reading latent store metadata"));
  return std::optional<std::string>(std::move(value));
}

Status DiskTier::putMeta(std::string_view key, std::string_view value) {
  std::shared_lock db_lock(db_mu_);
  if (db_ == nullptr) return unavailable("latent store " + options_.path + " is closed after a write error");
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
    if (it->key().size() != 32 || (it->value().size() != 16 && it->value().size() != kAccessBytes)) continue;
    Digest d;
    std::memcpy(d.bytes.data(), it->key().data(), 32);
    Entry e;
    std::memcpy(&e.last_access, it->value().data(), 8);
    std::memcpy(&e.bytes, it->value().data() + 8, 8);
    if (it->value().size() == kAccessBytes) std::memcpy(e.ns_tag.data(), it->value().data() + 16, e.ns_tag.size());
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
  std::vector<rocksdb::Status> statuses(n, rocksdb::Status::NotFound());
  rocksdb::ReadOptions ro;
  ro.verify_checksums = options_.verify_store_checksums;  // see DiskTierOptions
  ro.fill_cache = false;  // blocks are promoted to tier 0; do not double-cache them
  {
    std::shared_lock db_lock(db_mu_);
    if (db_ != nullptr) db_->MultiGet(ro, blocks_cf_, n, slices.data(), values.data(), statuses.data());
  }
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

// --- write health -----------------------------------------------------------------

DiskTier::WriteGate DiskTier::mayWrite() {
  {
    std::lock_guard lock(health_mu_);
    if (writable_) return WriteGate::kOpen;
    const auto now = SteadyClock::now();
    if (now < next_retry_) {
      refused_writes_.fetch_add(1, std::memory_order_relaxed);
      return WriteGate::kRefused;
    }
    next_retry_ = now + options_.write_retry_interval;
  }
  // Not before the file system has room for what a reopen writes: the
  // replayed WAL (at most a memtable or two), a new MANIFEST and OPTIONS.
  // Until then the stopped store keeps serving reads.
  const uint64_t needed = 2 * options_.write_buffer_bytes + (uint64_t{1} << 20);
  struct statvfs vfs {};
  if (::statvfs(options_.path.c_str(), &vfs) == 0 && static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < needed) {
    refused_writes_.fetch_add(1, std::memory_order_relaxed);
    return WriteGate::kRefused;
  }
  reopen();
  return WriteGate::kRetry;
}

bool DiskTier::writable() const {
  std::lock_guard lock(health_mu_);
  return writable_;
}

void DiskTier::noteWriteFailure(const std::string& error) {
  write_failures_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(health_mu_);
  if (!writable_) return;  // logged when the episode began
  writable_ = false;
  write_error_ = error;
  next_retry_ = SteadyClock::now() + options_.write_retry_interval;
  episodes_.fetch_add(1, std::memory_order_relaxed);
  // Under the lock: whoever sees the store unwritable also finds it logged.
  cacheLog()->warn(
      "latent store {} cannot be written: {}; serving from memory, new blocks are not persisted until writing works "
      "again (retried every {} ms)",
      options_.path, error, options_.write_retry_interval.count());
}

void DiskTier::noteWriteSuccess() {
  std::lock_guard lock(health_mu_);
  if (writable_) return;
  writable_ = true;
  write_error_.clear();
  recoveries_.fetch_add(1, std::memory_order_relaxed);
  cacheLog()->info("latent store {} is writable again", options_.path);
}

// --- writes -------------------------------------------------------------------------

Status DiskTier::putBatch(std::span<const std::pair<Digest, std::string>> blocks, std::span<const Digest> ns_tags,
                          const std::function<void(size_t)>& on_stored) {
  if (blocks.empty()) return Status::ok();
  if (!ns_tags.empty() && ns_tags.size() != blocks.size()) {
    return invalidArgument("putBatch: " + std::to_string(ns_tags.size()) + " namespace tags for " +
                           std::to_string(blocks.size()) + " blocks");
  }
  auto tagOf = [&](size_t i) {
    NamespaceTag t{};
    if (!ns_tags.empty()) std::memcpy(t.data(), ns_tags[i].bytes.data(), t.size());
    return t;
  };
  std::lock_guard write_lock(write_mu_);
  const WriteGate gate = mayWrite();
  if (gate == WriteGate::kRefused) {
    std::lock_guard lock(health_mu_);
    return unavailable("latent store " + options_.path + " is not writable: " + write_error_);
  }
  rocksdb::Status s = rocksdb::Status::Aborted("the store is closed after a write error");
  std::vector<int64_t> stamps;
  stamps.reserve(blocks.size());
  {
    std::shared_lock db_lock(db_mu_);
    if (db_ != nullptr) {
      rocksdb::WriteBatch batch;
      for (size_t i = 0; i < blocks.size(); ++i) {
        const auto& [key, value] = blocks[i];
        const int64_t now = nextStamp();
        stamps.push_back(now);
        batch.Put(blocks_cf_, slice(key), value);
        batch.Put(access_cf_, slice(key), accessRecord(now, value.size(), tagOf(i)));
      }
      rocksdb::WriteOptions wo;
      wo.sync = false;  // losing the newest blocks on a crash is fine; they are recomputed
      s = db_->Write(wo, &batch);
    }
  }
  if (!s.ok()) {
    noteWriteFailure(s.ToString());
    return fromRocks(s, "writing latent blocks");
  }
  if (gate == WriteGate::kRetry) noteWriteSuccess();
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& [key, value] = blocks[i];
    auto [it, inserted] = entries_.try_emplace(key, Entry{stamps[i], value.size(), tagOf(i)});
    if (!inserted) {
      total_bytes_ -= it->second.bytes;
      it->second = Entry{stamps[i], value.size(), tagOf(i)};
    }
    total_bytes_ += value.size();
    if (on_stored) on_stored(i);
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
  if (BlockEventSink* events = events_.load(std::memory_order_acquire)) events->blockRemoved(BlockTier::kDisk, key);
}

void DiskTier::remove(const Digest& key) {
  if (writable()) {
    std::shared_lock db_lock(db_mu_);
    if (db_ != nullptr) {
      rocksdb::WriteBatch batch;
      batch.Delete(blocks_cf_, slice(key));
      batch.Delete(access_cf_, slice(key));
      const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
      if (!s.ok()) noteWriteFailure(s.ToString());
    }
  }
  // Forgotten even when the delete failed: the value was rejected, it must
  // not be offered again. If it is still stored, the next process rejects it
  // again (and the byte cap counts it meanwhile, since it measures the disk).
  std::lock_guard lock(mu_);
  eraseLocked(key);
}

Result<uint64_t> DiskTier::purge(const Digest& ns_tag) {
  NamespaceTag tag{};
  std::memcpy(tag.data(), ns_tag.bytes.data(), tag.size());
  std::lock_guard write_lock(write_mu_);
  std::shared_lock db_lock(db_mu_);
  if (db_ == nullptr || !writable()) {
    std::lock_guard lock(health_mu_);
    return unavailable("latent store " + options_.path + " is not writable: " + write_error_);
  }
  std::vector<std::pair<Digest, uint64_t>> victims;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, e] : entries_) {
      if (e.ns_tag == tag) victims.emplace_back(key, e.bytes);
    }
  }
  // In batches, so a large namespace does not build one huge WriteBatch.
  constexpr size_t kBatch = 1024;
  for (size_t begin = 0; begin < victims.size(); begin += kBatch) {
    const std::vector<std::pair<Digest, uint64_t>> part(
        victims.begin() + static_cast<ptrdiff_t>(begin),
        victims.begin() + static_cast<ptrdiff_t>(std::min(victims.size(), begin + kBatch)));
    rocksdb::WriteBatch batch;
    for (const auto& [key, bytes] : part) {
      batch.Delete(blocks_cf_, slice(key));
      batch.Delete(access_cf_, slice(key));
    }
    if (!writeDeletes(batch, part)) {
      std::lock_guard lock(health_mu_);
      return unavailable("purging from latent store " + options_.path + ": " + write_error_);
    }
  }
  return static_cast<uint64_t>(victims.size());
}

bool DiskTier::contains(const Digest& key) const {
  std::lock_guard lock(mu_);
  return entries_.count(key) != 0;
}

bool DiskTier::writeDeletes(rocksdb::WriteBatch& batch, const std::vector<std::pair<Digest, uint64_t>>& victims) {
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    noteWriteFailure(s.ToString());
    return false;
  }
  uint64_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, size] : victims) {
      eraseLocked(key);
      bytes += size;
    }
  }
  garbage_ += bytes;
  evicted_.fetch_add(victims.size(), std::memory_order_relaxed);
  return true;
}

void DiskTier::enforceLimits() {
  std::lock_guard write_lock(write_mu_);
  std::shared_lock db_lock(db_mu_);
  if (db_ == nullptr) return;
  occupied_.store(measureOccupied(), std::memory_order_relaxed);
  // Nothing is deleted or forgotten while writes fail: the writer's next put
  // retries writing (mayWrite), and this runs again after it.
  if (!writable()) return;
  rocksdb::WriteBatch batch;
  std::vector<Digest> dirty;
  std::vector<std::pair<Digest, uint64_t>> expired;
  {
    std::lock_guard lock(mu_);
    const int64_t now = nextStamp();
    // Persist access times touched since the last call.
    dirty.swap(dirty_access_);
    for (const Digest& d : dirty) {
      auto it = entries_.find(d);
      if (it == entries_.end()) continue;
      batch.Put(access_cf_, slice(d), accessRecord(it->second.last_access, it->second.bytes, it->second.ns_tag));
    }
    const int64_t ttl = std::chrono::duration_cast<std::chrono::microseconds>(options_.ttl).count();
    if (ttl > 0) {
      for (const auto& [key, e] : entries_) {
        if (now - e.last_access > ttl) expired.emplace_back(key, e.bytes);
      }
    }
    for (const auto& [key, bytes] : expired) {
      batch.Delete(blocks_cf_, slice(key));
      batch.Delete(access_cf_, slice(key));
    }
  }
  if (batch.Count() > 0 && !writeDeletes(batch, expired)) {
    std::lock_guard lock(mu_);  // persisted by a later call
    dirty_access_.insert(dirty_access_.end(), dirty.begin(), dirty.end());
    return;
  }
  enforceCapLocked();
}

void DiskTier::enforceCapLocked() {
  const uint64_t cap = options_.max_bytes;
  const uint64_t target = cap / 10 * 9;
  uint64_t occupied = occupied_.load(std::memory_order_relaxed);
  if (occupied <= cap) return;
  auto remeasure = [&] {
    occupied = measureOccupied();
    occupied_.store(occupied, std::memory_order_relaxed);
    return occupied <= cap;
  };
  // 1. Set-aside corrupt stores hold nothing worth serving: they go first.
  bool has_aside = false;
  {
    std::lock_guard lock(corrupt_mu_);
    has_aside = !corrupt_stores_.empty();
  }
  if (has_aside) {
    pruneCorruptStores(/*all=*/true);
    if (remeasure()) return;
  }
  // 2. Least recently used blocks, for what the deletes not reclaimed yet
  // will not return, then reclaim: a deleted value leaves the disk only when
  // a compaction drops it, and blob files only when GC has moved their live
  // values out. 3. If garbage is left in newer blob files, reclaim once more
  // rewriting all of them; 4. if still over, evict for the rest.
  for (int step = 0; step < 3; ++step) {
    const uint64_t excess = occupied - target;
    if (step != 1 && excess > garbage_) {
      std::vector<std::pair<int64_t, Digest>> by_age;
      {
        std::lock_guard lock(mu_);
        by_age.reserve(entries_.size());
        for (const auto& [key, e] : entries_) by_age.emplace_back(e.last_access, key);
      }
      std::sort(by_age.begin(), by_age.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<std::pair<Digest, uint64_t>> victims;
      rocksdb::WriteBatch batch;
      uint64_t freed = 0;
      {
        std::lock_guard lock(mu_);
        for (const auto& [age, key] : by_age) {
          if (freed >= excess - garbage_) break;
          auto it = entries_.find(key);
          if (it == entries_.end()) continue;
          victims.emplace_back(key, it->second.bytes);
          freed += it->second.bytes;
          batch.Delete(blocks_cf_, slice(key));
          batch.Delete(access_cf_, slice(key));
        }
      }
      if (!victims.empty() && !writeDeletes(batch, victims)) return;
    }
    if (garbage_ == 0 && step != 1) break;  // nothing to reclaim
    if (step == 0 && garbage_ < std::min(excess, kReclaimMinBytes)) return;  // not worth a compaction yet
    if (!reclaimLocked(step == 0 ? kReclaimFirstAgeCutoff : 1.0)) return;
    if (remeasure()) return;
  }
  if (!cap_below_overhead_logged_) {
    cap_below_overhead_logged_ = true;
    std::lock_guard lock(mu_);
    cacheLog()->warn("latent store {} occupies {} bytes with {} blocks left, over its cap of {} bytes: the cap is too "
                     "small for RocksDB's own files",
                     options_.path, occupied, entries_.size(), cap);
  }
}

bool DiskTier::reclaimLocked(double blob_age_cutoff) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;
  // Flushing every family lets RocksDB delete the WAL files.
  rocksdb::Status s = db_->Flush(fo, {default_cf_, blocks_cf_, access_cf_});
  if (s.ok()) {
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    co.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kForce;
    co.blob_garbage_collection_age_cutoff = blob_age_cutoff;
    s = db_->CompactRange(co, blocks_cf_, nullptr, nullptr);
  }
  if (s.ok()) {
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    s = db_->CompactRange(co, access_cf_, nullptr, nullptr);
  }
  if (!s.ok()) {
    noteWriteFailure(s.ToString());
    return false;
  }
  garbage_ = 0;
  reclaims_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status DiskTier::flush() {
  std::shared_lock db_lock(db_mu_);
  if (db_ == nullptr) return unavailable("latent store " + options_.path + " is closed after a write error");
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status s = db_->Flush(fo, {blocks_cf_, access_cf_});
  if (!s.ok()) noteWriteFailure(s.ToString());
  return fromRocks(s, "flushing latent store");
}

DiskTierStats DiskTier::stats() const {
  DiskTierStats s;
  {
    std::lock_guard lock(mu_);
    s.blocks = entries_.size();
    s.bytes = total_bytes_;
  }
  s.occupied_bytes = occupied_.load(std::memory_order_relaxed);
  s.evicted_blocks = evicted_.load(std::memory_order_relaxed);
  s.reclaims = reclaims_.load(std::memory_order_relaxed);
  s.removed_corrupt_stores = removed_corrupt_.load(std::memory_order_relaxed);
  s.read_errors = read_errors_.load(std::memory_order_relaxed);
  s.recovered_from_corruption = recovered_;
  {
    std::lock_guard lock(health_mu_);
    s.writable = writable_;
    s.write_error = write_error_;
  }
  s.write_failures = write_failures_.load(std::memory_order_relaxed);
  s.refused_writes = refused_writes_.load(std::memory_order_relaxed);
  s.unwritable_episodes = episodes_.load(std::memory_order_relaxed);
  s.write_recoveries = recoveries_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace lg::cache

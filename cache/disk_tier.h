// DiskTier: the RocksDB spill tier of the prefix cache (data/kv).
//
// Values are stored blocks (block_codec.h) keyed by their 32-byte chain key, in
// RocksDB with its integrated BlobDB so the large values live in blob files and
// the LSM holds only small references. Durability is relaxed on purpose: the WAL
// is written but not synced, so a crash may lose the newest blocks (they are
// recomputed) but never yields a torn one that is served: the block's header
// and checksum (and RocksDB's WAL and metadata checks) reject anything damaged.
//
// Privacy: stored blocks hold tenants' token ids verbatim, so the store is
// private to its owner: its directory is 0700 and every file 0600, including
// an existing store's (tightened at open) and set-aside corrupt stores.
//
// Capacity: a byte cap on what the store occupies on disk (every file under
// PATH: SST and blob files including garbage not yet collected, WAL, MANIFEST,
// OPTIONS; plus set-aside corrupt stores; RocksDB's info log goes to the
// cache's logger, not to a file) and an expiry, least recently
// used first. Access times live in memory (rebuilt from a small "access"
// column family at open) and are persisted in batches; eviction is therefore
// approximate across restarts.
//
// Write failures (disk full, I/O errors, RocksDB's background-error state):
// the tier logs the condition once, counts it, keeps serving reads, refuses
// writes without trying until a retry is due, and then, at most once per
// write_retry_interval and only when the file system has room, reopens
// RocksDB (not DB::Resume(), which is unsafe in 7.8: see reopen() in the .cc)
// and writes again; the first write that succeeds ends the episode.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_events.h"
#include "cache/fingerprint.h"
#include "common/status.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace lg::cache {

// The first bytes of a namespace's keyed tag (block_codec.h stores the same).
using NamespaceTag = std::array<uint8_t, 16>;

struct DiskTierOptions {
  std::string path;                      // the RocksDB directory, e.g. data/kv
  // What the store may occupy on disk (see the top of this file). Deleting a
  // block returns its space only after RocksDB compacts it away, so when the
  // store is over the cap the writer evicts down to 90% and then flushes and
  // compacts with blob garbage collection (docs/cache.md, "Capacity").
  uint64_t max_bytes = uint64_t{64} << 30;
  std::chrono::seconds ttl{std::chrono::hours(24 * 7)};  // 0: never expire
  // Whether block reads also verify RocksDB's own checksums (SST data blocks,
  // each blob record's CRC32c). On by default: the block codec checks every
  // value it serves end to end, but the keys and blob references in the SST
  // data blocks are parsed by RocksDB itself, and Debian's librocksdb keeps its
  // assertions on, so an unchecked damaged SST can abort the process
  // (CacheFaultTest.FlippedBytesInSstDataBlocks...). Off trades that safety
  // for restore speed: Debian's RocksDB computes CRC32c in software
  // (docs/benchmarks.md).
  bool verify_store_checksums = true;
  // While writes fail, at most one retry (reopening RocksDB, then writing)
  // per interval; writes in between are refused at once and counted.
  std::chrono::milliseconds write_retry_interval{10000};
  // RocksDB's memtable for blocks; the WAL is bounded to twice this. A disk
  // needs about this much free space for writing to resume after it filled up.
  uint64_t write_buffer_bytes = uint64_t{32} << 20;
};

// Set-aside corrupt stores (PATH.corrupt-<unix time>) beyond the newest
// kKeptCorruptStores, or older than kCorruptStoreMaxAge, are deleted when a
// store opens; the ones kept count against the byte cap and are the first to
// go when the store is over it.
inline constexpr size_t kKeptCorruptStores = 2;
inline constexpr std::chrono::seconds kCorruptStoreMaxAge{7 * 24 * 3600};

struct DiskTierStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;           // the stored blocks' own bytes
  uint64_t occupied_bytes = 0;  // on disk: PATH's files and set-aside stores (at the last enforceLimits)
  uint64_t evicted_blocks = 0;  // by the byte cap or expiry
  uint64_t reclaims = 0;        // flush + compaction runs that returned deleted blocks' space
  uint64_t removed_corrupt_stores = 0;  // set-aside stores deleted (count, age or byte cap)
  uint64_t read_errors = 0;     // RocksDB reported corruption or I/O errors on read
  bool recovered_from_corruption = false;  // the store could not open and was set aside

  // Writes. While !writable, reads still work and blocks are not persisted.
  bool writable = true;
  std::string write_error;          // what made it unwritable (empty when writable)
  uint64_t write_failures = 0;      // RocksDB writes that failed (and background errors)
  uint64_t refused_writes = 0;      // writes refused without trying while unwritable
  uint64_t unwritable_episodes = 0;  // times writing stopped working
  uint64_t write_recoveries = 0;     // times it worked again
};

// Result buffers of DiskTier::multiGet that a caller keeps across calls: each
// string's capacity is reused, so a restore allocates (and faults in) nothing
// after its first chunk. On this project's VMs a page fault costs ~12 us, so
// fresh buffers for 90 MB of blocks cost more than reading them.
struct ReadBuffers {
  std::vector<std::string> values;  // values[i]: key i's stored bytes, valid when found[i]
  std::vector<uint8_t> found;
};

class DiskTier {
 public:
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Opens or creates the store: the directory is created 0700 (parents as
  // the umask says), an existing store's directory and files are tightened to
  // 0700 / 0600, and every file RocksDB creates later is 0600. If RocksDB
  // reports the existing store corrupt (at open or while reading the access
  // table), it is renamed to PATH.corrupt-<unix time> and a fresh store is
  // created: losing a cache is acceptable, serving from a damaged one is not.
  // Set-aside stores beyond kKeptCorruptStores or kCorruptStoreMaxAge go.
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);

  // One value per key: the stored bytes, or a miss. A key whose read failed
  // (corruption, I/O error) is a miss, is counted, and is deleted. Reads the
  // keys in one RocksDB MultiGet into `out` (resized to keys.size()).
  void multiGet(std::span<const Digest> keys, ReadBuffers& out);
  // The same with fresh buffers (nullopt: a miss).
  std::vector<std::optional<std::string>> multiGet(std::span<const Digest> keys);

  // Writes blocks in one batch (WAL, not synced). Unavailable when the write
  // failed, or was refused because the store is unwritable and no retry is
  // due yet (see the top of this file); nothing is stored then.
  // `ns_tags` (empty, or one per block) are the blocks' namespace tags,
  // kept beside them so that purge() finds a namespace's blocks.
  // `on_stored(i)` runs for each block once it is stored, under the lock
  // that also orders removals, so that a sink (setBlockEvents) hears of a
  // block's storing before its removal.
  Status putBatch(std::span<const std::pair<Digest, std::string>> blocks, std::span<const Digest> ns_tags = {},
                  const std::function<void(size_t)>& on_stored = {});
  // Deletes every block stored under the namespace tag `ns_tag` (its first
  // 16 bytes are compared); returns how many. Unavailable while the store
  // cannot be written (nothing is forgotten then). The space returns when
  // RocksDB reclaims it, like any delete's.
  Result<uint64_t> purge(const Digest& ns_tag);

  // Deletes a key (after the caller rejected its value). The key is
  // forgotten even if the delete fails, so it is not offered again.
  void remove(const Digest& key);

  bool contains(const Digest& key) const;

  // Told of every block the store forgets (evicted, expired, purged,
  // rejected); storing is reported through putBatch's on_stored. Null: no
  // one. Set before blocks are written, cleared before the sink goes.
  void setBlockEvents(BlockEventSink* sink) { events_.store(sink, std::memory_order_release); }
  BlockEventSink* blockEvents() const { return events_.load(std::memory_order_acquire); }

  // Drops expired blocks, persists pending access times and, when the store
  // occupies more than the byte cap, deletes set-aside stores, evicts least
  // recently used blocks and reclaims their space (flush + compaction with
  // blob GC). A block is forgotten only once its delete is written; nothing
  // changes while the store is unwritable. Called by the write-back thread
  // after each batch; a directory listing when nothing is to do.
  void enforceLimits();

  // Flushes memtables to disk (blob files + SSTs). For tests and shutdown.
  Status flush();

  // Small metadata records beside the blocks (the cost model's state). A
  // missing key is an empty optional.
  Result<std::optional<std::string>> getMeta(std::string_view key);
  Status putMeta(std::string_view key, std::string_view value);

  const std::string& path() const { return options_.path; }
  uint64_t maxBytes() const { return options_.max_bytes; }  // the byte cap

  // Whether writes work now (DiskTierStats::writable, without the rest).
  bool writable() const;
  DiskTierStats stats() const;

 private:
  class Listener;
  struct Entry {
    int64_t last_access = 0;  // access stamp: microseconds since the epoch
    uint64_t bytes = 0;
    NamespaceTag ns_tag{};    // zero for blocks stored without one
  };
  DiskTier() = default;
  // A closed store's RocksDB instance and handles, to close without db_mu_.
  struct Detached {
    std::unique_ptr<rocksdb::DB> db;
    std::array<rocksdb::ColumnFamilyHandle*, 3> handles{};
  };
  // Need db_mu_ exclusively.
  Status openDbLocked();
  Detached detachLocked();  // forgets every entry too
  void closeDbLocked();
  static void closeDetached(Detached d);
  void reopen();  // takes db_mu_; needs write_mu_
  Status loadAccessTable();
  void recordAccess(const Digest& key, uint64_t bytes, int64_t now);
  void eraseLocked(const Digest& key);
  // Write health: whether a write may be tried now (when a retry is due, after
  // reopening RocksDB); what a write's outcome means. Need write_mu_ (except
  // noteWriteFailure, also called from RocksDB's background threads).
  enum class WriteGate : uint8_t { kOpen, kRetry, kRefused };
  WriteGate mayWrite();
  void noteWriteFailure(const std::string& error);
  void noteWriteSuccess();
  // Writes `batch`; on success forgets `victims` (their bytes become garbage
  // until reclaimed). Needs write_mu_.
  bool writeDeletes(rocksdb::WriteBatch& batch, const std::vector<std::pair<Digest, uint64_t>>& victims);
  void enforceCapLocked();  // needs write_mu_
  bool reclaimLocked(double blob_age_cutoff);  // needs write_mu_
  uint64_t measureOccupied() const;
  void pruneCorruptStores(bool all);

  DiskTierOptions options_;
  std::shared_ptr<Listener> listener_;
  // db_ and the handles change only when RocksDB is reopened after a write
  // error (reopen, from the writer thread, with write_mu_ held); every
  // use holds db_mu_ shared (never twice in one thread), the reopen holds it
  // exclusively. db_ is null if that reopen failed: reads miss, writes fail.
  mutable std::shared_mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;  // metadata; handles destroyed in closeDbLocked()
  rocksdb::ColumnFamilyHandle* blocks_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* access_cf_ = nullptr;

  mutable std::mutex mu_;
  std::unordered_map<Digest, Entry, DigestHash> entries_;  // guarded by mu_
  std::vector<Digest> dirty_access_;                        // guarded by mu_
  uint64_t total_bytes_ = 0;                                // guarded by mu_

  // Serializes the writing paths (putBatch, enforceLimits), so that eviction
  // never deletes a block a concurrent put just replaced. Held while RocksDB
  // writes, flushes or compacts: by the writer thread, practically alone.
  std::mutex write_mu_;
  uint64_t garbage_ = 0;  // guarded by write_mu_: deleted blocks' bytes not yet reclaimed
  bool cap_below_overhead_logged_ = false;  // guarded by write_mu_

  mutable std::mutex health_mu_;
  bool writable_ = true;                                 // guarded by health_mu_
  std::string write_error_;                              // guarded by health_mu_
  std::chrono::steady_clock::time_point next_retry_{};  // guarded by health_mu_

  mutable std::mutex corrupt_mu_;
  std::vector<std::string> corrupt_stores_;  // guarded by corrupt_mu_: kept set-aside stores, oldest first
  uint64_t corrupt_bytes_ = 0;               // guarded by corrupt_mu_

  std::atomic<uint64_t> occupied_{0};
  std::atomic<uint64_t> evicted_{0}, reclaims_{0}, removed_corrupt_{0};
  std::atomic<BlockEventSink*> events_{nullptr};
  std::atomic<uint64_t> read_errors_{0};
  std::atomic<uint64_t> write_failures_{0}, refused_writes_{0}, episodes_{0}, recoveries_{0};
  bool recovered_ = false;
};

// What openDiskTierOrDegrade found: the tier, or null and why not.
struct DiskTierOpen {
  std::unique_ptr<DiskTier> tier;  // null: the cache runs with tier 0 only
  std::string error;               // why the store could not be opened (empty when it was)
};

// For a server's default store (data/kv): a store that cannot be opened (the
// path is a file, a directory it may not use, RocksDB refuses it) must not
// stop the server from serving. Logs loudly (error level, the path and the
// reason) and returns a null tier with the reason, which the caller passes to
// the cache (PrefixCacheOptions::disk_error) so that CacheStats report
// DiskState::kDegraded. An explicit store the user named (`latentgate forward
// --cache-dir`) should use DiskTier::open and fail instead.
DiskTierOpen openDiskTierOrDegrade(const DiskTierOptions& options);

}  // namespace lg::cache

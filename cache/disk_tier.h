// DiskTier: the RocksDB spill tier of the prefix cache (data/kv).
//
// Values are stored blocks (block_codec.h) keyed by their 32-byte chain key, in
// RocksDB with its integrated BlobDB so the large values live in blob files and
// the LSM holds only small references. Durability is relaxed on purpose: the WAL
// is written but not synced, so a crash may lose the newest blocks (they are
// recomputed) but never yields a torn one that is served: the block's header
// and checksum (and RocksDB's WAL and metadata checks) reject anything damaged.
//
// Capacity: a byte cap and an expiry, least recently used first. Access times
// live in memory (rebuilt from a small "access" column family at open) and are
// persisted in batches; eviction is therefore approximate across restarts.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/fingerprint.h"
#include "common/status.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace lg::cache {

struct DiskTierOptions {
  std::string path;                      // the RocksDB directory, e.g. data/kv
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
};

struct DiskTierStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t evicted_blocks = 0;  // by the byte cap or expiry
  uint64_t read_errors = 0;     // RocksDB reported corruption or I/O errors on read
  bool recovered_from_corruption = false;  // the store could not open and was set aside
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

  // Opens or creates the store. If RocksDB reports the existing store corrupt
  // (at open or while reading the access table), it is renamed to
  // PATH.corrupt-<unix time> and a fresh store is created: losing a cache is
  // acceptable, serving from a damaged one is not.
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);

  // One value per key: the stored bytes, or a miss. A key whose read failed
  // (corruption, I/O error) is a miss, is counted, and is deleted. Reads the
  // keys in one RocksDB MultiGet into `out` (resized to keys.size()).
  void multiGet(std::span<const Digest> keys, ReadBuffers& out);
  // The same with fresh buffers (nullopt: a miss).
  std::vector<std::optional<std::string>> multiGet(std::span<const Digest> keys);

  // Writes blocks in one batch (WAL, not synced).
  Status putBatch(std::span<const std::pair<Digest, std::string>> blocks);

  // Deletes a key (after the caller rejected its value).
  void remove(const Digest& key);

  bool contains(const Digest& key) const;

  // Evicts least recently used blocks until under the byte cap and drops
  // expired ones; persists pending access times. Called by the write-back
  // thread after each batch, and cheap when nothing is to do.
  void enforceLimits();

  // Flushes memtables to disk (blob files + SSTs). For tests and shutdown.
  Status flush();

  // Small metadata records beside the blocks (the cost model's state). A
  // missing key is an empty optional.
  Result<std::optional<std::string>> getMeta(std::string_view key);
  Status putMeta(std::string_view key, std::string_view value);

  const std::string& path() const { return options_.path; }

  DiskTierStats stats() const;

 private:
  struct Entry {
    int64_t last_access = 0;  // access stamp: microseconds since the epoch
    uint64_t bytes = 0;
  };
  DiskTier() = default;
  Status loadAccessTable();
  void closeDb();
  void recordAccess(const Digest& key, uint64_t bytes, int64_t now);
  void eraseLocked(const Digest& key);

  DiskTierOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;  // metadata; handles destroyed in closeDb()
  rocksdb::ColumnFamilyHandle* blocks_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* access_cf_ = nullptr;

  mutable std::mutex mu_;
  std::unordered_map<Digest, Entry, DigestHash> entries_;  // guarded by mu_
  std::vector<Digest> dirty_access_;                        // guarded by mu_
  uint64_t total_bytes_ = 0;                                // guarded by mu_
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> read_errors_{0};
  bool recovered_ = false;
};

}  // namespace lg::cache

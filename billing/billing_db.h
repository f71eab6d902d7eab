// BillingDb: the durable store of billing/ (DATA/billing): API keys now, the
// ledger later. RocksDB with its write-ahead log on and every write synced
// before it returns, because a key that was shown to its owner, or a ledger
// entry a client saw, must survive a crash (unlike the latent store, which
// may lose its newest blocks). The directory is private (0700, files 0600):
// it holds key hashes and, later, usage per key.
//
// Values are small; keys are prefixed by their kind ("key/", "keyhash/",
// "resp/", ...), so one store serves every table.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace lg::billing {

class BillingDb {
 public:
  static Result<std::unique_ptr<BillingDb>> open(const std::string& path);
  ~BillingDb();
  BillingDb(const BillingDb&) = delete;
  BillingDb& operator=(const BillingDb&) = delete;

  // Writes the pairs and deletes the keys atomically, synced.
  Status write(const std::vector<std::pair<std::string, std::string>>& puts, const std::vector<std::string>& deletes = {});
  // The same without waiting for the disk: the write-ahead log holds it, so
  // a crash of the process keeps it, but a power loss may drop the newest
  // such writes. For records whose loss costs a client a retry rather than
  // money or a key (stored responses), written on threads an fsync must not
  // block (the scheduler's engine thread).
  Status writeUnsynced(const std::vector<std::pair<std::string, std::string>>& puts,
                       const std::vector<std::string>& deletes = {});
  Result<std::optional<std::string>> get(std::string_view key) const;
  // Calls fn(key, value) for every key starting with prefix, in key order,
  // until it returns false.
  Status scan(std::string_view prefix, const std::function<bool(std::string_view, std::string_view)>& fn) const;

  const std::string& path() const { return path_; }

 private:
  BillingDb(std::unique_ptr<rocksdb::DB> db, std::string path);
  Status writeBatch(const std::vector<std::pair<std::string, std::string>>& puts,
                    const std::vector<std::string>& deletes, bool sync);
  std::unique_ptr<rocksdb::DB> db_;
  std::string path_;
};

}  // namespace lg::billing

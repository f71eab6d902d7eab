// BillingDb: the durable store of billing/ (DATA/billing): API keys, stored
// responses, prices and the ledger (docs/billing.md). RocksDB with its write-ahead log on and every write synced
// before it returns, because a key that was shown to its owner, or a ledger
// entry a client saw, must survive a crash (unlike the latent store, which
// may lose its newest blocks). The directory is private (0700, files 0600):
// it holds key hashes and, later, usage per key.
//
// Values are small; keys are prefixed by their kind ("key/", "keyhash/",
// "resp/", "led/", "agg/", "price/", ...), so one store serves every table.
// Counters are merged, not read and rewritten: a merge operand is a list of
// little-endian uint64s, and the store adds operands element-wise (a shorter
// list counts as zeros beyond its end), so concurrent writers never lose an
// increment and a counter's value is always the sum of what was merged.
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

// Puts, counter merges and deletes applied together (one WriteBatch).
struct WriteOps {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::pair<std::string, std::string>> merges;  // key, encodeCounters(...)
  std::vector<std::string> deletes;
};

// A merge operand / counter value: values as little-endian uint64s.
std::string encodeCounters(const std::vector<uint64_t>& values);
// Its values; DataLoss when the size is not a multiple of 8.
Result<std::vector<uint64_t>> decodeCounters(std::string_view bytes);

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
  // Applies `ops` atomically; synced when `sync` (the ledger's commits).
  Status apply(const WriteOps& ops, bool sync);
  Result<std::optional<std::string>> get(std::string_view key) const;
  // Calls fn(key, value) for every key starting with prefix, in key order,
  // until it returns false.
  Status scan(std::string_view prefix, const std::function<bool(std::string_view, std::string_view)>& fn) const;
  // The same for every key in [begin, end), in key order.
  Status scanRange(std::string_view begin, std::string_view end,
                   const std::function<bool(std::string_view, std::string_view)>& fn) const;

  const std::string& path() const { return path_; }

  // Calls fn(key, value) for the keys in [begin, end) from the last down,
  // until it returns false or `max_examined` keys were passed to it (the
  // bound on what one call may read: "the newest N" of a sparse filter).
  Status scanRangeReverse(std::string_view begin, std::string_view end, size_t max_examined,
                          const std::function<bool(std::string_view, std::string_view)>& fn) const;

 private:
  BillingDb(std::unique_ptr<rocksdb::DB> db, std::string path);
  Status writeBatch(const std::vector<std::pair<std::string, std::string>>& puts,
                    const std::vector<std::string>& deletes, bool sync);
  std::unique_ptr<rocksdb::DB> db_;
  std::string path_;
};

}  // namespace lg::billing

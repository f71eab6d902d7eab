#include "billing/billing_db.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

namespace lg::billing {

namespace {

Status fromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::ok();
  if (s.IsCorruption()) return dataLoss(std::string(what) + ": " + s.ToString());
  return unavailable(std::string(what) + ": " + s.ToString());
}

// Element-wise uint64 addition (wrapping, as unsigned arithmetic does; the
// ledger's counters stay far below 2^64). Associative and commutative, so
// RocksDB may combine operands in any grouping during reads and compactions.
class CounterAddOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& /*key*/, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger* /*logger*/) const override {
    if (value.size() % 8 != 0 || (existing != nullptr && existing->size() % 8 != 0)) return false;  // corruption
    const size_t n = std::max(value.size(), existing != nullptr ? existing->size() : 0) / 8;
    new_value->assign(n * 8, '\0');
    for (size_t i = 0; i < n; ++i) {
      uint64_t sum = 0;
      for (const rocksdb::Slice* s : {existing, &value}) {
        if (s == nullptr || (i + 1) * 8 > s->size()) continue;
        uint64_t v = 0;
        for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<uint8_t>((*s)[i * 8 + b]);
        sum += v;
      }
      for (int b = 0; b < 8; ++b) (*new_value)[i * 8 + b] = static_cast<char>((sum >> (8 * b)) & 0xff);
    }
    return true;
  }
  const char* Name() const override { return "lg.CounterAdd"; }
};

}  // namespace

std::string encodeCounters(const std::vector<uint64_t>& values) {
  std::string out(values.size() * 8, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    for (int b = 0; b < 8; ++b) out[i * 8 + b] = static_cast<char>((values[i] >> (8 * b)) & 0xff);
  }
  return out;
}

Result<std::vector<uint64_t>> decodeCounters(std::string_view bytes) {
  if (bytes.size() % 8 != 0) return dataLoss("a counter value of " + std::to_string(bytes.size()) + " bytes");
  std::vector<uint64_t> out(bytes.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<uint8_t>(bytes[i * 8 + b]);
    out[i] = v;
  }
  return out;
}

BillingDb::BillingDb(std::unique_ptr<rocksdb::DB> db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}
BillingDb::~BillingDb() = default;

Result<std::unique_ptr<BillingDb>> BillingDb::open(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return unavailable("cannot create " + path + ": " + ec.message());
  if (::chmod(path.c_str(), 0700) != 0) return unavailable("cannot make " + path + " private");
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 2;
  options.merge_operator = std::make_shared<CounterAddOperator>();
  rocksdb::DB* raw = nullptr;
  LG_RETURN_IF_ERROR(fromRocks(rocksdb::DB::Open(options, path, &raw), "opening the billing store " + path));
  std::unique_ptr<rocksdb::DB> db(raw);
  // Files RocksDB created with the process umask: private, like the directory.
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::replace, ec);
  }
  return std::unique_ptr<BillingDb>(new BillingDb(std::move(db), path));
}

Status BillingDb::write(const std::vector<std::pair<std::string, std::string>>& puts,
                        const std::vector<std::string>& deletes) {
  // A key shown to its owner (or a ledger entry a client saw) survives a crash.
  return writeBatch(puts, deletes, /*sync=*/true);
}

Status BillingDb::writeUnsynced(const std::vector<std::pair<std::string, std::string>>& puts,
                                const std::vector<std::string>& deletes) {
  return writeBatch(puts, deletes, /*sync=*/false);
}

Status BillingDb::writeBatch(const std::vector<std::pair<std::string, std::string>>& puts,
                             const std::vector<std::string>& deletes, bool sync) {
  rocksdb::WriteBatch batch;
  for (const auto& [k, v] : puts) batch.Put(k, v);
  for (const std::string& k : deletes) batch.Delete(k);
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return fromRocks(db_->Write(wo, &batch), "writing the billing store");
}

Status BillingDb::apply(const WriteOps& ops, bool sync) {
  rocksdb::WriteBatch batch;
  for (const auto& [k, v] : ops.puts) batch.Put(k, v);
  for (const auto& [k, v] : ops.merges) batch.Merge(k, v);
  for (const std::string& k : ops.deletes) batch.Delete(k);
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return fromRocks(db_->Write(wo, &batch), "writing the billing store");
}

Result<std::optional<std::string>> BillingDb::get(std::string_view key) const {
  std::string value;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  LG_RETURN_IF_ERROR(fromRocks(s, "reading the billing store"));
  return std::optional<std::string>(std::move(value));
}

Status BillingDb::scan(std::string_view prefix, const std::function<bool(std::string_view, std::string_view)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (!k.starts_with(rocksdb::Slice(prefix.data(), prefix.size()))) break;
    if (!fn(std::string_view(k.data(), k.size()), std::string_view(it->value().data(), it->value().size()))) break;
  }
  return fromRocks(it->status(), "scanning the billing store");
}

Status BillingDb::scanRange(std::string_view begin, std::string_view end,
                            const std::function<bool(std::string_view, std::string_view)>& fn) const {
  rocksdb::ReadOptions ro;
  const rocksdb::Slice upper(end.data(), end.size());
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(rocksdb::Slice(begin.data(), begin.size())); it->Valid(); it->Next()) {
    if (!fn(std::string_view(it->key().data(), it->key().size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  return fromRocks(it->status(), "scanning the billing store");
}

Status BillingDb::scanRangeReverse(std::string_view begin, std::string_view end, size_t max_examined,
                                   const std::function<bool(std::string_view, std::string_view)>& fn) const {
  const rocksdb::Slice lower(begin.data(), begin.size());
  const rocksdb::Slice upper(end.data(), end.size());
  rocksdb::ReadOptions ro;
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  // The last key <= end, then one more step back if it is `end` itself (exclusive).
  it->SeekForPrev(upper);
  if (it->Valid() && it->key().compare(upper) >= 0) it->Prev();
  for (size_t examined = 0; it->Valid() && examined < max_examined; it->Prev(), ++examined) {
    if (!fn(std::string_view(it->key().data(), it->key().size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  return fromRocks(it->status(), "scanning the billing store");
}

}  // namespace lg::billing

#include "billing/billing_db.h"

#include <sys/stat.h>

#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

namespace lg::billing {

namespace {

Status fromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::ok();
  if (s.IsCorruption()) return dataLoss(std::string(what) + ": " + s.ToString());
  return unavailable(std::string(what) + ": " + s.ToString());
}

}  // namespace

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

}  // namespace lg::billing

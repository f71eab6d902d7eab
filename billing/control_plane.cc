#include "billing/control_plane.h"

#include <algorithm>

namespace lg::billing {

bool isControlKey(std::string_view key) {
  return std::any_of(std::begin(kControlPrefixes), std::end(kControlPrefixes),
                     [&](std::string_view p) { return key.starts_with(p); });
}

bool wellFormedControlKey(std::string_view key) {
  if (key.empty() || key.size() > 512 || !isControlKey(key)) return false;
  return std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// ---------------------------------------------------------------- ControlTxn

Result<std::vector<std::optional<std::string>>> ControlTxn::get(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out(keys.size());
  std::vector<std::string> to_read;
  std::vector<size_t> slots;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!wellFormedControlKey(keys[i])) continue;  // an id no record can have
    // This change's own last write of the key, if any.
    auto own = std::find_if(writes_.rbegin(), writes_.rend(), [&](const ControlRecord& r) { return r.key == keys[i]; });
    if (own != writes_.rend()) {
      out[i] = own->value;
      continue;
    }
    to_read.push_back(keys[i]);
    slots.push_back(i);
  }
  if (to_read.empty()) return out;
  LG_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> read_values, read(to_read));
  if (read_values.size() != to_read.size()) return internalError("control records: a read returned the wrong count");
  for (size_t j = 0; j < slots.size(); ++j) out[slots[j]] = std::move(read_values[j]);
  return out;
}

Result<std::optional<std::string>> ControlTxn::get(const std::string& key) {
  LG_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> values, get(std::vector<std::string>{key}));
  return std::move(values[0]);
}

void ControlTxn::put(std::string key, std::string value) {
  writes_.push_back(ControlRecord{std::move(key), std::move(value)});
}

void ControlTxn::erase(std::string key) { writes_.push_back(ControlRecord{std::move(key), std::nullopt}); }

// -------------------------------------------------------------- ControlPlane

void ControlPlane::addApplier(std::vector<std::string> prefixes, ControlApplier* applier) {
  appliers_.emplace_back(std::move(prefixes), applier);
}

Status ControlPlane::applyLocally(const std::vector<ControlRecord>& records,
                                  const std::vector<std::pair<std::string, std::string>>& extra) {
  WriteOps ops;
  ops.puts = extra;
  for (const ControlRecord& r : records) {
    if (r.value) {
      ops.puts.emplace_back(r.key, *r.value);
    } else {
      ops.deletes.push_back(r.key);
    }
  }
  if (ops.puts.empty() && ops.deletes.empty()) return Status::ok();
  LG_RETURN_IF_ERROR(db_.apply(ops, /*sync=*/true));
  for (const auto& [prefixes, applier] : appliers_) {
    std::vector<ControlRecord> mine;
    for (const ControlRecord& r : records) {
      if (std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return r.key.starts_with(p); })) {
        mine.push_back(r);
      }
    }
    if (!mine.empty()) applier->applyControl(mine);
  }
  return Status::ok();
}

// --------------------------------------------------------- LocalControlPlane

namespace {

class LocalTxn final : public ControlTxn {
 public:
  explicit LocalTxn(const BillingDb& db) : db_(db) {}

 protected:
  Result<std::vector<std::optional<std::string>>> read(const std::vector<std::string>& keys) override {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) {
      LG_ASSIGN_OR_RETURN(std::optional<std::string> value, db_.get(key));
      out.push_back(std::move(value));
    }
    return out;
  }

 private:
  const BillingDb& db_;
};

}  // namespace

Status LocalControlPlane::update(std::string_view what, const Change& change) {
  std::lock_guard lock(mu_);
  LocalTxn txn(db());
  LG_RETURN_IF_ERROR(change(txn));
  for (const ControlRecord& r : txn.writes()) {
    if (!wellFormedControlKey(r.key)) {
      return internalError(std::string(what) + ": not a control record key: " + quoteValue(r.key));
    }
  }
  return applyLocally(txn.writes()).withContext(what);
}

}  // namespace lg::billing

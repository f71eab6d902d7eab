#include "billing/key_store.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/file_util.h"
#include "common/hex.h"
#include "common/logging.h"
#include "common/secret_strength.h"
#include "common/team_id.h"
#include "common/unix_time.h"

namespace lg::billing {

namespace {

using nlohmann::json;

constexpr std::string_view kKeyPrefix = "key/";          // key/<id> -> info JSON
constexpr std::string_view kTeamPrefix = "team/";        // team/<id> -> TeamInfo JSON
constexpr std::string_view kSecretPrefix = "lg-";

std::string sha256Raw(std::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), reinterpret_cast<unsigned char*>(out.data()));
  return out;
}


Result<std::string> randomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return internalError("the system random generator failed");
  }
  return out;
}

std::string base64url(std::string_view raw) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : raw) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  return out;
}

json toJson(const ApiKeyInfo& k, const std::string& hash_hex) {
  return {{"id", k.id},     {"team", k.team},     {"name", k.name},
          {"created", k.created_unix}, {"hint", k.hint}, {"sha256", hash_hex},
          {"team_generation", k.team_generation}};
}

json toJson(const TeamInfo& t) {
  return {{"id", t.id}, {"generation", t.generation}, {"since_us", t.since_us}, {"deleted_us", t.deleted_us},
          {"key_ids", t.key_ids}};
}

std::optional<TeamInfo> teamFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j["id"].is_string()) return std::nullopt;
  TeamInfo t;
  t.id = j["id"].get<std::string>();
  try {
    t.generation = j.value("generation", uint32_t{0});
    t.since_us = j.value("since_us", int64_t{0});
    t.deleted_us = j.value("deleted_us", int64_t{0});
  } catch (const json::exception&) {
    return std::nullopt;  // a field of the wrong type
  }
  if (j.contains("key_ids") && j["key_ids"].is_array()) {
    for (const json& id : j["key_ids"]) {
      if (id.is_string()) t.key_ids.push_back(id.get<std::string>());
    }
  }
  return t;
}

std::string teamRecordKey(std::string_view id) { return std::string(kTeamPrefix) + std::string(id); }

// A key record's info and the SHA-256 hex of the key, or nothing when damaged.
std::optional<std::pair<ApiKeyInfo, std::string>> keyFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha256") || !j["sha256"].is_string()) return std::nullopt;
  ApiKeyInfo info;
  try {
    info.id = j.value("id", "");
    info.team = j.value("team", "");
    info.name = j.value("name", "");
    info.created_unix = j.value("created", int64_t{0});
    info.hint = j.value("hint", "");
    info.team_generation = j.value("team_generation", uint32_t{0});
  } catch (const json::exception&) {
    return std::nullopt;  // a field of the wrong type
  }
  return std::make_pair(std::move(info), j["sha256"].get<std::string>());
}

spdlog::logger* keyLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

}  // namespace

KeyStore::KeyStore(std::unique_ptr<LocalControlPlane> own, ControlPlane& control)
    : own_control_(std::move(own)), control_(control) {}

Result<std::unique_ptr<KeyStore>> KeyStore::open(BillingDb& db) {
  auto own = std::make_unique<LocalControlPlane>(db);
  ControlPlane& control = *own;
  return load(db, std::move(own), control);
}

Result<std::unique_ptr<KeyStore>> KeyStore::open(BillingDb& db, ControlPlane& control) {
  return load(db, nullptr, control);
}

Result<std::unique_ptr<KeyStore>> KeyStore::load(BillingDb& db, std::unique_ptr<LocalControlPlane> own,
                                                 ControlPlane& control) {
  std::unique_ptr<KeyStore> store(new KeyStore(std::move(own), control));
  Status bad;
  LG_RETURN_IF_ERROR(db.scan(kTeamPrefix, [&](std::string_view key, std::string_view value) {
    auto team = teamFromJson(value);
    if (!team) {
      bad = dataLoss("billing store: team record " + std::string(key) + " is damaged");
      return false;
    }
    store->teams_[team->id] = std::move(*team);
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  std::set<std::string> synthesized;
  LG_RETURN_IF_ERROR(db.scan(kKeyPrefix, [&](std::string_view key, std::string_view value) {
    auto parsed = keyFromJson(value);
    if (!parsed) {
      bad = dataLoss("billing store: key record " + std::string(key) + " is damaged");
      return false;
    }
    auto& [info, hash] = *parsed;
    // A key made before team records existed: its team gets one, from its keys.
    auto [team, added] = store->teams_.try_emplace(info.team);
    if (added) {
      team->second.id = info.team;
      team->second.generation = info.team_generation;
      team->second.since_us = info.created_unix * 1'000'000;
      synthesized.insert(info.team);
    }
    if (synthesized.contains(info.team)) {
      team->second.key_ids.push_back(info.id);
      team->second.since_us = std::min(team->second.since_us, info.created_unix * 1'000'000);
    }
    store->hash_of_[info.id] = hash;
    store->by_hash_[hash] = std::move(info);
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  if (!synthesized.empty()) {
    // Written now, directly (before any control plane shares the records):
    // a deletion reads the team's keys from its record, on any replica.
    std::vector<std::pair<std::string, std::string>> puts;
    for (const std::string& id : synthesized) puts.emplace_back(teamRecordKey(id), toJson(store->teams_[id]).dump());
    LG_RETURN_IF_ERROR(db.write(puts));
  }
  control.addApplier({std::string(kKeyPrefix), std::string(kTeamPrefix)}, store.get());
  return store;
}

Result<std::pair<ApiKeyInfo, std::string>> KeyStore::create(std::string_view team, std::string_view name,
                                                            bool reuse_deleted_team) {
  LG_RETURN_IF_ERROR(checkTeamId(team));
  if (name.empty() || name.size() > 128 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; })) {
    return invalidArgument("name: expected 1..128 printable characters");
  }
  LG_ASSIGN_OR_RETURN(std::string secret_bytes, randomBytes(32));
  LG_ASSIGN_OR_RETURN(std::string id_bytes, randomBytes(8));
  const std::string key = std::string(kSecretPrefix) + base64url(secret_bytes);
  ApiKeyInfo info;
  info.id = "key_" + hexLower(id_bytes);
  info.team = std::string(team);
  info.name = std::string(name);
  info.created_unix = unixSeconds();
  info.hint = key.substr(0, 7) + "...";
  const std::string hash_hex = hexLower(sha256Raw(key));
  // The team's record and its new key change together in one transaction of
  // the control plane: a deletion cannot slip between the check and the new
  // key, and keys made at once (here or on another replica) are all listed.
  LG_RETURN_IF_ERROR(control_.update("creating an API key", [&](ControlTxn& txn) -> Status {
    LG_ASSIGN_OR_RETURN(std::optional<std::string> current, txn.get(teamRecordKey(team)));
    TeamInfo t;
    if (current) {
      std::optional<TeamInfo> parsed = teamFromJson(*current);
      if (!parsed) return dataLoss("control records: team record of " + std::string(team) + " is damaged");
      t = std::move(*parsed);
    } else {
      t.id = std::string(team);
      t.since_us = info.created_unix * 1'000'000;
    }
    if (t.deleted()) {
      if (!reuse_deleted_team) {
        return Status{StatusCode::kAlreadyExists, "team " + t.id +
                                  " was deleted; its id is not reused unless the request says "
                                  "\"reuse_deleted_team\": true (a new team under the old name, sharing nothing with it)"};
      }
      // The next generation: a fresh cache namespace and fingerprint scope.
      t.generation += 1;
      t.since_us = unixMicros();
      t.deleted_us = 0;
      t.key_ids.clear();
    }
    info.team_generation = t.generation;
    t.key_ids.push_back(info.id);
    txn.put(std::string(kKeyPrefix) + info.id, toJson(info, hash_hex).dump());
    txn.put(teamRecordKey(t.id), toJson(t).dump());
    return Status::ok();
  }));
  return std::make_pair(std::move(info), key);
}

std::vector<ApiKeyInfo> KeyStore::list() const {
  std::vector<ApiKeyInfo> out;
  {
    std::shared_lock lock(mu_);
    for (const auto& [hash, info] : by_hash_) out.push_back(info);
  }
  std::sort(out.begin(), out.end(), [](const ApiKeyInfo& a, const ApiKeyInfo& b) {
    return a.created_unix != b.created_unix ? a.created_unix < b.created_unix : a.id < b.id;
  });
  return out;
}

Status KeyStore::revoke(std::string_view id) {
  const std::string record = std::string(kKeyPrefix) + std::string(id);
  // Applied here before update() returns: a revoked key never authenticates
  // on this replica after revoke() returns.
  return control_.update("revoking an API key", [&](ControlTxn& txn) -> Status {
    LG_ASSIGN_OR_RETURN(std::optional<std::string> current, txn.get(record));
    if (!current) return notFound("no API key with id " + std::string(id));
    txn.erase(record);
    return Status::ok();
  });
}

void KeyStore::notifyRevoked(const std::vector<ApiKeyInfo>& revoked) {
  std::vector<std::function<void(const ApiKeyInfo&)>> observers;
  {
    std::lock_guard observers_lock(observers_mu_);
    observers = observers_;
  }
  for (const ApiKeyInfo& key : revoked) {
    for (const auto& observer : observers) observer(key);
  }
}

Result<DeletedTeam> KeyStore::deleteTeam(std::string_view team, int64_t now_us) {
  DeletedTeam out;
  // One transaction: no key of the team authenticates, and none can be made
  // for it without reuse_deleted_team, once this returns. The keys are those
  // its record lists (every key of this generation, wherever it was made),
  // not those this replica happens to know yet.
  LG_RETURN_IF_ERROR(control_.update("deleting a team", [&](ControlTxn& txn) -> Status {
    out = DeletedTeam{};
    LG_ASSIGN_OR_RETURN(std::optional<std::string> current, txn.get(teamRecordKey(team)));
    if (!current) return notFound("no team " + std::string(team));
    std::optional<TeamInfo> t = teamFromJson(*current);
    if (!t) return dataLoss("control records: team record of " + std::string(team) + " is damaged");
    std::vector<std::string> keys;
    for (const std::string& id : t->key_ids) keys.push_back(std::string(kKeyPrefix) + id);
    LG_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> values, txn.get(keys));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!values[i]) continue;  // revoked before
      if (auto parsed = keyFromJson(*values[i])) out.revoked.push_back(parsed->first);
      txn.erase(keys[i]);
    }
    if (!t->deleted()) {
      t->deleted_us = std::max<int64_t>(now_us, 1);
      txn.put(teamRecordKey(t->id), toJson(*t).dump());
    }
    out.team = std::move(*t);
    return Status::ok();
  }));
  return out;
}

std::optional<TeamInfo> KeyStore::team(std::string_view id) const {
  std::shared_lock lock(mu_);
  auto it = teams_.find(id);
  if (it == teams_.end()) return std::nullopt;
  return it->second;
}

std::vector<TeamInfo> KeyStore::teams() const {
  std::shared_lock lock(mu_);
  std::vector<TeamInfo> out;
  for (const auto& [id, t] : teams_) out.push_back(t);
  return out;
}

void KeyStore::applyControl(const std::vector<ControlRecord>& records) {
  std::vector<ApiKeyInfo> revoked;
  std::vector<TeamInfo> deleted_elsewhere;
  {
    std::unique_lock lock(mu_);
    for (const ControlRecord& r : records) {
      if (r.key.starts_with(kKeyPrefix)) {
        const std::string id = r.key.substr(kKeyPrefix.size());
        auto old = hash_of_.find(id);
        if (old != hash_of_.end() && !r.value) {
          auto it = by_hash_.find(old->second);
          revoked.push_back(std::move(it->second));
          by_hash_.erase(it);
          hash_of_.erase(old);
          continue;
        }
        if (!r.value) continue;
        auto parsed = keyFromJson(*r.value);
        if (!parsed || parsed->first.id != id) {
          keyLog()->error("control records: key record {} is damaged; not applied", r.key);
          continue;
        }
        if (old != hash_of_.end()) by_hash_.erase(old->second);
        hash_of_[id] = parsed->second;
        by_hash_[parsed->second] = std::move(parsed->first);
      } else if (r.key.starts_with(kTeamPrefix)) {
        const std::string id = r.key.substr(kTeamPrefix.size());
        if (!r.value) {
          teams_.erase(id);  // never written: teams are kept, deleted or not
          continue;
        }
        std::optional<TeamInfo> t = teamFromJson(*r.value);
        if (!t || t->id != id) {
          keyLog()->error("control records: team record {} is damaged; not applied", r.key);
          continue;
        }
        auto it = teams_.find(id);
        const bool newly_deleted =
            t->deleted() && (it == teams_.end() || !it->second.deleted() || it->second.generation != t->generation);
        if (newly_deleted && r.remote) deleted_elsewhere.push_back(*t);
        teams_[id] = std::move(*t);
      }
    }
  }
  // After the lock: the observers cancel the keys' requests in flight and
  // purge what this replica holds of a deleted team.
  notifyRevoked(revoked);
  if (!deleted_elsewhere.empty()) {
    std::vector<std::function<void(const TeamInfo&)>> observers;
    {
      std::lock_guard observers_lock(observers_mu_);
      observers = team_observers_;
    }
    for (const TeamInfo& t : deleted_elsewhere) {
      for (const auto& observer : observers) observer(t);
    }
  }
}

void KeyStore::onTeamDeletedElsewhere(std::function<void(const TeamInfo&)> observer) {
  std::lock_guard lock(observers_mu_);
  team_observers_.push_back(std::move(observer));
}

void KeyStore::onRevoke(std::function<void(const ApiKeyInfo&)> observer) {
  std::lock_guard lock(observers_mu_);
  observers_.push_back(std::move(observer));
}

std::optional<Principal> KeyStore::authenticate(std::string_view key) const {
  if (key.size() < kSecretPrefix.size() || key.size() > 256) return std::nullopt;
  const std::string hash_hex = hexLower(sha256Raw(key));
  std::shared_lock lock(mu_);
  auto it = by_hash_.find(hash_hex);
  if (it == by_hash_.end()) return std::nullopt;
  // A live key belongs to its team's current generation (a deletion revokes
  // every key before a reuse can start the next one); a key of an older
  // generation would read a namespace the team's new owner does not own.
  const auto team = teams_.find(it->second.team);
  LG_CHECK(team != teams_.end() && !team->second.deleted() &&
               team->second.generation == it->second.team_generation,
           "an API key outlived its team's generation");
  return Principal{it->second.id, it->second.team, it->second.name, it->second.team_generation};
}

Result<AdminKey> AdminKey::loadOrCreate(std::string_view configured, const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  AdminKey admin;
  if (!configured.empty()) {
    LG_RETURN_IF_ERROR(checkSecretStrength(configured, "the admin key"));
    admin.hash_ = sha256Raw(configured);
    return admin;
  }
  if (std::filesystem::exists(path)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return invalidArgument(path + " is not a regular file");
    if ((st.st_mode & 077) != 0) return permissionDenied(path + " may be read by group or others; make it 0600");
    LG_ASSIGN_OR_RETURN(std::string text, readFile(path, 4096));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.size() < 16) return dataLoss(path + " does not hold an admin key");
    // A key written into the file by hand must be as hard to guess as one
    // set in the configuration (the file's own key, generated, always is).
    LG_RETURN_IF_ERROR(checkSecretStrength(text, "the admin key in " + path));
    admin.hash_ = sha256Raw(text);
    return admin;
  }
  LG_ASSIGN_OR_RETURN(std::string bytes, randomBytes(32));
  const std::string key = "lg-admin-" + base64url(bytes);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  LG_RETURN_IF_ERROR(writeFileAtomic(path, key + "\n", 0600));
  admin.hash_ = sha256Raw(key);
  if (created != nullptr) *created = true;
  return admin;
}

bool AdminKey::matches(std::string_view presented) const {
  if (hash_.empty() || presented.empty()) return false;
  const std::string h = sha256Raw(presented);
  return CRYPTO_memcmp(h.data(), hash_.data(), h.size()) == 0;
}

std::string_view bearerToken(std::string_view authorization) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kBearer[i]))) {
      return {};
    }
  }
  std::string_view token = authorization.substr(kBearer.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

}  // namespace lg::billing

#include "billing/key_store.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/file_util.h"
#include "common/hex.h"
#include "common/secret_strength.h"
#include "common/team_id.h"
#include "common/unix_time.h"

namespace lg::billing {

namespace {

using nlohmann::json;

constexpr std::string_view kKeyPrefix = "key/";          // key/<id> -> info JSON
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
  return {{"id", k.id}, {"team", k.team}, {"name", k.name}, {"created", k.created_unix}, {"hint", k.hint},
          {"sha256", hash_hex}};
}

}  // namespace

Result<std::unique_ptr<KeyStore>> KeyStore::open(BillingDb& db) {
  std::unique_ptr<KeyStore> store(new KeyStore(db));
  Status bad;
  LG_RETURN_IF_ERROR(db.scan(kKeyPrefix, [&](std::string_view key, std::string_view value) {
    json j = json::parse(value, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("sha256") || !j["sha256"].is_string()) {
      bad = dataLoss("billing store: key record " + std::string(key) + " is damaged");
      return false;
    }
    ApiKeyInfo info;
    info.id = j.value("id", "");
    info.team = j.value("team", "");
    info.name = j.value("name", "");
    info.created_unix = j.value("created", int64_t{0});
    info.hint = j.value("hint", "");
    store->by_hash_[j["sha256"].get<std::string>()] = std::move(info);
    return true;
  }));
  LG_RETURN_IF_ERROR(bad);
  return store;
}

Result<std::pair<ApiKeyInfo, std::string>> KeyStore::create(std::string_view team, std::string_view name) {
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
  LG_RETURN_IF_ERROR(db_.write({{std::string(kKeyPrefix) + info.id, toJson(info, hash_hex).dump()}}));
  {
    std::unique_lock lock(mu_);
    by_hash_[hash_hex] = info;
  }
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
  std::unique_lock lock(mu_);  // held across the write: a revoked key never authenticates after revoke() returns
  auto it = std::find_if(by_hash_.begin(), by_hash_.end(), [&](const auto& e) { return e.second.id == id; });
  if (it == by_hash_.end()) return notFound("no API key with id " + std::string(id));
  LG_RETURN_IF_ERROR(db_.write({}, {std::string(kKeyPrefix) + std::string(id)}));
  const ApiKeyInfo revoked = std::move(it->second);
  by_hash_.erase(it);
  lock.unlock();
  std::vector<std::function<void(const ApiKeyInfo&)>> observers;
  {
    std::lock_guard observers_lock(observers_mu_);
    observers = observers_;
  }
  for (const auto& observer : observers) observer(revoked);
  return Status::ok();
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
  return Principal{it->second.id, it->second.team, it->second.name};
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

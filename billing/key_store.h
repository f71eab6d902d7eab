// KeyStore: API keys and the teams they belong to. A key is shown once, when
// it is created ("lg-" + 43 characters of base64url, 256 random bits); the
// store keeps only its SHA-256 (a key has far too much entropy for a slow
// hash to matter), so a leaked store reveals no key. A request's bearer token
// is hashed and looked up in memory; revoking a key removes it from memory
// and from the store in one synced write, effective for the next request.
//
// A key's team is its cache namespace (cache::TeamNamespace) and, later, its
// billing account.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "billing/billing_db.h"
#include "common/status.h"

namespace lg::billing {

struct ApiKeyInfo {
  std::string id;    // "key_" + 16 hex digits: names the key in admin calls and usage
  std::string team;  // a team id (common/team_id.h)
  std::string name;  // the owner's label
  int64_t created_unix = 0;
  std::string hint;  // the key's first characters ("lg-AbCd..."), to tell keys apart
};

struct Principal {
  std::string key_id;
  std::string team;
  std::string key_name;
};

class KeyStore {
 public:
  // Loads every key of the store into memory. `db` must outlive the store.
  static Result<std::unique_ptr<KeyStore>> open(BillingDb& db);

  // A new key for `team` (a valid team id, common/team_id.h) named `name`
  // (1..128 printable characters). Returns its info and the key itself, which
  // exists nowhere else afterwards.
  Result<std::pair<ApiKeyInfo, std::string>> create(std::string_view team, std::string_view name);
  std::vector<ApiKeyInfo> list() const;  // by creation, oldest first
  Status revoke(std::string_view id);    // NotFound when no such key
  // `observer` is told of every key revoked from now on, after the revocation
  // is durable, on the revoking thread (the gateway cancels the key's
  // requests in flight). It must not block and must outlive the store.
  void onRevoke(std::function<void(const ApiKeyInfo&)> observer);
  // The key's principal, or nothing for an unknown or revoked key.
  std::optional<Principal> authenticate(std::string_view key) const;

 private:
  explicit KeyStore(BillingDb& db) : db_(db) {}

  BillingDb& db_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ApiKeyInfo> by_hash_;  // guarded by mu_: SHA-256 hex of the key -> info
  std::mutex observers_mu_;
  std::vector<std::function<void(const ApiKeyInfo&)>> observers_;  // guarded by observers_mu_
};

// The admin key: from the configuration (LATENTGATE_ADMIN_KEY) when set, else
// DATA/admin.key, generated at first start (mode 0600). Compared in constant
// time through its SHA-256.
class AdminKey {
 public:
  // `configured` empty: read or create `path`. `created` tells the caller to
  // print where the new key is, once. A configured key, or one written into
  // the file by hand, whose entropy estimate is below 128 bits is refused
  // (common/secret_strength.h); a generated key has about 341.
  static Result<AdminKey> loadOrCreate(std::string_view configured, const std::string& path, bool* created);
  bool matches(std::string_view presented) const;

 private:
  std::string hash_;  // raw SHA-256
};

// The bearer token of an Authorization header value ("Bearer X"), or empty.
std::string_view bearerToken(std::string_view authorization);

}  // namespace lg::billing

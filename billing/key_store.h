// KeyStore: API keys and the teams they belong to. A key is shown once, when
// it is created ("lg-" + 43 characters of base64url, 256 random bits); the
// store keeps only its SHA-256 (a key has far too much entropy for a slow
// hash to matter), so a leaked store reveals no key. A request's bearer token
// is hashed and looked up in memory; revoking a key removes it from memory
// and from the store in one synced write, effective for the next request.
//
// A key's team is its cache namespace (cache::TeamNamespace) and its billing
// account.
//
// Teams (issue 21, item 10). The store keeps a record per team id
// (team/<id>: TeamInfo as JSON), made with the team's first key: the key ids
// it was given and its namespace generation. deleteTeam() revokes every key
// of the team and records the deletion; a deleted id is not silently reused:
// create() refuses it (AlreadyExists) unless the admin says so
// (reuse_deleted_team), which starts the next generation, a fresh cache
// namespace and fingerprint scope (common/team_id.h: teamScope) in which
// nothing of the earlier owner's can be hit. Keys made before team records
// existed get a record in memory at open (generation 0), written with the
// team's next change.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
  uint32_t team_generation = 0;  // the team's generation when the key was made (TeamInfo)
};

struct Principal {
  std::string key_id;
  std::string team;
  std::string key_name;
  // The team's namespace generation: 0, or how many times the id was reused
  // after a deletion. The cache namespace and the fingerprint scope are
  // teamScope(team, team_generation).
  uint32_t team_generation = 0;
};

struct TeamInfo {
  std::string id;
  uint32_t generation = 0;  // bumped by each reuse of the id after a deletion
  int64_t since_us = 0;     // when this generation began (its first key), Unix microseconds
  int64_t deleted_us = 0;   // when it was deleted; 0: live
  std::vector<std::string> key_ids;  // every key made in this generation, revoked ones too
  bool deleted() const { return deleted_us != 0; }
  // Whether a ledger entry of this team that started at `start_us` belongs
  // to a deleted team: this generation is deleted, or the entry is older
  // than this generation (an earlier owner of the id).
  bool deletedAt(int64_t start_us) const { return deleted() || (generation > 0 && start_us < since_us); }
};

// What deleteTeam() did.
struct DeletedTeam {
  TeamInfo team;                      // as recorded, deleted
  std::vector<ApiKeyInfo> revoked;    // the keys it revoked now (none when it was deleted before)
};

class KeyStore {
 public:
  // Loads every key of the store into memory. `db` must outlive the store.
  static Result<std::unique_ptr<KeyStore>> open(BillingDb& db);

  // A new key for `team` (a valid team id, common/team_id.h) named `name`
  // (1..128 printable characters). Returns its info and the key itself, which
  // exists nowhere else afterwards. A deleted team's id is refused
  // (AlreadyExists) unless `reuse_deleted_team`, which starts the id's
  // next generation; for a live team the flag changes nothing.
  Result<std::pair<ApiKeyInfo, std::string>> create(std::string_view team, std::string_view name,
                                                    bool reuse_deleted_team = false);
  std::vector<ApiKeyInfo> list() const;  // by creation, oldest first
  Status revoke(std::string_view id);    // NotFound when no such key
  // `observer` is told of every key revoked from now on, after the revocation
  // is durable, on the revoking thread (the gateway cancels the key's
  // requests in flight). It must not block and must outlive the store.
  void onRevoke(std::function<void(const ApiKeyInfo&)> observer);
  // The key's principal, or nothing for an unknown or revoked key.
  std::optional<Principal> authenticate(std::string_view key) const;

  // Revokes every key of `team` in one synced write (the revocation
  // observers run for each, after it) and records the team deleted at
  // `now_us`. NotFound for a team the store never knew. A team deleted
  // before is returned as recorded, with nothing revoked, so that a retried
  // deletion can purge again what a failed one left.
  Result<DeletedTeam> deleteTeam(std::string_view team, int64_t now_us);
  std::optional<TeamInfo> team(std::string_view id) const;
  std::vector<TeamInfo> teams() const;  // by id

 private:
  explicit KeyStore(BillingDb& db) : db_(db) {}
  void notifyRevoked(const std::vector<ApiKeyInfo>& revoked);

  BillingDb& db_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ApiKeyInfo> by_hash_;  // guarded by mu_: SHA-256 hex of the key -> info
  std::map<std::string, TeamInfo, std::less<>> teams_;   // guarded by mu_: by team id
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

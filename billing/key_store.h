// KeyStore: API keys and the teams they belong to. A key is shown once, when
// it is created ("lg-" + 43 characters of base64url, 256 random bits); the
// store keeps only its SHA-256 (a key has far too much entropy for a slow
// hash to matter), so a leaked store reveals no key. A request's bearer token
// is hashed and looked up in memory; revoking a key removes it from memory
// and from the store in one synced write, effective for the next request.
//
// Keys and teams are control records (billing/control_plane.h): every change
// is a transaction of the ControlPlane run against the records as they are in
// its source of truth (the billing store alone, or PostgreSQL shared by every
// replica), and memory changes only when the control plane applies records
// (applyControl), this replica's own or another's. So a key revoked on another
// replica is removed here, and the revocation observers run here, when the
// follower applies it (docs/billing.md, "The control plane").
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
// existed get a record at open (generation 0, listing their keys), written
// into the billing store then, so that a deletion finds every key of the team
// in its record wherever it runs.
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
#include "billing/control_plane.h"
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

class KeyStore final : public ControlApplier {
 public:
  // Loads every key of the store into memory; changes go through a
  // LocalControlPlane of its own. `db` must outlive the store.
  static Result<std::unique_ptr<KeyStore>> open(BillingDb& db);
  // The same, with changes through `control` (whose store `db` is), which
  // also hands this store the key and team records it applies. Both must
  // outlive the store.
  static Result<std::unique_ptr<KeyStore>> open(BillingDb& db, ControlPlane& control);

  // A new key for `team` (a valid team id, common/team_id.h) named `name`
  // (1..128 printable characters). Returns its info and the key itself, which
  // exists nowhere else afterwards. A deleted team's id is refused
  // (AlreadyExists) unless `reuse_deleted_team`, which starts the id's
  // next generation; for a live team the flag changes nothing. The team's
  // record is read and rewritten in the control plane's transaction, so keys
  // made at once on two replicas are both listed in it. Unavailable: the
  // control plane's source of truth is unreachable (nothing made).
  Result<std::pair<ApiKeyInfo, std::string>> create(std::string_view team, std::string_view name,
                                                    bool reuse_deleted_team = false);
  std::vector<ApiKeyInfo> list() const;  // by creation, oldest first
  // NotFound when no such key; once it returns OK the key authenticates no
  // more on this replica (on the others once their follower applied it).
  Status revoke(std::string_view id);
  // `observer` is told of every key revoked from now on (by revoke(), a team
  // deletion, here or on another replica), once the revocation is durable
  // here and the key no longer authenticates, on the thread that applied it
  // (the gateway cancels the key's requests in flight). It must not block
  // and must outlive the store.
  void onRevoke(std::function<void(const ApiKeyInfo&)> observer);
  // `observer` is told of each team whose deletion another replica
  // committed, once it is applied here (its keys already revoked here), on
  // the follower's thread: this replica purges what it holds of the team.
  // It must not block and must outlive the store.
  void onTeamDeletedElsewhere(std::function<void(const TeamInfo&)> observer);
  // The key's principal, or nothing for an unknown or revoked key.
  std::optional<Principal> authenticate(std::string_view key) const;

  // Revokes every key of `team` (every key its record lists, wherever it was
  // made) and records the team deleted at `now_us`, in one transaction (the
  // revocation observers run for each key this replica held, after it).
  // NotFound for a team the store never knew. A team deleted
  // before is returned as recorded, with nothing revoked, so that a retried
  // deletion can purge again what a failed one left.
  Result<DeletedTeam> deleteTeam(std::string_view team, int64_t now_us);
  std::optional<TeamInfo> team(std::string_view id) const;
  std::vector<TeamInfo> teams() const;  // by id

  // ControlApplier: key/ and team/ records into memory; the keys it removes
  // are told to the revocation observers, after the lock.
  void applyControl(const std::vector<ControlRecord>& records) override;

 private:
  KeyStore(std::unique_ptr<LocalControlPlane> own, ControlPlane& control);
  static Result<std::unique_ptr<KeyStore>> load(BillingDb& db, std::unique_ptr<LocalControlPlane> own,
                                                ControlPlane& control);
  void notifyRevoked(const std::vector<ApiKeyInfo>& revoked);

  std::unique_ptr<LocalControlPlane> own_control_;  // open(db) alone: the control plane this store made
  ControlPlane& control_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ApiKeyInfo> by_hash_;  // guarded by mu_: SHA-256 hex of the key -> info
  std::unordered_map<std::string, std::string> hash_of_;  // guarded by mu_: key id -> its by_hash_ key
  std::map<std::string, TeamInfo, std::less<>> teams_;   // guarded by mu_: by team id
  std::mutex observers_mu_;
  std::vector<std::function<void(const ApiKeyInfo&)>> observers_;       // guarded by observers_mu_
  std::vector<std::function<void(const TeamInfo&)>> team_observers_;    // guarded by observers_mu_
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

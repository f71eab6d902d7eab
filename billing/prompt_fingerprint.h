// SystemPromptFingerprinter: the ledger's name for a request's system prompt
// (LedgerEntry::system_prompt; the usage API's and the dashboard's
// system_prompt rows). docs/billing.md, "System prompt fingerprint".
//
// The fingerprint is the first 16 bytes (32 hex digits) of HMAC-SHA-256,
// keyed with this installation's secret, over "lg-system-prompt-v3", the
// team id of the request and each (role, text) of the prompt's leading
// system and developer messages, each length-prefixed (8 bytes,
// little-endian). The same instructions give the same fingerprint in every
// request, key and restart of one team; whoever reads fingerprints without
// the key (a team lead on the dashboard, an operator's CSV export, a log)
// cannot confirm a guessed prompt offline by hashing it, which an unkeyed
// hash would allow.
//
// Per team (issue 21, item 11): with an installation-wide MAC input
// the same prompt had the same fingerprint in every team, so a tenant could
// send a guessed prompt through its own key, read the fingerprint on its own
// dashboard and look for it among another team's (in an export, a shared
// screen). With the team in the MAC input, fingerprints of different teams
// are unrelated, and an admin can no longer match one prompt across teams by
// its fingerprint (docs/billing.md). Fingerprints made before (v2) are not
// recomputed: a prompt's entries before and after the upgrade have different
// fingerprints.
//
// The key is 32 random bytes kept in the billing store (secret/system-prompt),
// made at the first open: it lives and is backed up with the ledger whose
// fingerprints it made, so they stay comparable across restarts. With
// billing.postgres_url the replicas share one key, kept in PostgreSQL with
// the ledger of record (billing/postgres/pg_fingerprint_key.h): the key of
// the first replica to offer one is kept, and every other replica adopts it
// into its own billing store in place of its own, so that one prompt of one
// team has one fingerprint on every replica, through restarts while
// PostgreSQL is away too (a replica that never reached PostgreSQL keys with
// its own until it does, at a start). The key never reaches a log line, an
// error or the configuration.
//
// Thread-safety: fingerprint() is const and may be called concurrently.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "billing/billing_db.h"
#include "common/status.h"

namespace lg::billing {

// The billing store's record of the key, and the key's length.
inline constexpr std::string_view kSystemPromptKeyRecord = "secret/system-prompt";
inline constexpr size_t kSystemPromptKeyBytes = 32;

class SystemPromptFingerprinter {
 public:
  // The store's key, made (synced) when there is none yet.
  static Result<SystemPromptFingerprinter> open(BillingDb& db);
  // open()'s key itself: the store's, made (synced) when there is none yet
  // (`*created` says which, when given); DataLoss when the record is not
  // kSystemPromptKeyBytes long.
  static Result<std::string> loadOrCreateKey(BillingDb& db, bool* created = nullptr);
  explicit SystemPromptFingerprinter(std::string key) : key_(std::move(key)) {}

  // `team`: the requesting team's id (its namespace scope, common/team_id.h).
  // Empty for no leading system or developer message.
  std::string fingerprint(std::string_view team,
                          const std::vector<std::pair<std::string_view, std::string_view>>& messages) const;

 private:
  std::string key_;
};

}  // namespace lg::billing

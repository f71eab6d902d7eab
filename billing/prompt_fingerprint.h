// SystemPromptFingerprinter: the ledger's name for a request's system prompt
// (LedgerEntry::system_prompt; the usage API's and the dashboard's
// system_prompt rows). docs/billing.md, "System prompt fingerprint".
//
// The fingerprint is the first 16 bytes (32 hex digits) of HMAC-SHA-256,
// keyed with this installation's secret, over "lg-system-prompt-v2" and each
// (role, text) of the prompt's leading system and developer messages, each
// length-prefixed (8 bytes, little-endian). The same instructions give the
// same fingerprint in every request, key and restart of one installation;
// whoever reads fingerprints without the key (a team lead on the dashboard,
// an operator's CSV export, a log) cannot confirm a guessed prompt offline by
// hashing it, which an unkeyed hash would allow.
//
// The key is 32 random bytes kept in the billing store (secret/system-prompt),
// made at the first open: it lives and is backed up with the ledger whose
// fingerprints it made, so they stay comparable across restarts.
//
// Thread-safety: fingerprint() is const and may be called concurrently.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "billing/billing_db.h"
#include "common/status.h"

namespace lg::billing {

class SystemPromptFingerprinter {
 public:
  // The store's key, made (synced) when there is none yet.
  static Result<SystemPromptFingerprinter> open(BillingDb& db);
  explicit SystemPromptFingerprinter(std::string key) : key_(std::move(key)) {}

  // Empty for no leading system or developer message.
  std::string fingerprint(const std::vector<std::pair<std::string_view, std::string_view>>& messages) const;

 private:
  std::string key_;
};

}  // namespace lg::billing

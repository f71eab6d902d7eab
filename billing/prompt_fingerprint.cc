#include "billing/prompt_fingerprint.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdint>

#include "common/check.h"
#include "common/hex.h"

namespace lg::billing {

Result<std::string> SystemPromptFingerprinter::loadOrCreateKey(BillingDb& db, bool* created) {
  if (created != nullptr) *created = false;
  LG_ASSIGN_OR_RETURN(std::optional<std::string> stored, db.get(kSystemPromptKeyRecord));
  if (stored) {
    if (stored->size() != kSystemPromptKeyBytes) return dataLoss("billing store: the system prompt key is corrupt");
    return std::move(*stored);
  }
  std::string key(kSystemPromptKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    return internalError("the system random generator failed");
  }
  LG_RETURN_IF_ERROR(db.write({{std::string(kSystemPromptKeyRecord), key}}));
  if (created != nullptr) *created = true;
  return key;
}

Result<SystemPromptFingerprinter> SystemPromptFingerprinter::open(BillingDb& db) {
  LG_ASSIGN_OR_RETURN(std::string key, loadOrCreateKey(db));
  return SystemPromptFingerprinter(std::move(key));
}

std::string SystemPromptFingerprinter::fingerprint(
    std::string_view team, const std::vector<std::pair<std::string_view, std::string_view>>& messages) const {
  if (messages.empty()) return "";
  std::string data = "lg-system-prompt-v3";
  const auto field = [&](std::string_view s) {
    const uint64_t n = s.size();
    for (int b = 0; b < 8; ++b) data += static_cast<char>((n >> (8 * b)) & 0xff);
    data += s;
  };
  // The team first, length-prefixed like the rest, so that no choice of
  // messages in one team can produce another team's input.
  field(team);
  for (const auto& [role, text] : messages) {
    field(role);
    field(text);
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t mac_len = 0;
  const bool ok = EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key_.data(), key_.size(),
                            reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, sizeof mac,
                            &mac_len) != nullptr;
  LG_CHECK(ok && mac_len == 32, "HMAC-SHA-256 failed");
  return hexLower(mac, 16);
}

}  // namespace lg::billing

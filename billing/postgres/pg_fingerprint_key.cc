#include "billing/postgres/pg_fingerprint_key.h"

#include <optional>
#include <string>
#include <utility>

#include "billing/postgres/pg_schema.h"
#include "billing/postgres/pg_session.h"
#include "common/hex.h"
#include "common/logging.h"
#include "common/url_redact.h"

namespace lg::billing::pg {
namespace {

spdlog::logger* keyLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

struct Stored {
  std::string key;
  std::string replica;  // the replica that offered it
};

// Offers `local` as the cluster's key and returns the one kept (`local`
// when this replica is the first).
Result<Stored> offer(const PostgresOptions& options, const std::string& local, std::string_view replica) {
  Session session(options);
  std::optional<Stored> stored;
  LG_RETURN_IF_ERROR(session.run("the system prompt fingerprint's key", [&](pqxx::connection& c) {
    stored.reset();
    pqxx::work tx(c);
    // The key travels as hex into bytea, as control records' values do.
    tx.exec_params(
        "INSERT INTO cluster_secrets (name, value, replica) VALUES ($1, decode($2, 'hex'), $3)"
        " ON CONFLICT (name) DO NOTHING",
        std::string(kSystemPromptSecretName), hexLower(local), std::string(replica));
    // READ COMMITTED: a new snapshot, which holds the row whichever
    // replica's insert committed first.
    const pqxx::result r =
        tx.exec_params("SELECT value, replica FROM cluster_secrets WHERE name = $1", std::string(kSystemPromptSecretName));
    if (!r.empty()) stored = Stored{pqxx::binarystring(r[0][0]).str(), r[0][1].as<std::string>()};
    tx.commit();
  }));
  if (!stored) return internalError("the system prompt fingerprint's key: not in cluster_secrets after its insert");
  if (stored->key.size() != kSystemPromptKeyBytes) {
    return dataLoss("PostgreSQL's system prompt fingerprint key (cluster_secrets, '" +
                    std::string(kSystemPromptSecretName) + "') is " + std::to_string(stored->key.size()) +
                    " bytes, not " + std::to_string(kSystemPromptKeyBytes) + ": corrupt; not used");
  }
  return std::move(*stored);
}

}  // namespace

Result<SystemPromptFingerprinter> openSharedFingerprinter(BillingDb& db, const PostgresOptions& options,
                                                          std::string_view replica) {
  bool created = false;
  LG_ASSIGN_OR_RETURN(std::string local, SystemPromptFingerprinter::loadOrCreateKey(db, &created));
  LG_ASSIGN_OR_RETURN(std::optional<std::string> marker, db.get(kSharedKeyMarker));
  const bool shared_before = marker.has_value();

  Result<Stored> stored = [&]() -> Result<Stored> {
    LG_RETURN_IF_ERROR(migrate(options).status());
    return offer(options, local, replica);
  }();
  if (!stored.isOk()) {
    const Status& s = stored.status();
    if (s.code() != StatusCode::kUnavailable) {
      return Status(s.code(), redactPasswordIn(s.message(), options.url))
          .withContext("billing.postgres_url: the system prompt fingerprint's key shared by the replicas");
    }
    const std::string why = redactPasswordIn(s.toString(), options.url);
    if (shared_before) {
      keyLog()->info("system prompt fingerprints: PostgreSQL unreachable at start; this replica keys them with the "
                     "key every replica uses, taken at an earlier start: {}",
                     why);
    } else {
      keyLog()->warn("system prompt fingerprints: PostgreSQL unreachable at start, and this replica never took the "
                     "replicas' shared key: it keys them with its own key until it starts with PostgreSQL reachable, "
                     "so the entries it commits until then may have other system_prompt fingerprints than other "
                     "replicas' for the same prompt (their usage rows split by replica): {}",
                     why);
    }
    return SystemPromptFingerprinter(std::move(local));
  }

  if (stored->key == local) {
    if (!shared_before) {
      LG_RETURN_IF_ERROR(db.write({{std::string(kSharedKeyMarker), "1"}}));
      if (stored->replica == replica) {
        keyLog()->info("system prompt fingerprints: PostgreSQL held no key; this replica's key is now the one every "
                       "replica uses (its fingerprints are unchanged)");
      }
    }
    return SystemPromptFingerprinter(std::move(local));
  }
  // Another replica's key: this store's goes, in one synced batch with the
  // marker, so that a start while PostgreSQL is away keys the same way.
  LG_RETURN_IF_ERROR(
      db.write({{std::string(kSystemPromptKeyRecord), stored->key}, {std::string(kSharedKeyMarker), "1"}}));
  if (created) {
    keyLog()->info("system prompt fingerprints: this replica takes the key every replica uses from PostgreSQL "
                   "(offered by replica {})",
                   stored->replica);
  } else {
    keyLog()->warn("system prompt fingerprints: this replica's own key replaced by the one every replica uses, from "
                   "PostgreSQL (offered by replica {}); the entries committed here before keep their earlier "
                   "fingerprints, new ones match every replica's",
                   stored->replica);
  }
  return SystemPromptFingerprinter(std::move(stored->key));
}

}  // namespace lg::billing::pg

// The system prompt fingerprint's key shared by every replica on one
// PostgreSQL (docs/billing.md, "System prompt fingerprint"): without it each
// replica keyed fingerprints with its own billing store's key, so one prompt
// of one team had a fingerprint per replica and the usage API's and the
// dashboard's system_prompt rows, read from PostgreSQL, split it by replica.
//
// The key is one row of cluster_secrets (pg_schema.h, migration 4), named
// "system-prompt", written once for the whole cluster. openSharedFingerprinter()
// migrates the schema, then offers this replica's key (its billing store's,
// made there first when it has none) with INSERT ... ON CONFLICT DO NOTHING
// and reads back the row: the first replica to offer one keeps its key, so an
// installation that grows from one replica keeps its fingerprints; every
// other replica adopts the stored key and writes it into its billing store in
// place of its own (one synced batch, with kSharedKeyMarker), so that a restart
// while PostgreSQL is away fingerprints the same way. The row's primary key
// serializes replicas that offer at once (the second INSERT waits for the
// first's commit and does nothing; its SELECT, a new snapshot, reads the
// first's key): no advisory lock is needed.
//
// PostgreSQL unreachable (Unavailable, as PgControlPlane::start sees it): never
// an error. A replica that adopted the shared key at an earlier start
// (kSharedKeyMarker) fingerprints with it as before; one that never did (its
// first start with billing.postgres_url, or the first after the upgrade that
// brought this) logs a warning and fingerprints with its own key until a
// start that reaches PostgreSQL: the entries it commits meanwhile carry
// fingerprints that differ from other replicas' for the same prompt (unless
// its key is the one PostgreSQL ends up keeping). Any other failure (a key in
// PostgreSQL that is not kSystemPromptKeyBytes long: DataLoss; a migration
// refused; a statement's error) is returned, as the control plane's start
// returns it: the server does not start rather than rename every prompt.
//
// Secrets: the key never reaches a log line or an error (statements carry it
// as a parameter; nothing here prints a value), nor the URL's password.
//
// Thread-safety: none; called once at start, before serving.
#pragma once

#include <string_view>

#include "billing/billing_db.h"
#include "billing/postgres/postgres_options.h"
#include "billing/prompt_fingerprint.h"
#include "common/status.h"

namespace lg::billing::pg {

// The billing store's record that says its system prompt key is the one
// PostgreSQL holds ("1"), written with the key when this replica adopted or
// offered it.
inline constexpr std::string_view kSharedKeyMarker = "secret/system-prompt-shared";
// cluster_secrets' row of the system prompt key.
inline constexpr std::string_view kSystemPromptSecretName = "system-prompt";

// The fingerprinter over the key shared through PostgreSQL at options.url
// (see above); `replica`, this replica's id (PgControlPlane::replicaId), is
// recorded with the key it offers.
Result<SystemPromptFingerprinter> openSharedFingerprinter(BillingDb& db, const PostgresOptions& options,
                                                          std::string_view replica);

}  // namespace lg::billing::pg

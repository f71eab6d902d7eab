// The rule for team ids: 1..128 characters of [A-Za-z0-9._-].
//
// A team id names a tenant everywhere: its API keys (billing/key_store.h),
// its cache namespace (cache/namespace.h), its budget, the `team` label of
// its metrics, the grants of shared cache namespaces in the configuration
// (whose names follow the same rule). Its one home is here, below every
// module that checks one, so that none of them links another for it. The
// rule keeps ids safe in keys, URLs, labels and log lines without escaping.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg {

inline constexpr size_t kMaxTeamIdLength = 128;

bool validTeamId(std::string_view id);

// InvalidArgument naming `what` ("team id", "shared namespace name") and
// what is wrong (the length, or a character outside the set); OK otherwise.
Status checkTeamId(std::string_view id, std::string_view what = "team id");

// The scope a team's cache namespace and system-prompt fingerprints are made
// in: the id itself for generation 0, "<id>#<generation>" once a deleted
// team's id was reused (billing/key_store.h, TeamInfo). '#' is outside the
// id alphabet, so no team id spells another team's scope, and generation 0
// keeps the scopes (and cached blocks) made before generations existed.
std::string teamScope(std::string_view id, uint32_t generation);

}  // namespace lg

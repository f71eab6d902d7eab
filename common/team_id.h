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

#include <string_view>

#include "common/status.h"

namespace lg {

inline constexpr size_t kMaxTeamIdLength = 128;

bool validTeamId(std::string_view id);

// InvalidArgument naming `what` ("team id", "shared namespace name") and
// what is wrong (the length, or a character outside the set); OK otherwise.
Status checkTeamId(std::string_view id, std::string_view what = "team id");

}  // namespace lg

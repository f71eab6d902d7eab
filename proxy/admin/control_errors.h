// The admin API's answer when a change of the control plane failed (keys,
// teams, budgets, prices, purges; billing/control_plane.h).
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "proxy/http/api_error.h"

namespace lg::proxy {

// Unavailable (with replicas: PostgreSQL, the control plane's source of
// truth, is unreachable): 503 control_plane_unavailable with Retry-After,
// saying that nothing was changed; anything else: the plain 500. Either is
// logged with `what` ("revoking API key key_..."), the password never.
ApiError controlPlaneError(const Status& status, std::string_view what);

}  // namespace lg::proxy

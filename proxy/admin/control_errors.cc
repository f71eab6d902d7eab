#include "proxy/admin/control_errors.h"

#include <string>

#include "proxy/http/proxy_log.h"
#include "proxy/openai/api_error.h"

namespace lg::proxy {

ApiError controlPlaneError(const Status& status, std::string_view what) {
  if (status.code() != StatusCode::kUnavailable) {
    proxyLog()->error("{} failed: {}", what, status.toString());
    return openai::internalError();
  }
  // The control plane's messages never hold the URL's password.
  proxyLog()->warn("{} refused: {}", what, status.toString());
  ApiError e{503, "server_error", "control_plane_unavailable", "",
             "The control plane (keys, teams, budgets and prices, shared by every replica) is unreachable, so nothing "
             "was changed. Retry when it is back; reads and requests are served meanwhile."};
  e.retry_after_s = 5;
  return e;
}

}  // namespace lg::proxy

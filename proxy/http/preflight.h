// Preflight: what the server decides about a request as soon as its header
// is complete, before it reads a byte of the body or sends 100 Continue
// (issue 21 item 4): an unknown route or a caller without the credentials
// its route needs is answered at once (and the connection closed, the body
// unread), and a request that goes on learns its route's body limit and
// whether it carried valid credentials (which a connection accepted into the
// reserved slots must: http_server.h).
//
// The Router answers it (Router::preflight) from what each route was added
// with; the credentials themselves are checked by the route's HeaderGuard,
// which only Admission makes (proxy/gateway/admission.h): authentication
// stays in one place.
//
// Thread-safety: a Preflight is called on I/O threads, many at once, and
// must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "proxy/http/api_error.h"
#include "proxy/http/exchange.h"
#include "proxy/http/http_message.h"

namespace lg::proxy {

struct HeadDecision {
  // Set: answered with this error (and refusal_headers: Allow for a 405),
  // then the connection closes without reading the body.
  std::optional<ApiError> refusal;
  HttpHeaders refusal_headers;
  // The route's body limit; 0: the server's (HttpServerOptions::limits).
  uint64_t max_body_bytes = 0;
  // The request carried credentials its route's guard accepted.
  bool authenticated = false;
};

// Called with the request's line and header fields (body empty, remote set).
using Preflight = std::function<HeadDecision(const HttpRequest& head)>;

// A route's check of the credentials in a request's header: nullopt accepts,
// an error (401) refuses.
using HeaderGuard = std::function<std::optional<ApiError>(const HttpRequest& head)>;

// A handler together with the header check its guard makes: the router runs
// the check at header time, and the handler still checks for itself (it
// needs the caller, and it must stay safe when called without a preflight).
// Callable as a plain Handler.
struct GuardedHandler {
  Handler handler;
  HeaderGuard guard;
  void operator()(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
    handler(request, std::move(exchange));
  }
};

}  // namespace lg::proxy

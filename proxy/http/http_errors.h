// The server's own errors as ApiErrors (api_error.h), and responding with
// any ApiError: the server's (bad HTTP, 404, 405, 408, 413, 431, 503, 504)
// and the routes' (validation, authentication, admission).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/http/api_error.h"
#include "proxy/http/exchange.h"
#include "proxy/http/http_message.h"

namespace lg::proxy {

// content-type: application/json, for the JSON answers of the routes.
HttpHeaders jsonHeaders();
// content-type: application/json, and Retry-After when set.
HttpHeaders apiErrorHeaders(const ApiError& error);
// Responds with the error; `extra` headers are added (Allow for a 405).
void respondWithApiError(Exchange& exchange, const ApiError& error, HttpHeaders extra = {});
// Calls handler(exchange->request(), exchange), on an I/O thread or a
// blocking-pool one: a handler that throws is logged and answered 500, and
// takes nothing else down.
void callHandler(const Handler& handler, const std::shared_ptr<Exchange>& exchange);

// The server's own errors.
ApiError badRequestError(std::string message);                                  // 400
ApiError unknownUrlError(std::string_view method, std::string_view path);        // 404, as OpenAI words it
ApiError methodNotAllowedError(std::string_view method, std::string_view path);  // 405
ApiError requestTimeoutError();                                                 // 408: the request came too slowly
ApiError bodyTooLargeError(int64_t max_body_bytes);                             // 413
ApiError headersTooLargeError(int64_t max_header_bytes);                        // 431
ApiError internalServerError();                                                 // 500, says nothing more
ApiError overloadedError(int retry_after_seconds);                              // 503
ApiError responseTimeoutError();                                                // 504: no response within the request timeout

}  // namespace lg::proxy

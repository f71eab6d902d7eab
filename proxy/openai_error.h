// OpenAI-style error responses: {"error": {"message", "type", "param", "code"}}.
//
// The one place that formats them, for the server's own errors (bad HTTP,
// 413, 431, 408, 404, 405) and for the endpoints' (validation, auth, rate
// limits). The message is what the client reads: it names the client's own
// input (a field, a limit, a path) and never internals (exception text, file
// paths, other tenants); log those instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/exchange.h"
#include "proxy/http_message.h"

namespace lg::proxy {

struct OpenAiError {
  int status = 500;
  std::string type = "server_error";  // invalid_request_error, authentication_error, rate_limit_error, server_error...
  std::string code;                   // machine-readable; empty: null
  std::string message;
  std::string param;                  // the request field at fault; empty: null
  int retry_after_seconds = 0;        // > 0: a Retry-After header (429, 503)
};

// The JSON body. Invalid UTF-8 in the message (a client's path, say) is
// replaced, never a reason to fail.
std::string openAiErrorBody(const OpenAiError& error);
// content-type: application/json, and Retry-After when set.
HttpHeaders openAiErrorHeaders(const OpenAiError& error);
// Responds with the error; `extra` headers are added (Allow for a 405).
void respondWithError(Exchange& exchange, const OpenAiError& error, HttpHeaders extra = {});

// The server's own errors.
OpenAiError badRequestError(std::string message);                            // 400
OpenAiError unknownUrlError(std::string_view method, std::string_view path);  // 404, as OpenAI words it
OpenAiError methodNotAllowedError(std::string_view method, std::string_view path);  // 405
OpenAiError requestTimeoutError();                                           // 408: the request came too slowly
OpenAiError bodyTooLargeError(int64_t max_body_bytes);                       // 413
OpenAiError headersTooLargeError(int64_t max_header_bytes);                  // 431
OpenAiError internalServerError();                                           // 500, says nothing more
OpenAiError overloadedError(int retry_after_seconds);                        // 503
OpenAiError responseTimeoutError();                                          // 504: no response within the request timeout

}  // namespace lg::proxy

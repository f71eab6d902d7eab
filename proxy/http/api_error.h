// ApiError: an error as OpenAI's API reports it, and the one builder of its
// JSON body
//   {"error": {"message", "type", "param", "code"}}
// with the HTTP status to send. The server's own errors (http_errors.h: 404,
// 405, 413, 431, 503, ...), the schema layer's (proxy/openai/api_error.h:
// validation, context length, refusals) and the gateway's (authentication,
// admission, unknown model) are all this type.
//
// The message is what the client reads: it names the client's own input (a
// field, a value, a limit, a path) and never internals (exception text, file
// paths, prompt text, other tenants); those go to the log.
//
// Part of the HTTP server's library (lg_http), which answers its own errors
// in this format; the schema layer (lg_openai) builds on it. It depends on
// nothing but nlohmann_json, so the schema layer's fuzz build compiles it
// alone (tests/fuzz/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <string>

namespace lg::proxy {

struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";  // invalid_request_error, authentication_error, rate_limit_error, server_error, ...
  std::string code;                            // machine-readable ("context_length_exceeded", "invalid_type", ...); empty: null
  std::string param;                           // the request field at fault ("messages[2].content"); empty: null
  std::string message;
  // Seconds a client should wait before retrying (the Retry-After header);
  // 0: no header. Set on 429 and 503.
  int32_t retry_after_s = 0;
};

// The body of an error response and the payload of a mid-stream error chunk:
// compact JSON, fields in OpenAI's order (for clients and people that read
// it raw). Invalid UTF-8 in the message (a client's path, say) is replaced,
// never a reason to fail.
std::string apiErrorBody(const ApiError& error);

}  // namespace lg::proxy

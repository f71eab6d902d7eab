#include "proxy/http/http_errors.h"

#include "proxy/http/proxy_log.h"

namespace lg::proxy {
namespace {

// Client-supplied text quoted in a message (a path, a method) stays short.
std::string quoted(std::string_view text, size_t max = 200) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

ApiError make(int status, std::string type, std::string code, std::string message) {
  ApiError e;
  e.http_status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

}  // namespace

void callHandler(const Handler& handler, const std::shared_ptr<Exchange>& exchange) {
  try {
    handler(exchange->request(), exchange);
  } catch (const std::exception& e) {
    proxyLog()->error("{}: the handler threw: {}", exchange->request().id, e.what());
    respondWithApiError(*exchange, internalServerError());
  } catch (...) {
    proxyLog()->error("{}: the handler threw", exchange->request().id);
    respondWithApiError(*exchange, internalServerError());
  }
}

HttpHeaders jsonHeaders() { return {{"content-type", "application/json"}}; }

HttpHeaders apiErrorHeaders(const ApiError& error) {
  HttpHeaders headers{{"content-type", "application/json"}};
  if (error.retry_after_s > 0) headers.add("retry-after", std::to_string(error.retry_after_s));
  return headers;
}

void respondWithApiError(Exchange& exchange, const ApiError& error, HttpHeaders extra) {
  HttpHeaders headers = apiErrorHeaders(error);
  for (auto& [name, value] : extra.fields()) headers.add(name, value);
  exchange.respond(error.http_status, std::move(headers), apiErrorBody(error));
}

ApiError badRequestError(std::string message) {
  return make(400, "invalid_request_error", "", std::move(message));
}

ApiError unknownUrlError(std::string_view method, std::string_view path) {
  // OpenAI's own wording and a null code, so clients that match on it work.
  return make(404, "invalid_request_error", "", "Invalid URL (" + quoted(method, 20) + " " + quoted(path) + ")");
}

ApiError methodNotAllowedError(std::string_view method, std::string_view path) {
  return make(405, "invalid_request_error", "method_not_allowed",
              "Method " + quoted(method, 20) + " is not allowed for " + quoted(path));
}

ApiError requestTimeoutError() {
  return make(408, "invalid_request_error", "request_timeout", "The request was not received in time");
}

ApiError bodyTooLargeError(int64_t max_body_bytes) {
  return make(413, "invalid_request_error", "request_too_large",
              "The request body is larger than " + std::to_string(max_body_bytes) + " bytes");
}

ApiError headersTooLargeError(int64_t max_header_bytes) {
  return make(431, "invalid_request_error", "request_header_fields_too_large",
              "The request header is larger than " + std::to_string(max_header_bytes) + " bytes");
}

ApiError internalServerError() {
  return make(500, "server_error", "", "The server had an error while processing your request");
}

ApiError overloadedError(int retry_after_seconds) {
  ApiError e = make(503, "server_error", "server_overloaded", "The server is overloaded; retry later");
  e.retry_after_s = retry_after_seconds;
  return e;
}

ApiError responseTimeoutError() {
  return make(504, "server_error", "timeout", "The response was not ready within the request timeout");
}

}  // namespace lg::proxy

// The schema layer's errors: the constructors of the ApiErrors
// (proxy/api_error.h) that parsing, prompt encoding and scheduler refusals
// report, and ApiResult<T>, the value-or-ApiError that every parse and render
// function of proxy/openai returns (no exceptions leave this layer).
// Messages name the parameter and the values, never exception text, prompt
// text or the server's internals.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "proxy/http/api_error.h"
#include "serving/events.h"
#include "serving/request.h"

namespace lg::proxy::openai {

using proxy::ApiError;  // one error type for the server and this layer

// 400 invalid_request_error naming `param`. Codes follow OpenAI's:
// "invalid_type", "invalid_value", "missing_required_parameter",
// "unsupported_parameter", "unsupported_value", "integer_below_min_value", ...
ApiError invalidRequest(std::string param, std::string code, std::string message);

// The body is not JSON, or not an object.
ApiError invalidJsonBody(std::string message);

// 400 context_length_exceeded with both numbers: the prompt's tokens and what
// the request asked to generate, against the model's context.
ApiError contextLengthExceeded(std::string param, int64_t prompt_tokens, int64_t max_tokens, int64_t max_context);

// For the server (authentication and routing are its part).
ApiError invalidApiKey();
ApiError modelNotFound(std::string_view model);
ApiError internalError();  // 500, no details: the server logs them

// Which request parameter a scheduler refusal is about. Each endpoint names
// its fields differently (the prompt is `messages`, `prompt` or `input`; the
// output cap `max_tokens`, `max_completion_tokens` or `max_output_tokens`); the
// parsed request carries the names its client used.
struct ParamNames {
  std::string_view prompt = "messages";
  std::string_view max_tokens = "max_tokens";
  std::string_view top_logprobs = "top_logprobs";
};

// Retry-After values for the overload refusals (the scheduler does not know
// how long an overload lasts; the server's configuration does).
struct RetryAfter {
  int32_t queue_full_s = 1;
  int32_t queue_timeout_s = 2;
  int32_t shutting_down_s = 10;
};

// The scheduler's refusal of a request (at submit, or a final event with
// FinishReason::kRefused) as the client's error:
//  - bad input: 400 invalid_request_error naming the parameter;
//  - kContextOverflow, kExceedsPool: 400 context_length_exceeded;
//  - kQueueFull: 429 rate_limit_error (code rate_limit_exceeded);
//  - kQueueTimeout, kShuttingDown: 503 server_error;
// the overload ones with retry_after_s set. `message` is the scheduler's
// (it names values, never prompt text); kNone is a caller bug: 500.
ApiError refusalError(serving::Refusal refusal, std::string_view message, const ParamNames& params,
                      const RetryAfter& retry = {});

// The error a final event carries, if any: refused (as refusalError),
// cancelled (503, the request did not finish) or an engine error (500; the
// engine's message is for the server's log, not the client). nullopt for
// kStop and kLength.
std::optional<ApiError> finalEventError(const serving::StreamEvent& final_event, const ParamNames& params,
                                        const RetryAfter& retry = {});

// Value or ApiError.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  ApiResult(ApiError error) : v_(std::move(error)) {}   // NOLINT(google-explicit-constructor)

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  T& value() & { assert(isOk()); return std::get<T>(v_); }
  const T& value() const& { assert(isOk()); return std::get<T>(v_); }
  T&& value() && { assert(isOk()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const ApiError& error() const { assert(!isOk()); return std::get<ApiError>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace lg::proxy::openai

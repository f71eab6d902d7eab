#include "proxy/openai/api_error.h"

namespace lg::proxy::openai {

ApiError invalidRequest(std::string param, std::string code, std::string message) {
  return ApiError{400, "invalid_request_error", std::move(code), std::move(param), std::move(message), 0};
}

ApiError invalidJsonBody(std::string message) {
  return ApiError{400, "invalid_request_error", "invalid_json", "", std::move(message), 0};
}

ApiError contextLengthExceeded(std::string param, int64_t prompt_tokens, int64_t max_tokens, int64_t max_context) {
  std::string message = "This model's maximum context length is " + std::to_string(max_context) +
                        " tokens. However, you requested " + std::to_string(prompt_tokens + max_tokens) +
                        " tokens (" + std::to_string(prompt_tokens) + " in the prompt, " +
                        std::to_string(max_tokens) + " for the completion). Please reduce the length of the " +
                        "prompt or the completion.";
  return ApiError{400, "invalid_request_error", "context_length_exceeded", std::move(param), std::move(message), 0};
}

ApiError invalidApiKey() {
  return ApiError{401, "invalid_request_error", "invalid_api_key", "",
                  "Incorrect API key provided. Send a valid key as 'Authorization: Bearer KEY'.", 0};
}

ApiError modelNotFound(std::string_view model) {
  return ApiError{404, "invalid_request_error", "model_not_found", "model",
                  "The model '" + std::string(model) + "' does not exist or you do not have access to it.", 0};
}

ApiError internalError() {
  return ApiError{500, "server_error", "internal_error", "",
                  "The server had an error while processing your request. Please retry.", 0};
}

ApiError refusalError(serving::Refusal refusal, std::string_view message, const ParamNames& params,
                      const RetryAfter& retry) {
  using serving::Refusal;
  const std::string m(message);
  switch (refusal) {
    case Refusal::kEmptyPrompt:
      return invalidRequest(std::string(params.prompt), "invalid_value", "The prompt is empty: " + m);
    case Refusal::kTokenOutOfRange:
      return invalidRequest(std::string(params.prompt), "invalid_value", m);
    case Refusal::kMaxTokens:
      return invalidRequest(std::string(params.max_tokens), "invalid_value", m);
    case Refusal::kTemperature:
      return invalidRequest("temperature", "invalid_value", m);
    case Refusal::kTopP:
      return invalidRequest("top_p", "invalid_value", m);
    case Refusal::kTopK:
      return invalidRequest("top_k", "invalid_value", m);
    case Refusal::kLogprobs:
      return invalidRequest(std::string(params.top_logprobs), "invalid_value", m);
    case Refusal::kStopStrings:
      return invalidRequest("stop", "invalid_value", m);
    case Refusal::kLogitProcessing:
      return invalidRequest("", "invalid_value", m);
    case Refusal::kContextOverflow:
    case Refusal::kExceedsPool:
      // The scheduler's message names the prompt's length, max_tokens and the limit.
      return ApiError{400, "invalid_request_error", "context_length_exceeded", std::string(params.prompt), m, 0};
    case Refusal::kTooManyChoices:
      return invalidRequest(std::string(params.prompt), "invalid_value", m);
    case Refusal::kQueueFull:
      return ApiError{429, "rate_limit_error", "rate_limit_exceeded", "",
                      "The server is at capacity: too many requests are waiting. Please retry after " +
                          std::to_string(retry.queue_full_s) + " s.",
                      retry.queue_full_s};
    case Refusal::kQueueTimeout:
      return ApiError{503, "server_error", "server_overloaded", "",
                      "The server is overloaded: the request waited too long to start. Please retry after " +
                          std::to_string(retry.queue_timeout_s) + " s.",
                      retry.queue_timeout_s};
    case Refusal::kShuttingDown:
      return ApiError{503, "server_error", "server_shutting_down", "",
                      "The server is shutting down. Please retry after " + std::to_string(retry.shutting_down_s) +
                          " s.",
                      retry.shutting_down_s};
    case Refusal::kNone:
      break;
  }
  return internalError();
}

std::optional<ApiError> finalEventError(const serving::StreamEvent& final_event, const ParamNames& params,
                                        const RetryAfter& retry) {
  switch (final_event.finish_reason) {
    case serving::FinishReason::kStop:
    case serving::FinishReason::kLength:
      return std::nullopt;
    case serving::FinishReason::kRefused:
      return refusalError(final_event.refusal, final_event.message, params, retry);
    case serving::FinishReason::kCancelled:
      return ApiError{503, "server_error", "request_cancelled", "",
                      "The request was cancelled before it finished (its deadline passed or the server is "
                      "shutting down).",
                      retry.shutting_down_s};
    case serving::FinishReason::kError:
      // The engine's message is for the server's log.
      return ApiError{500, "server_error", "generation_failed", "",
                      "The model failed while generating the response. Please retry.", 0};
  }
  return internalError();
}

}  // namespace lg::proxy::openai

// Responder: what the three responders (chat_response.h,
// completion_response.h, responses_response.h) are to the generation call
// (proxy/gateway/generation.h), and what they share: the identity of a
// response, what each scheduler event turns into, and the finish_reason
// mapping.
//
// A responder is fed a request's serving::StreamEvents in order. Streaming,
// each event yields the SSE bytes to write now; otherwise nothing until the
// final event, which yields the whole JSON body. A final event that ends the
// request in failure (refused, cancelled, engine error) yields an ApiError:
// not streaming, the server sends it instead of a body; streaming, the body
// already holds the error event that ends the stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/openai/api_error.h"
#include "serving/events.h"

namespace lg::proxy::openai {

struct ResponseMeta {
  std::string id;       // "chatcmpl-...", "cmpl-...", "resp_..." (made up when empty)
  int64_t created = 0;  // Unix seconds (now when 0)
  std::string model;    // echoed as the client named it
  std::string system_fingerprint;  // chat and completions; empty: null
};

struct ResponderOutput {
  std::string body;                // bytes to send now (SSE events, or the JSON body)
  bool done = false;               // nothing more will be sent
  std::optional<ApiError> error;   // the request failed (see above)
};

// Fed by the generation call: start() once, before any event, on the I/O
// thread; then every event of every choice, in order per choice, on the
// engine thread (never concurrently).
class Responder {
 public:
  virtual ~Responder() = default;
  // The first bytes of a stream, sent as soon as the request is accepted;
  // empty for none.
  virtual std::string start() { return {}; }
  // One event of the choice `choice` (0 for single-choice responders).
  virtual ResponderOutput onEvent(size_t choice, const serving::StreamEvent& event) = 0;
};

// "stop", "length" or "tool_calls" (kStop after a tool call). kCancelled,
// kError and kRefused never reach a client as a finish reason (they are
// errors: finalEventError); they map to "stop" here.
std::string_view finishReasonText(serving::FinishReason reason, bool called_tools);

}  // namespace lg::proxy::openai

// CustomToolInputDecoder: a custom tool call's input as its arguments stream.
//
// A Responses custom tool is offered to the model as a function of one string
// argument (responses_request.h), so the model writes {"input": "TEXT"} and
// the client reads TEXT (custom_tool_call.input, streamed as
// response.custom_tool_call_input.delta). The decoder turns argument bytes
// into TEXT as they arrive, holding back only an escape sequence or a
// multi-byte character split across pushes. Arguments that are not such an
// object (possible only without the grammar that enforces it) are passed
// through raw from where they stop being one, so the deltas always add up to
// the final input.
//
// Not thread-safe: one per call.
#pragma once

#include <string>
#include <string_view>

namespace lg::proxy::openai {

class CustomToolInputDecoder {
 public:
  // The input text that `arguments` (the next bytes of the arguments)
  // completes; may be empty.
  std::string push(std::string_view arguments);
  // The end of the call: what was held back (raw, when it never decoded).
  std::string finish();

 private:
  enum class State : unsigned char { kLead, kString, kAfter, kRaw };
  // Decodes pending_ from its front while it can.
  void decode(std::string& out);

  State state_ = State::kLead;
  std::string pending_;  // bytes received and not yet decoded
};

}  // namespace lg::proxy::openai

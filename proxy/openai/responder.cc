#include "proxy/openai/responder.h"

namespace lg::proxy::openai {

std::string_view finishReasonText(serving::FinishReason reason, bool called_tools) {
  switch (reason) {
    case serving::FinishReason::kLength:
      return "length";
    case serving::FinishReason::kStop:
      return called_tools ? "tool_calls" : "stop";
    case serving::FinishReason::kCancelled:
    case serving::FinishReason::kError:
    case serving::FinishReason::kRefused:
      break;
  }
  return "stop";
}

}  // namespace lg::proxy::openai

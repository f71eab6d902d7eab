// libFuzzer target: a /v1/chat/completions body through the schema layer.
// Each input is parsed as the request body (parseJsonBody, then
// parseChatCompletionRequest); a request that parses is rendered through the
// real DeepSeek-V3 template and tokenized, and its sampling resolved. The
// input's bytes are also fed, as model output cut in three, to a streaming
// chat responder with tools on, whose SSE must parse back. Seeds:
// tests/fuzz/make_seeds.sh openai_chat_fuzz DIR.
#include <cstddef>
#include <cstdint>

#include "openai_fuzz_common.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/json_body.h"

using namespace lg::proxy::openai;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const fuzz::Model& m = fuzz::model();
  const ParseLimits limits;

  ApiResult<nlohmann::json> body = parseJsonBody(input, limits);
  if (!body.isOk()) {
    fuzz::checkError(body.error());
  } else if (ApiResult<ParsedChatRequest> req = parseChatCompletionRequest(*body, limits); !req.isOk()) {
    fuzz::checkError(req.error());
  } else {
    ApiResult<EncodedPrompt> encoded = m.encoder->encodeChat(req->prompt, "messages");
    if (!encoded.isOk()) {
      fuzz::checkError(encoded.error());
    } else {
      ApiResult<lg::serving::SamplingOptions> s = resolveSampling(req->sampling, encoded->ids.size(), 16384, req->params);
      if (!s.isOk()) fuzz::checkError(s.error());
      else if (s->max_tokens < 1) std::abort();
    }
  }

  ChatResponderOptions o;
  o.stream = true;
  o.include_usage = true;
  o.parser.tool_calls = true;
  o.parser.starts_in_reasoning = size > 0 && data[0] % 3 == 0;
  o.parser.max_tool_calls = size > 1 && data[1] % 2 == 0 ? 1 : -1;
  ChatResponder responder(o);
  const size_t a = size / 3, b = 2 * size / 3;
  std::string out = responder.start();
  out += responder.onEvent(fuzz::textEvent(input.substr(0, a), false)).body;
  out += responder.onEvent(fuzz::textEvent(input.substr(a, b - a), false)).body;
  out += responder.onEvent(fuzz::textEvent(input.substr(b), true)).body;
  fuzz::checkSse(out);
  return 0;
}

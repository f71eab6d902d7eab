// libFuzzer target: a /v1/responses body through the schema layer: parsed
// (parseJsonBody, parseResponsesRequest), rendered through the real
// DeepSeek-V3 template and tokenized, and a streaming Responses responder
// run with the request's echo and the input's bytes as model output; every
// event must parse back and sequence numbers must count from 0. Seeds:
// tests/fuzz/make_seeds.sh openai_responses_fuzz DIR.
#include <cstddef>
#include <cstdint>

#include "openai_fuzz_common.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai/responses_request.h"

using namespace lg::proxy::openai;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const fuzz::Model& m = fuzz::model();
  const ParseLimits limits;

  ResponsesResponderOptions o;
  o.stream = true;
  o.parser.tool_calls = true;
  ApiResult<nlohmann::json> body = parseJsonBody(input, limits);
  if (!body.isOk()) {
    fuzz::checkError(body.error());
  } else if (ApiResult<ParsedResponsesRequest> req = parseResponsesRequest(*body, limits); !req.isOk()) {
    fuzz::checkError(req.error());
  } else {
    ApiResult<EncodedPrompt> encoded = m.encoder->encodeChat(req->prompt, "input");
    if (!encoded.isOk()) {
      fuzz::checkError(encoded.error());
    } else {
      o.parser = m.encoder->outputOptions(req->prompt, *encoded);
      ApiResult<lg::serving::SamplingOptions> s = resolveSampling(req->sampling, encoded->ids.size(), 16384, req->params);
      if (!s.isOk()) fuzz::checkError(s.error());
    }
    o.echo = req->echo;
  }

  ResponsesResponder responder(o);
  const size_t half = size / 2;
  std::string out = responder.start();
  out += responder.onEvent(fuzz::textEvent(input.substr(0, half), false)).body;
  lg::serving::StreamEvent last = fuzz::textEvent(input.substr(half), true);
  if (size > 0 && data[size - 1] % 2 == 0) last.finish_reason = lg::serving::FinishReason::kLength;
  out += responder.onEvent(last).body;
  const std::vector<nlohmann::json> events = fuzz::checkSse(out);
  for (size_t i = 0; i < events.size(); ++i) {
    const auto it = events[i].find("sequence_number");
    if (it == events[i].end() || *it != i) std::abort();
  }
  return 0;
}

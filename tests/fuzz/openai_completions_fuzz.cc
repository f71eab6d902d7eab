// libFuzzer target: a /v1/completions body through the schema layer: parsed
// (parseJsonBody, parseCompletionRequest), each prompt encoded as plain text
// or passed through as ids, sampling resolved, and a streaming completion
// responder run over every choice with echo and logprobs built from the
// prompt ids (token text for any id, in or out of the vocabulary). Seeds:
// tests/fuzz/make_seeds.sh openai_completions_fuzz DIR.
#include <cstddef>
#include <cstdint>

#include "openai_fuzz_common.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/completion_response.h"
#include "proxy/openai/json_body.h"

using namespace lg::proxy::openai;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const fuzz::Model& m = fuzz::model();
  const ParseLimits limits;

  ApiResult<nlohmann::json> body = parseJsonBody(input, limits);
  if (!body.isOk()) {
    fuzz::checkError(body.error());
    return 0;
  }
  ApiResult<ParsedCompletionRequest> req = parseCompletionRequest(*body, limits);
  if (!req.isOk()) {
    fuzz::checkError(req.error());
    return 0;
  }
  CompletionResponderOptions o;
  o.stream = req->stream;
  o.include_usage = req->include_usage;
  o.logprobs = req->logprobs;
  o.tokenizer = m.tokenizer.get();
  o.choices = req->prompts.size();
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < req->prompts.size(); ++i) {
    ApiResult<EncodedPrompt> encoded = m.encoder->encodeCompletion(req->prompts[i], i, req->prompts.size());
    if (!encoded.isOk()) {
      fuzz::checkError(encoded.error());
      return 0;
    }
    ApiResult<lg::serving::SamplingOptions> s = resolveSampling(req->sampling, encoded->ids.size(), 16384, req->params);
    if (!s.isOk()) fuzz::checkError(s.error());
    if (req->echo) o.echo_texts.push_back(completionEchoText(req->prompts[i], *m.tokenizer));
    ids.push_back(std::move(encoded->ids));
  }
  CompletionResponder responder(o);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    lg::serving::StreamEvent e = fuzz::textEvent("text", true);
    for (size_t k = 0; k < ids[i].size() && k < 64; ++k) {
      e.prompt_logprobs.push_back({ids[i][k], k == 0 ? std::nullopt : std::optional<float>(-1.0f), {{ids[i][k], -1.0f}}});
      e.logprobs.push_back({ids[i][k], -0.5f, {{ids[i][k], -0.5f}}});
    }
    ResponderOutput r = responder.onEvent(i, e);
    out += r.body;
    if (!o.stream && r.done && nlohmann::json::parse(r.body, nullptr, false).is_discarded()) std::abort();
  }
  if (o.stream) fuzz::checkSse(out);
  return 0;
}

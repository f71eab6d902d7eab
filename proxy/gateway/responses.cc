// POST /v1/responses: the Responses API, one choice, with stored responses
// and previous_response_id (response_store.h), answered by the
// ResponsesResponder (docs/openai-api.md).
#include "common/unix_time.h"
#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai/responses_request.h"
#include "proxy/openai/responses_response.h"

namespace lg::proxy {

void Gateway::responses(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                        const billing::Principal& who) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseResponsesRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  nlohmann::json input;  // the effective input items, kept with the response when it is stored
  if (parsed->previous_response_id) {
    auto previous = previousResponse(request, who, *parsed->previous_response_id);
    if (!previous) return respondWithApiError(*exchange, previous.error());
    // The conversation so far and the new items, parsed as if the client had
    // sent them all: the prompt is the same tokens as a resent conversation,
    // so the prefix cache finds the earlier turns. (The request was parsed
    // once before so that its errors name the client's own items.)
    input = continuedInput(*previous, (*body)["input"]);
    (*body)["input"] = input;
    parsed = openai::parseResponsesRequest(*body, options_.limits);
    if (!parsed) return respondWithApiError(*exchange, parsed.error());
  } else if (parsed->store && responses_ != nullptr) {
    input = inputItems((*body)["input"]);
  }
  if (!parsed->hosted_tools.empty()) {
    proxyLog()->info("request {}: hosted tools left out of the prompt: {}", request.id, parsed->hosted_tools.size());
  }
  auto encoded = encoder_.encodeChat(parsed->prompt, "input");
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
  if (!sampling) return respondWithApiError(*exchange, sampling.error());

  GenerationPlan plan =
      newPlan(openai::newId("resp_"), parsed->model, parsed->stream, parsed->ignored, parsed->hosted_tools);
  plan.system_prompt = systemPromptOf(parsed->prompt);
  plan.params = parsed->params;
  openai::ResponsesResponderOptions ro;
  ro.meta.id = plan.response_id;
  ro.meta.created = unixSeconds();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.echo = parsed->echo;
  ro.parser = encoder_.outputOptions(parsed->prompt, *encoded);
  ro.params = parsed->params;
  ro.retry = generation_.retry();
  plan.responder = [ro = std::move(ro)](openai::UsageCostHook cost) mutable {
    ro.cost = std::move(cost);
    return std::make_shared<openai::ResponsesResponder>(std::move(ro));
  };
  if (responses_ != nullptr) {
    // On the engine thread, before the client sees the end of the response,
    // so that a continuation sent at once finds it. record() writes without
    // an fsync (response_store.h), and nothing at all for store: false or a
    // response that failed.
    plan.on_done = [store = responses_, owner = who.key_id, keep = parsed->store, input = std::move(input),
                    request_id = request.id](const openai::Responder& responder) {
      const auto& r = static_cast<const openai::ResponsesResponder&>(responder);
      if (Status s = store->record(owner, keep, input, r.finalResponse()); !s.isOk()) {
        proxyLog()->error("request {}: storing response {} failed: {}", request_id, r.id(), s.toString());
      }
    };
  }
  serving::GenerationRequest gen = newRequest(who);
  gen.prompt = std::move(encoded->ids);
  gen.sampling = std::move(*sampling);
  plan.choices.push_back(std::move(gen));
  generation_.run(std::move(exchange), who, std::move(plan));
}

}  // namespace lg::proxy

// POST /v1/responses: the Responses API, one choice, with stored responses
// and previous_response_id (response_store.h), answered by the
// ResponsesResponder (docs/openai-api.md).
#include "common/unix_time.h"
#include "proxy/gateway/gateway.h"
#include "proxy/http/blocking_pool.h"
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
  if (parsed->previous_response_id && responses_ != nullptr && blocking_ != nullptr) {
    // Reading the chain is RocksDB point reads and JSON parses: on the
    // blocking pool, in the caller's share of it, never on an I/O thread.
    auto job = [this, exchange, who, body = std::move(*body), parsed = std::move(*parsed)]() mutable {
      continueResponse(exchange->request(), exchange, who, std::move(body), std::move(parsed));
    };
    return blocking_->submit(BlockingPool::tenant(who.team), exchange, std::move(job));
  }
  continueResponse(request, std::move(exchange), who, std::move(*body), std::move(*parsed));
}

void Gateway::continueResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                               const billing::Principal& who, nlohmann::json body,
                               openai::ParsedResponsesRequest first_parse) const {
  openai::ApiResult<openai::ParsedResponsesRequest> parsed = std::move(first_parse);
  std::optional<StoredConversation> previous;
  if (parsed->previous_response_id) {
    auto found = previousResponse(request, who, *parsed->previous_response_id);
    if (!found) return respondWithApiError(*exchange, found.error());
    previous = std::move(*found);
  }
  // What a stored response keeps of this turn (response_store.h): a
  // reference to the previous response and the turn's own prompt items, or a
  // whole conversation as a new root. Its size is checked before any work.
  StoredTurn turn;
  if (parsed->store && responses_ != nullptr) {
    turn = responses_->turnFor(previous ? &*previous : nullptr, body["input"]);
    if (Status s = responses_->checkSize(turn); !s.isOk()) {
      ApiError e = openai::invalidRequest(
          "input", "stored_response_too_large",
          s.message() + " bytes (server.max_stored_response_bytes); send fewer or smaller input items, or store: false.");
      return respondWithApiError(*exchange, e);
    }
  }
  if (previous) {
    // The conversation so far and the new items, parsed as if the client had
    // sent them all: the prompt is the same tokens as a resent conversation,
    // so the prefix cache finds the earlier turns. (The request was parsed
    // once before so that its errors name the client's own items.)
    body["input"] = continuedInput(*previous, body["input"]);
    parsed = openai::parseResponsesRequest(body, options_.limits);
    if (!parsed) return respondWithApiError(*exchange, parsed.error());
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
  plan.system_prompt = systemPromptOf(who, parsed->prompt);
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
    plan.on_done = [store = responses_, owner = who.key_id, keep = parsed->store, turn = std::move(turn),
                    request_id = request.id](const openai::Responder& responder) {
      const auto& r = static_cast<const openai::ResponsesResponder&>(responder);
      if (Status s = store->record(owner, keep, turn, r.finalResponse()); !s.isOk()) {
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

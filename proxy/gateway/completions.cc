// POST /v1/completions: raw prompts (text or token ids), one choice per
// prompt, answered by the CompletionResponder (docs/openai-api.md).
#include "common/unix_time.h"
#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/completion_response.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"

namespace lg::proxy {

void Gateway::completions(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                          const billing::Principal& who) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseCompletionRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));

  // vLLM's structured outputs: one grammar for every choice.
  auto reply = structured_.describeFormat(parsed->format, request.body);
  if (!reply) return respondWithApiError(*exchange, reply.error());

  GenerationPlan plan = newPlan(openai::newId("cmpl-"), parsed->model, parsed->stream, {}, {});
  plan.params = parsed->params;
  openai::CompletionResponderOptions ro;
  const size_t n = parsed->prompts.size();
  for (size_t i = 0; i < n; ++i) {
    auto encoded = encoder_.encodeCompletion(parsed->prompts[i], i, n);
    if (!encoded) return respondWithApiError(*exchange, encoded.error());
    auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
    if (!sampling) return respondWithApiError(*exchange, sampling.error());
    for (int32_t j = 0; parsed->echo && j < parsed->n; ++j) {
      ro.echo_texts.push_back(openai::completionEchoText(parsed->prompts[i], tokenizer_));
    }
    serving::GenerationRequest gen = newRequest(who);
    gen.prompt = std::move(encoded->ids);
    gen.sampling = std::move(*sampling);
    addChoices(plan, std::move(gen), parsed->n);
  }
  ro.meta.id = plan.response_id;
  ro.meta.created = unixSeconds();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.include_usage = parsed->include_usage;
  ro.logprobs = parsed->logprobs;
  ro.tokenizer = &tokenizer_;
  ro.choices = plan.choices.size();
  ro.params = parsed->params;
  ro.retry = generation_.retry();
  plan.responder = [ro = std::move(ro)](openai::UsageCostHook cost) mutable {
    ro.cost = std::move(cost);
    return std::make_shared<openai::CompletionResponder>(std::move(ro));
  };
  runConstrained(std::move(exchange), who, std::move(plan), std::move(*reply));
}

}  // namespace lg::proxy

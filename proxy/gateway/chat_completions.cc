// POST /v1/chat/completions: a conversation rendered with the chat template,
// n choices, its output constrained by response_format or the tool rules
// (structured_output.h), answered by the ChatResponder (docs/openai-api.md).
#include "common/team_id.h"
#include "common/unix_time.h"
#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/chat_response.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"

namespace lg::proxy {

void Gateway::chatCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                              const billing::Principal& who) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseChatCompletionRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  auto encoded = encoder_.encodeChat(parsed->prompt, "messages");
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  // Earlier replies in the history as the model generated them (reply_ids.h).
  const bool keep_replies = reply_ids_ != nullptr && reply_ids_->enabled();
  const std::string scope = keep_replies ? teamScope(who.team, who.team_generation) : std::string();
  if (keep_replies) reply_ids_->substitute(tokenizer_, scope, parsed->prompt, encoded->ids);
  auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
  if (!sampling) return respondWithApiError(*exchange, sampling.error());
  const openai::OutputParserOptions parser = encoder_.outputOptions(parsed->prompt, *encoded);
  auto reply = structured_.describeChat(parsed->prompt, parser, request.body);
  if (!reply) return respondWithApiError(*exchange, reply.error());

  GenerationPlan plan = newPlan(openai::newId("chatcmpl-"), parsed->model, parsed->stream, {}, parsed->hosted_tools);
  plan.system_prompt = systemPromptOf(who, parsed->prompt);
  plan.layout = openai::inTokens(encoded->layout, token_lengths_, encoded->ids);
  plan.params = parsed->params;
  openai::ChatResponderOptions ro;
  ro.meta.id = plan.response_id;
  ro.meta.created = unixSeconds();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.include_usage = parsed->include_usage;
  ro.logprobs = sampling->logprobs;
  ro.tokenizer = &tokenizer_;
  ro.parser = parser;
  ro.params = parsed->params;
  ro.retry = generation_.retry();
  ro.choices = static_cast<size_t>(parsed->n);
  plan.responder = [ro = std::move(ro)](openai::UsageCostHook cost) mutable {
    ro.cost = std::move(cost);
    return std::make_shared<openai::ChatResponder>(std::move(ro));
  };
  if (keep_replies) {
    auto recorder = std::make_shared<ReplyRecorder>(*reply_ids_, scope, encoded->ids, parser,
                                                    static_cast<size_t>(parsed->n), reply->constrained());
    plan.observe = [recorder](size_t choice, const serving::StreamEvent& e) { recorder->onEvent(choice, e); };
  }
  serving::GenerationRequest gen = newRequest(who);
  gen.prompt = std::move(encoded->ids);
  gen.sampling = std::move(*sampling);
  // n choices of one prompt: one group, so the prompt's blocks are computed
  // once (the others wait for them in the cache) and all start together.
  addChoices(plan, std::move(gen), parsed->n);
  runConstrained(std::move(exchange), who, std::move(plan), std::move(*reply));
}

}  // namespace lg::proxy

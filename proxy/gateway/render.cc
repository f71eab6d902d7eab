// POST /v1/chat/completions/render and POST /v1/completions/render: vLLM's
// render routes, which routers that score replicas by their cached prefixes
// (llm-d's precise prefix-cache scorer, the Gateway API Inference Extension)
// call with a client's request to learn its token ids before they pick a
// replica (docs/openai-api.md, "The render routes").
//
// The ids are what the chat and completions endpoints would run: the body is
// parsed by the same parsers (and refused the same way), and the prompt
// encoded by the same PromptEncoder call, with the same template, tools and
// system-prompt additions. Nothing is generated, cached, admitted or billed:
// no budget or per-minute limit is charged. The route's body limit is the
// generation routes' (server.max_body_bytes).
//
// Answers, in vLLM's shapes (its GenerateRequest): chat, one object
// {request_id, token_ids, features, model, stream, stream_options};
// completions, an array of them, one per prompt. `features` is null, as vLLM
// answers a prompt without images. vLLM's sampling_params is left out: it
// serves vLLM's token-in generate route, which this server does not have.
#include <nlohmann/json.hpp>

#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"

namespace lg::proxy {
namespace {

using nlohmann::json;

// One vLLM GenerateRequest for a rendered prompt.
json rendered(std::string_view id_prefix, std::vector<int32_t> ids, const std::string& model, bool stream,
              bool include_usage) {
  return json{{"request_id", openai::newId(id_prefix)},
              {"token_ids", std::move(ids)},
              {"features", nullptr},
              {"model", model},
              {"stream", stream},
              // vLLM echoes the options only for a stream.
              {"stream_options", stream ? json{{"include_usage", include_usage}} : json(nullptr)}};
}

}  // namespace

void Gateway::renderChat(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseChatRenderRequest(std::move(*body), options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  const openai::ParsedChatRequest& chat = parsed->chat;
  if (!knownModel(chat.model)) return respondWithApiError(*exchange, openai::modelNotFound(chat.model));
  auto encoded = encoder_.encodeChat(chat.prompt, "messages", parsed->ending);
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  exchange->respond(200, jsonHeaders(),
                    rendered("chatcmpl-", std::move(encoded->ids), chat.model, chat.stream, chat.include_usage).dump());
}

void Gateway::renderCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseCompletionRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  json out = json::array();
  const size_t n = parsed->prompts.size();
  for (size_t i = 0; i < n; ++i) {
    auto encoded = encoder_.encodeCompletion(parsed->prompts[i], i, n);
    if (!encoded) return respondWithApiError(*exchange, encoded.error());
    out.push_back(rendered("cmpl-", std::move(encoded->ids), parsed->model, parsed->stream, parsed->include_usage));
  }
  exchange->respond(200, jsonHeaders(), out.dump());
}

}  // namespace lg::proxy

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
  if (responses_ != nullptr && hasItemReferences(*body)) {
    // item_reference items name stored output items (the AI SDK's multi-turn
    // on .responses() sends them): read them, on the blocking pool when
    // there is one, then go on as if the client had sent the items.
    auto job = [this, exchange, who, body = std::move(*body)]() mutable {
      const HttpRequest& r = exchange->request();
      if (auto e = resolveItemReferences(r, who, body["input"])) return respondWithApiError(*exchange, *e);
      auto parsed = openai::parseResponsesRequest(body, options_.limits);
      if (!parsed) return respondWithApiError(*exchange, parsed.error());
      if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
      continueResponse(r, exchange, who, std::move(body), std::move(*parsed));
    };
    if (blocking_ == nullptr) return job();
    return blocking_->submit(BlockingPool::tenant(who.team), exchange, std::move(job));
  }
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

namespace {

// Whether the prompt and the output the request asks for fit the context.
bool fits(const openai::ApiResult<openai::EncodedPrompt>& encoded, const openai::SamplingSpec& sampling,
          int32_t max_context) {
  if (!encoded) return false;
  const int64_t output = sampling.requested_max_tokens.value_or(1);
  return max_context <= 0 || static_cast<int64_t>(encoded->ids.size()) + output <= max_context;
}

}  // namespace

void Gateway::truncateToFit(openai::ParsedResponsesRequest& request) const {
  using openai::Role;
  std::vector<openai::ChatMessage>& messages = request.prompt.messages;
  if (fits(encoder_.encodeChat(request.prompt, "input"), request.sampling, options_.max_context)) return;
  // The instructions (leading system and developer messages) stay, and so
  // does the last item; between them the oldest go first. A tool output
  // whose call was dropped goes with it. Fewer items never make a longer
  // prompt, so the fewest to drop is found by bisection (a few renders).
  size_t first = 0;
  while (first < messages.size() && (messages[first].role == Role::kSystem || messages[first].role == Role::kDeveloper)) {
    ++first;
  }
  if (messages.size() < first + 2) return;  // nothing droppable: the 400 says how long it is
  const auto without = [&](size_t k) {
    size_t end = first + k;
    while (end + 1 < messages.size() && messages[end].role == Role::kTool) ++end;
    openai::ChatPrompt p = request.prompt;
    p.messages.erase(p.messages.begin() + static_cast<std::ptrdiff_t>(first),
                     p.messages.begin() + static_cast<std::ptrdiff_t>(end));
    return p;
  };
  size_t lo = 1, hi = messages.size() - first - 1;  // drop at least one, keep the last
  if (!fits(encoder_.encodeChat(without(hi), "input"), request.sampling, options_.max_context)) {
    request.prompt = without(hi);  // still too long: the 400 names the numbers
    return;
  }
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (fits(encoder_.encodeChat(without(mid), "input"), request.sampling, options_.max_context)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  request.prompt = without(lo);
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
  if (parsed->truncate_auto) truncateToFit(*parsed);
  auto encoded = encoder_.encodeChat(parsed->prompt, "input");
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
  if (!sampling) return respondWithApiError(*exchange, sampling.error());
  const openai::OutputParserOptions parser = encoder_.outputOptions(parsed->prompt, *encoded);
  auto reply = structured_.describeChat(parsed->prompt, parser, request.body);
  if (!reply) return respondWithApiError(*exchange, reply.error());

  GenerationPlan plan =
      newPlan(openai::newId("resp_"), parsed->model, parsed->stream, parsed->ignored, parsed->hosted_tools);
  plan.system_prompt = systemPromptOf(who, parsed->prompt);
  plan.layout = openai::inTokens(encoded->layout, token_lengths_, encoded->ids);
  plan.params = parsed->params;
  openai::ResponsesResponderOptions ro;
  ro.meta.id = plan.response_id;
  ro.meta.created = unixSeconds();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.echo = parsed->echo;
  ro.parser = parser;
  ro.logprobs = sampling->logprobs;
  ro.tokenizer = &tokenizer_;
  ro.params = parsed->params;
  ro.retry = generation_.retry();
  ro.tool_origins = openai::toolOrigins(parsed->prompt.tools);
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
  runConstrained(std::move(exchange), who, std::move(plan), std::move(*reply));
}

}  // namespace lg::proxy

#include "proxy/admin/shared_prefixes.h"

#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/json_body.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"

namespace lg::proxy {
namespace {

using nlohmann::json;

// The team namespace a publication is computed in. Random (128 bits), so
// that no key's team can ever name it: a key's own namespace is what its
// requests read without any grant.
std::optional<cache::TeamNamespace> publisherNamespace() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return std::nullopt;
  return cache::TeamNamespace::ofTeam("shared-publisher-" + hexLower(bytes, sizeof bytes)).value();
}

// Its final event comes after the scheduler released the sequence: the
// prompt's whole blocks are then in the cache, under `from`, and are
// published into `to`; the answer names what was published.
class PublishResponder final : public openai::Responder {
 public:
  PublishResponder(cache::PrefixCache& cache, cache::TeamNamespace from, cache::SharedNamespace to,
                   std::vector<int32_t> ids, openai::ParamNames params, openai::RetryAfter retry, int32_t block_tokens)
      : cache_(cache), from_(std::move(from)), to_(std::move(to)), ids_(std::move(ids)), params_(params),
        retry_(retry), block_tokens_(block_tokens) {}

  openai::ResponderOutput onEvent(size_t, const serving::StreamEvent& e) override {
    openai::ResponderOutput out;
    if (!e.final) return out;
    out.done = true;
    if (auto error = openai::finalEventError(e, params_, retry_)) {
      out.error = std::move(error);
      return out;
    }
    Result<int32_t> published = cache_.publishToNamespace(from_, to_, ids_);
    if (!published.isOk()) {
      // Evicted between the prefill and now: the pool is under pressure.
      proxyLog()->warn("publishing a shared prefix into {}: {}", to_.name(), published.status().toString());
      ApiError busy = openai::refusalError(serving::Refusal::kQueueTimeout, "", params_, retry_);
      busy.message = "The prefix was evicted before it could be published (the cache is full); retry later.";
      out.error = std::move(busy);
      return out;
    }
    proxyLog()->info("admin published a shared prefix into {}: {} tokens, {} blocks", to_.name(), ids_.size(),
                     *published);
    out.body = json{{"object", "shared_prefix"},
                    {"namespace", std::string(to_.name())},
                    {"prompt_tokens", ids_.size()},
                    {"cached_tokens", int64_t{*published} * block_tokens_}}
                   .dump();
    return out;
  }

 private:
  cache::PrefixCache& cache_;
  const cache::TeamNamespace from_;
  const cache::SharedNamespace to_;
  const std::vector<int32_t> ids_;
  const openai::ParamNames params_;
  const openai::RetryAfter retry_;
  const int32_t block_tokens_;
};

}  // namespace

SharedPrefixPublisher::SharedPrefixPublisher(SharedPrefixOptions options, const Generation& generation,
                                             cache::PrefixCache& cache, const openai::PromptEncoder& encoder,
                                             const Admission& admission)
    : options_(std::move(options)), generation_(generation), cache_(cache), encoder_(encoder), admission_(admission) {}

void SharedPrefixPublisher::addRoutes(Router& router) const {
  // A published prefix is a prompt: the large body limit.
  router.add("POST", "/admin/shared-prefixes", admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) {
    publish(r, std::move(e));
  }), Runs::kOnIoThread, BodySize::kLarge);
}

void SharedPrefixPublisher::publish(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());

  const auto name = body->find("namespace");
  if (name == body->end()) {
    return respondWithApiError(*exchange, openai::invalidRequest("namespace", "missing_required_parameter",
                                                                 "`namespace` is required"));
  }
  if (!name->is_string()) {
    return respondWithApiError(*exchange,
                               openai::invalidRequest("namespace", "invalid_type", "`namespace` must be a string"));
  }
  std::optional<cache::SharedNamespace> shared;
  std::string configured;
  for (const cache::SharedNamespace& ns : options_.namespaces) {
    if (ns.name() == name->get<std::string>()) shared = ns;
    configured += (configured.empty() ? "" : ", ") + std::string(ns.name());
  }
  if (!shared) {
    return respondWithApiError(
        *exchange, openai::invalidRequest("namespace", "invalid_value",
                                          "`namespace` must be one of cache.shared_namespaces (" +
                                              (configured.empty() ? std::string("none is configured") : configured) + ")"));
  }

  // The endpoints' own parsers and encoder, so that the prefix is tokenized
  // exactly as the clients' requests that should hit it will be.
  const bool chat = body->contains("messages");
  if (chat && body->contains("prompt")) {
    return respondWithApiError(
        *exchange, openai::invalidRequest("prompt", "invalid_value", "Send `messages` or `prompt`, not both"));
  }
  if (!chat && !body->contains("prompt")) {
    return respondWithApiError(*exchange, openai::invalidRequest("messages", "missing_required_parameter",
                                                                 "Send the prefix as `messages` or as `prompt`"));
  }
  if (!body->contains("model")) (*body)["model"] = options_.model_id;
  // `namespace` is this route's own field; the endpoints' parsers refuse
  // fields they do not know.
  body->erase("namespace");
  std::vector<int32_t> ids;
  openai::ParamNames params;
  if (chat) {
    auto parsed = openai::parseChatCompletionRequest(*body, options_.limits);
    if (!parsed) return respondWithApiError(*exchange, parsed.error());
    auto encoded = encoder_.encodeChat(parsed->prompt, "messages");
    if (!encoded) return respondWithApiError(*exchange, encoded.error());
    ids = std::move(encoded->ids);
    params = parsed->params;
  } else {
    auto parsed = openai::parseCompletionRequest(*body, options_.limits);
    if (!parsed) return respondWithApiError(*exchange, parsed.error());
    if (parsed->prompts.size() != 1) {
      return respondWithApiError(*exchange, openai::invalidRequest("prompt", "invalid_value", "Send one prompt"));
    }
    auto encoded = encoder_.encodeCompletion(parsed->prompts[0], 0, 1);
    if (!encoded) return respondWithApiError(*exchange, encoded.error());
    ids = std::move(encoded->ids);
    params = parsed->params;
  }
  if (static_cast<int64_t>(ids.size()) < options_.block_tokens) {
    return respondWithApiError(
        *exchange, openai::invalidRequest(std::string(params.prompt), "invalid_value",
                                          "The prompt has " + std::to_string(ids.size()) +
                                              " tokens, fewer than one cache block (" +
                                              std::to_string(options_.block_tokens) + "): nothing of it can be shared"));
  }
  std::optional<cache::TeamNamespace> from = publisherNamespace();
  if (!from) {
    proxyLog()->error("publishing a shared prefix: no randomness for its namespace");
    return respondWithApiError(*exchange, openai::internalError());
  }

  serving::GenerationRequest gen(*from);
  gen.prompt = ids;
  gen.sampling.max_tokens = 1;  // the scheduler computes a prompt only for a request that generates
  gen.sampling.temperature = 0;
  GenerationPlan plan;
  plan.params = params;
  plan.headers = jsonHeaders();
  plan.choices.push_back(std::move(gen));
  plan.responder = [this, from = *from, to = *shared, ids = std::move(ids), params](openai::UsageCostHook) {
    return std::make_shared<PublishResponder>(cache_, from, to, ids, params, generation_.retry(),
                                              options_.block_tokens);
  };
  generation_.runAsAdmin(std::move(exchange), std::move(plan));
}

}  // namespace lg::proxy

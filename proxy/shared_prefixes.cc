#include "proxy/shared_prefixes.h"

#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "proxy/gateway.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai_error.h"
#include "proxy/proxy_log.h"

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

}  // namespace

SharedPrefixPublisher::SharedPrefixPublisher(SharedPrefixOptions options, serving::Scheduler& scheduler,
                                             cache::PrefixCache& cache, const openai::PromptEncoder& encoder,
                                             const billing::AdminKey& admin)
    : options_(std::move(options)), scheduler_(scheduler), cache_(cache), encoder_(encoder), admin_(admin) {}

void SharedPrefixPublisher::addRoutes(Router& router) {
  router.add("POST", "/admin/shared-prefixes",
             [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { publish(r, std::move(e)); });
}

void SharedPrefixPublisher::publish(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  if (!requireAdminKey(*exchange, admin_)) return;
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
  // The sink runs on the engine thread after the scheduler released the
  // sequence: its prompt's whole blocks are in the cache, under `from`.
  auto sink = [exchange, cache = &cache_, from = *from, to = *shared, ids, params, retry = options_.retry,
               block_tokens = options_.block_tokens](serving::StreamEvent&& e) {
    if (!e.final) return;
    if (auto error = openai::finalEventError(e, params, retry)) return respondWithApiError(*exchange, *error);
    Result<int32_t> published = cache->publishToNamespace(from, to, ids);
    if (!published.isOk()) {
      // Evicted between the prefill and now: the pool is under pressure.
      proxyLog()->warn("publishing a shared prefix into {}: {}", to.name(), published.status().toString());
      ApiError busy = openai::refusalError(serving::Refusal::kQueueTimeout, "", params, retry);
      busy.message = "The prefix was evicted before it could be published (the cache is full); retry later.";
      return respondWithApiError(*exchange, busy);
    }
    proxyLog()->info("admin published a shared prefix into {}: {} tokens, {} blocks", to.name(), ids.size(),
                     *published);
    exchange->respond(200, {{"content-type", "application/json"}},
                      json{{"object", "shared_prefix"},
                           {"namespace", std::string(to.name())},
                           {"prompt_tokens", ids.size()},
                           {"cached_tokens", int64_t{*published} * block_tokens}}
                          .dump());
  };
  serving::Submission sub = scheduler_.submit(std::move(gen), std::move(sink));
  if (!sub) {
    return respondWithApiError(*exchange,
                               openai::refusalError(sub.refused.reason, sub.refused.message, params, options_.retry));
  }
  exchange->onDisconnect([handle = sub.handle] { handle.cancel(); });
}

}  // namespace lg::proxy

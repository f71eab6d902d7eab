#include "proxy/gateway.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>

#include "proxy/openai/chat_request.h"
#include "proxy/openai/chat_response.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/completion_response.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai/responses_request.h"
#include "proxy/openai/responses_response.h"
#include "proxy/openai_error.h"
#include "proxy/proxy_log.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr std::string_view kSse = "text/event-stream";

HttpHeaders jsonHeaders() { return {{"content-type", "application/json"}}; }

HttpHeaders sseHeaders() {
  return {{"content-type", std::string(kSse)}, {"cache-control", "no-cache"}, {"x-accel-buffering", "no"}};
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The headers every generation response carries: what the request asked for
// that had no effect, and hosted tools left out of the prompt.
void addNotes(HttpHeaders& headers, const std::vector<std::string>& ignored, const std::vector<std::string>& hosted) {
  if (!ignored.empty()) headers.add("x-latentgate-ignored", joined(ignored));
  if (!hosted.empty()) headers.add("x-latentgate-hosted-tools-skipped", joined(hosted));
}

// Hands one responder output to the exchange: streaming, the SSE bytes (the
// last ones preceded by a server-timing comment) and the end of the stream;
// otherwise, once done, the error or the whole body with Server-Timing.
void deliver(Exchange& exchange, openai::ResponderOutput out, bool stream, const serving::Timing& timing,
             const HttpHeaders& headers) {
  if (stream) {
    if (out.done) exchange.send(": server-timing " + serverTiming(timing) + "\n\n");
    exchange.send(std::move(out.body));
    if (out.done) exchange.end();
    return;
  }
  if (!out.done) return;
  if (out.error) return respondWithApiError(exchange, *out.error);
  HttpHeaders h = headers;
  h.add("server-timing", serverTiming(timing));
  exchange.respond(200, std::move(h), std::move(out.body));
}

}  // namespace

std::string serverTiming(const serving::Timing& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "queue;dur=%.1f, cache;dur=%.1f, prefill;dur=%.1f, ttft;dur=%.1f, decode;dur=%.1f",
                t.queued * 1e3, t.cache_lookup * 1e3, t.prefill * 1e3, t.first_token * 1e3, t.decode * 1e3);
  return buf;
}

Gateway::Gateway(GatewayOptions options, serving::Scheduler& scheduler, const text::Tokenizer& tokenizer,
                 const openai::PromptEncoder& encoder, billing::KeyStore& keys, const billing::AdminKey& admin)
    : options_(std::move(options)),
      scheduler_(scheduler),
      tokenizer_(tokenizer),
      encoder_(encoder),
      keys_(keys),
      admin_(admin) {}

void Gateway::addRoutes(Router& router) {
  router.add("POST", "/v1/chat/completions", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { chatCompletions(r, e); });
  router.add("POST", "/v1/completions", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { completions(r, e); });
  router.add("POST", "/v1/responses", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { responses(r, e); });
  router.add("GET", "/v1/models", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { models(r, e); });
  router.add("GET", "/models", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { models(r, e); });
  router.add("POST", "/admin/keys", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { createKey(r, e); });
  router.add("GET", "/admin/keys", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { listKeys(r, e); });
  router.addPrefix("DELETE", "/admin/keys/", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { deleteKey(r, e); });
}

std::optional<billing::Principal> Gateway::authenticate(Exchange& exchange) const {
  const auto header = exchange.request().headers.get("authorization");
  if (header) {
    if (auto who = keys_.authenticate(billing::bearerToken(*header))) return who;
  }
  respondWithApiError(exchange, openai::invalidApiKey());
  return std::nullopt;
}

bool Gateway::authenticateAdmin(Exchange& exchange) const { return requireAdminKey(exchange, admin_); }

bool requireAdminKey(Exchange& exchange, const billing::AdminKey& admin) {
  const auto header = exchange.request().headers.get("authorization");
  if (header && admin.matches(billing::bearerToken(*header))) return true;
  openai::ApiError e = openai::invalidApiKey();
  e.message = "This endpoint needs the admin key as a Bearer token.";
  respondWithApiError(exchange, e);
  return false;
}

bool Gateway::knownModel(const std::string& model) const {
  if (model == options_.model_id) return true;
  for (const std::string& a : options_.aliases) {
    if (model == a) return true;
  }
  return false;
}

serving::GenerationRequest Gateway::newRequest(const billing::Principal& who) const {
  // Key teams were validated when the key was created.
  serving::GenerationRequest r(cache::TeamNamespace::ofTeam(who.team).value());
  if (auto it = options_.shared_namespaces.find(who.team); it != options_.shared_namespaces.end()) r.shared = it->second;
  return r;
}

// ----------------------------------------------------------- chat completions

void Gateway::chatCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto who = authenticate(*exchange);
  if (!who) return;
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseChatCompletionRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  auto encoded = encoder_.encodeChat(parsed->prompt, "messages");
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
  if (!sampling) return respondWithApiError(*exchange, sampling.error());

  openai::ChatResponderOptions ro;
  ro.meta.id = openai::newId("chatcmpl-");
  ro.meta.created = unixNow();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.include_usage = parsed->include_usage;
  ro.logprobs = sampling->logprobs;
  ro.tokenizer = &tokenizer_;
  ro.parser = encoder_.outputOptions(parsed->prompt, *encoded);
  ro.params = parsed->params;
  ro.retry = options_.retry;
  auto responder = std::make_shared<openai::ChatResponder>(std::move(ro));
  const bool stream = parsed->stream;
  serving::GenerationRequest gen = newRequest(*who);
  gen.prompt = std::move(encoded->ids);
  gen.sampling = std::move(*sampling);
  HttpHeaders headers = stream ? sseHeaders() : jsonHeaders();
  addNotes(headers, parsed->ignored, {});
  submitOne(exchange, std::move(gen), responder, stream, std::move(headers), parsed->params);
}

// ---------------------------------------------------------------- completions

void Gateway::completions(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto who = authenticate(*exchange);
  if (!who) return;
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseCompletionRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  const size_t n = parsed->prompts.size();
  std::vector<serving::GenerationRequest> requests;
  openai::CompletionResponderOptions ro;
  for (size_t i = 0; i < n; ++i) {
    auto encoded = encoder_.encodeCompletion(parsed->prompts[i], i, n);
    if (!encoded) return respondWithApiError(*exchange, encoded.error());
    auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
    if (!sampling) return respondWithApiError(*exchange, sampling.error());
    if (parsed->echo) ro.echo_texts.push_back(openai::completionEchoText(parsed->prompts[i], tokenizer_));
    serving::GenerationRequest gen = newRequest(*who);
    gen.prompt = std::move(encoded->ids);
    gen.sampling = std::move(*sampling);
    requests.push_back(std::move(gen));
  }
  ro.meta.id = openai::newId("cmpl-");
  ro.meta.created = unixNow();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.include_usage = parsed->include_usage;
  ro.logprobs = parsed->logprobs;
  ro.tokenizer = &tokenizer_;
  ro.choices = n;
  ro.params = parsed->params;
  ro.retry = options_.retry;
  auto responder = std::make_shared<openai::CompletionResponder>(std::move(ro));
  const bool stream = parsed->stream;
  HttpHeaders headers = stream ? sseHeaders() : jsonHeaders();
  addNotes(headers, parsed->ignored, {});
  // Holds what the prompts' sinks produce until every prompt is submitted:
  // a later prompt's refusal must be the whole response, and an earlier
  // prompt's events (its chunks, its cancellation) would otherwise reach the
  // exchange after that refusal (the engine thread's calls are posted behind
  // the handler's), which closes the connection as a misuse.
  struct Gate {
    std::mutex mu;
    bool open = false;     // every prompt was submitted: deliver
    bool refused = false;  // one was refused: drop everything
    std::vector<std::pair<openai::ResponderOutput, serving::Timing>> held;
  };
  auto gate = std::make_shared<Gate>();
  auto handles = std::make_shared<std::vector<serving::RequestHandle>>();
  for (size_t i = 0; i < n; ++i) {
    serving::Submission sub = scheduler_.submit(
        std::move(requests[i]), [exchange, responder, stream, headers, i, gate](serving::StreamEvent&& e) {
          openai::ResponderOutput out = responder->onEvent(i, e);
          std::lock_guard lock(gate->mu);
          if (gate->refused) return;
          if (gate->open) {
            deliver(*exchange, std::move(out), stream, e.timing, headers);
          } else {
            gate->held.emplace_back(std::move(out), e.timing);
          }
        });
    if (!sub) {
      {
        std::lock_guard lock(gate->mu);
        gate->refused = true;
        gate->held.clear();
      }
      for (const serving::RequestHandle& h : *handles) h.cancel();
      return respondWithApiError(*exchange, openai::refusalError(sub.refused.reason, sub.refused.message,
                                                                 parsed->params, options_.retry));
    }
    handles->push_back(sub.handle);
  }
  exchange->onDisconnect([handles] {
    for (const serving::RequestHandle& h : *handles) h.cancel();
  });
  if (stream) exchange->startStream(200, headers);
  std::lock_guard lock(gate->mu);
  gate->open = true;
  for (auto& [out, timing] : gate->held) deliver(*exchange, std::move(out), stream, timing, headers);
  gate->held.clear();
}

// ------------------------------------------------------------------ responses

void Gateway::responses(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto who = authenticate(*exchange);
  if (!who) return;
  auto body = openai::parseJsonBody(request.body, options_.limits);
  if (!body) return respondWithApiError(*exchange, body.error());
  auto parsed = openai::parseResponsesRequest(*body, options_.limits);
  if (!parsed) return respondWithApiError(*exchange, parsed.error());
  if (!knownModel(parsed->model)) return respondWithApiError(*exchange, openai::modelNotFound(parsed->model));
  if (parsed->previous_response_id) {
    // Stored responses are not kept yet: say so rather than answer without the context.
    return respondWithApiError(*exchange, openai::invalidRequest("previous_response_id", "previous_response_not_found",
                                                                 "Stored responses are not supported by this server; "
                                                                 "send the whole conversation in `input`."));
  }
  if (!parsed->hosted_tools.empty()) {
    proxyLog()->info("request {}: hosted tools left out of the prompt: {}", request.id, joined(parsed->hosted_tools));
  }
  auto encoded = encoder_.encodeChat(parsed->prompt, "input");
  if (!encoded) return respondWithApiError(*exchange, encoded.error());
  auto sampling = openai::resolveSampling(parsed->sampling, encoded->ids.size(), options_.max_context, parsed->params);
  if (!sampling) return respondWithApiError(*exchange, sampling.error());

  openai::ResponsesResponderOptions ro;
  ro.meta.id = openai::newId("resp_");
  ro.meta.created = unixNow();
  ro.meta.model = parsed->model;
  ro.stream = parsed->stream;
  ro.echo = parsed->echo;
  ro.parser = encoder_.outputOptions(parsed->prompt, *encoded);
  ro.params = parsed->params;
  ro.retry = options_.retry;
  auto responder = std::make_shared<openai::ResponsesResponder>(std::move(ro));
  const bool stream = parsed->stream;
  serving::GenerationRequest gen = newRequest(*who);
  gen.prompt = std::move(encoded->ids);
  gen.sampling = std::move(*sampling);
  HttpHeaders headers = stream ? sseHeaders() : jsonHeaders();
  addNotes(headers, parsed->ignored, parsed->hosted_tools);
  submitOne(exchange, std::move(gen), responder, stream, std::move(headers), parsed->params);
}

// One generation answered by a chat or Responses responder.
template <class Responder>
void Gateway::submitOne(std::shared_ptr<Exchange> exchange, serving::GenerationRequest request,
                        std::shared_ptr<Responder> responder, bool stream, HttpHeaders headers,
                        const openai::ParamNames& params) {
  // Taken before submit(), which orders it before the first event: only the
  // engine thread calls the sink afterwards, so the responder needs no lock.
  const std::string first = responder->start();
  serving::Submission sub = scheduler_.submit(std::move(request), [exchange, responder, stream, headers](serving::StreamEvent&& e) {
    deliver(*exchange, responder->onEvent(e), stream, e.timing, headers);
  });
  if (!sub) {
    return respondWithApiError(*exchange, openai::refusalError(sub.refused.reason, sub.refused.message, params,
                                                               options_.retry));
  }
  exchange->onDisconnect([handle = sub.handle] { handle.cancel(); });
  if (stream) {
    exchange->startStream(200, headers);
    exchange->send(first);
  }
}

// --------------------------------------------------------------------- models

void Gateway::models(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  if (!authenticate(*exchange)) return;
  json data = json::array();
  auto entry = [](const std::string& id) {
    return json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "latentgate"}};
  };
  data.push_back(entry(options_.model_id));
  for (const std::string& a : options_.aliases) data.push_back(entry(a));
  exchange->respond(200, jsonHeaders(), json{{"object", "list"}, {"data", data}}.dump());
}

// ---------------------------------------------------------------- admin: keys

void Gateway::createKey(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  if (!authenticateAdmin(*exchange)) return;
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return respondWithApiError(*exchange, openai::invalidJsonBody("expected a JSON object {\"team\", \"name\"}"));
  }
  for (const char* field : {"team", "name"}) {
    if (!body.contains(field) || !body[field].is_string()) {
      return respondWithApiError(*exchange, openai::invalidRequest(field, "invalid_type",
                                                                   std::string("`") + field + "` must be a string"));
    }
  }
  auto created = keys_.create(body["team"].get<std::string>(), body["name"].get<std::string>());
  if (!created.isOk()) {
    if (created.status().code() == StatusCode::kInvalidArgument) {
      const std::string param = created.status().message().rfind("name", 0) == 0 ? "name" : "team";
      return respondWithApiError(*exchange, openai::invalidRequest(param, "invalid_value", created.status().message()));
    }
    proxyLog()->error("creating an API key failed: {}", created.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  const auto& [info, key] = *created;
  proxyLog()->info("admin created API key {} for team {}", info.id, info.team);
  exchange->respond(200, jsonHeaders(),
                    json{{"id", info.id}, {"key", key}, {"team", info.team}, {"name", info.name}, {"created", info.created_unix}}
                        .dump(-1, ' ', false, json::error_handler_t::replace));
}

void Gateway::listKeys(const HttpRequest&, std::shared_ptr<Exchange> exchange) {
  if (!authenticateAdmin(*exchange)) return;
  json data = json::array();
  for (const billing::ApiKeyInfo& k : keys_.list()) {
    data.push_back({{"id", k.id}, {"team", k.team}, {"name", k.name}, {"created", k.created_unix}, {"hint", k.hint}});
  }
  exchange->respond(200, jsonHeaders(), json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void Gateway::deleteKey(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  if (!authenticateAdmin(*exchange)) return;
  const std::string id = request.path.substr(std::string_view("/admin/keys/").size());
  Status s = keys_.revoke(id);
  if (s.code() == StatusCode::kNotFound) {
    openai::ApiError e = openai::invalidRequest("id", "key_not_found", "No API key with this id.");
    e.http_status = 404;
    return respondWithApiError(*exchange, e);
  }
  if (!s.isOk()) {
    proxyLog()->error("revoking API key failed: {}", s.toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  proxyLog()->info("admin revoked API key {}", id);
  exchange->respond(200, jsonHeaders(), json{{"id", id}, {"object", "api_key"}, {"deleted", true}}.dump());
}

}  // namespace lg::proxy

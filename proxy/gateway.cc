#include "proxy/gateway.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/unix_time.h"
#include "proxy/openai/chat_request.h"
#include "proxy/openai/chat_response.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/completion_response.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai/responses_request.h"
#include "proxy/openai/responses_response.h"
#include "proxy/openai/sse.h"
#include "proxy/openai_error.h"
#include "proxy/proxy_log.h"
#include "proxy/response_store.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr std::string_view kSse = "text/event-stream";

HttpHeaders sseHeaders() {
  return {{"content-type", std::string(kSse)}, {"cache-control", "no-cache"}, {"x-accel-buffering", "no"}};
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
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
             const HttpHeaders& headers, double ledger_s = -1) {
  if (stream) {
    if (out.done) exchange.send(": server-timing " + serverTiming(timing, ledger_s) + "\n\n");
    exchange.send(std::move(out.body));
    if (out.done) exchange.end();
    return;
  }
  if (!out.done) return;
  if (out.error) return respondWithApiError(exchange, *out.error);
  HttpHeaders h = headers;
  h.add("server-timing", serverTiming(timing, ledger_s));
  exchange.respond(200, std::move(h), std::move(out.body));
}

// The tokens-per-minute limits charge a request its prompt and output cap at
// admission and settle on what its final event says it used.
int64_t reservedTokens(const serving::GenerationRequest& r) {
  return static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
}
int64_t usedTokens(const serving::Usage& u) { return int64_t{u.prompt_tokens} + u.completion_tokens; }

// What a budget holds for a request while it runs (billing/budgets.h).
int64_t maxCost(const RequestBilling* billed, const serving::GenerationRequest& r) {
  return billed ? billed->maxCost(static_cast<int64_t>(r.prompt.size()), r.sampling.max_tokens) : 0;
}

RequestBilling::Info billingInfo(std::string response_id, std::string requested_model, std::string system_prompt,
                                bool stream) {
  RequestBilling::Info info;
  info.response_id = std::move(response_id);
  info.requested_model = std::move(requested_model);
  info.system_prompt = std::move(system_prompt);
  info.stream = stream;
  return info;
}

// The last final event of a billed request: commits its entry, and hands the
// client the end of the response (its usage and usage.cost) from the commit's
// callback, on the ledger's committer thread. An error carries no usage: it
// is sent at once, and its entry (not billed, or billed for what a client
// that went away left computed) follows.
void commitAndDeliver(const std::shared_ptr<Exchange>& exchange, RequestBilling& billing, openai::ResponderOutput out,
                      bool stream, const serving::Timing& timing, const HttpHeaders& headers) {
  if (out.error) {
    deliver(*exchange, std::move(out), stream, timing, headers);
    billing.commit("", "", {});
    return;
  }
  auto held = std::make_shared<openai::ResponderOutput>(std::move(out));
  const auto queued = std::chrono::steady_clock::now();
  billing.commit(held->body, stream ? std::string(kSse) : "application/json",
                 [exchange, held, stream, timing, headers, queued](Status s) {
    if (!s.isOk()) {
      // No entry, so no usage: the client gets an error instead.
      proxyLog()->error("request {}: committing its ledger entry failed: {}", exchange->request().id, s.toString());
      if (!stream) return respondWithApiError(*exchange, openai::internalError());
      exchange->send(openai::sseErrorData(openai::internalError()));
      exchange->end();
      return;
    }
    const double ledger_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count();
    deliver(*exchange, std::move(*held), stream, timing, headers, ledger_s);
  });
}

}  // namespace

std::string serverTiming(const serving::Timing& t, double ledger_s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "queue;dur=%.3f, cache;dur=%.3f, prefill;dur=%.3f, ttft;dur=%.3f, decode;dur=%.3f, total;dur=%.3f",
                t.queued * 1e3, t.cache_lookup * 1e3, t.prefill * 1e3, t.first_token * 1e3, t.decode * 1e3,
                t.total * 1e3);
  std::string out = buf;
  if (ledger_s >= 0) {
    std::snprintf(buf, sizeof buf, ", ledger;dur=%.3f", ledger_s * 1e3);
    out += buf;
  }
  return out;
}

Gateway::Gateway(GatewayOptions options, serving::Scheduler& scheduler, const text::Tokenizer& tokenizer,
                 const openai::PromptEncoder& encoder, billing::KeyStore& keys, const billing::AdminKey& admin,
                 ResponseStore* responses, BillingServices billing)
    : options_(std::move(options)),
      scheduler_(scheduler),
      tokenizer_(tokenizer),
      encoder_(encoder),
      keys_(keys),
      admin_(admin),
      responses_(responses),
      rate_limiter_(options_.rate_limits),
      billing_(billing) {}

void Gateway::addRoutes(Router& router) {
  router.add("POST", "/v1/chat/completions", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { chatCompletions(r, e); });
  router.add("POST", "/v1/completions", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { completions(r, e); });
  router.add("POST", "/v1/responses", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { responses(r, e); });
  router.addPrefix("GET", "/v1/responses/", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { getResponse(r, e); });
  router.addPrefix("DELETE", "/v1/responses/", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { deleteResponse(r, e); },
                   Runs::kBlocking);  // a synced delete
  router.add("GET", "/v1/models", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { models(r, e); });
  router.add("GET", "/models", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { models(r, e); });
  router.add("POST", "/admin/keys", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { createKey(r, e); },
             Runs::kBlocking);  // a synced write
  router.add("GET", "/admin/keys", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { listKeys(r, e); });
  router.addPrefix("DELETE", "/admin/keys/", [this](const HttpRequest& r, std::shared_ptr<Exchange> e) { deleteKey(r, e); },
                   Runs::kBlocking);  // a synced write
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

HttpHeaders jsonHeaders() { return {{"content-type", "application/json"}}; }

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

bool Gateway::admitRate(Exchange& exchange, const billing::Principal& who, int64_t tokens, HttpHeaders& headers) {
  const billing::RateDecision d = rate_limiter_.admit(who.key_id, who.team, tokens);
  auto report = [&headers](const char* kind, const billing::RateLimitState& s) {
    if (s.limit == 0) return;
    headers.add(std::string("x-ratelimit-limit-") + kind, std::to_string(s.limit));
    headers.add(std::string("x-ratelimit-remaining-") + kind, std::to_string(s.remaining));
    headers.add(std::string("x-ratelimit-reset-") + kind, billing::resetDuration(s.reset_s));
  };
  report("requests", d.requests);
  report("tokens", d.tokens);
  if (d.allowed) return true;
  openai::ApiError e;
  e.http_status = 429;
  e.type = d.exhausted;  // "requests" or "tokens", as OpenAI's rate-limit errors say
  e.code = "rate_limit_exceeded";
  e.message = billing::RateLimiter::describe(d, rate_limiter_.options());
  // A request that can never fit gets no Retry-After: waiting would not help.
  if (d.retry_after_s >= 0) e.retry_after_s = std::max(1, static_cast<int>(std::ceil(d.retry_after_s)));
  proxyLog()->info("request {}: rate limited ({} per minute of the {})", exchange.request().id, d.exhausted, d.subject);
  respondWithApiError(exchange, e, headers);
  return false;
}

bool Gateway::admit(Exchange& exchange, const billing::Principal& who, int64_t tokens, RequestBilling* billed,
                    int64_t max_cost, HttpHeaders& headers) {
  if (billed != nullptr && !billed->reserveBudget(exchange, max_cost)) {
    billed->abandon();
    return false;
  }
  if (!admitRate(exchange, who, tokens, headers)) {
    if (billed != nullptr) billed->abandon();
    return false;
  }
  return true;
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
  bool answered = false;
  auto billed = RequestBilling::start(billing_, *exchange, *who, options_.model_id,
                                      billingInfo(ro.meta.id, parsed->model, systemPromptOf(billing_, parsed->prompt), parsed->stream),
                                      1, &answered);
  if (answered) return;
  if (billed) ro.cost = billed->costHook();
  ro.meta.created = unixSeconds();
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
  const int64_t reserved = reservedTokens(gen);
  if (!admit(*exchange, *who, reserved, billed.get(), maxCost(billed.get(), gen), headers)) return;
  submitOne(exchange, std::move(gen), responder, stream, std::move(headers), parsed->params, *who, reserved,
            std::move(billed));
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
  bool answered = false;
  auto billed = RequestBilling::start(billing_, *exchange, *who, options_.model_id,
                                      billingInfo(ro.meta.id, parsed->model, "", parsed->stream), n, &answered);
  if (answered) return;
  if (billed) ro.cost = billed->costHook();
  ro.meta.created = unixSeconds();
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
  // One request against the rate limits, with every prompt's tokens and output cap.
  std::vector<int64_t> reserved(n);
  for (size_t i = 0; i < n; ++i) reserved[i] = reservedTokens(requests[i]);
  int64_t unsubmitted = 0;
  int64_t max_cost = 0;
  for (size_t i = 0; i < n; ++i) {
    unsubmitted += reserved[i];
    max_cost += maxCost(billed.get(), requests[i]);
  }
  if (!admit(*exchange, *who, unsubmitted, billed.get(), max_cost, headers)) return;
  // Holds what the prompts' sinks produce until every prompt is submitted:
  // a later prompt's refusal must be the whole response, and an earlier
  // prompt's events (its chunks, its cancellation) would otherwise reach the
  // exchange after that refusal (the engine thread's calls are posted behind
  // the handler's), which closes the connection as a misuse.
  struct Gate {
    std::mutex mu;
    bool open = false;     // every prompt was submitted: deliver
    bool refused = false;  // one was refused: drop everything
    struct Held {
      openai::ResponderOutput out;
      serving::Timing timing;
      bool last = false;  // the response's last final event: its entry is committed before it is sent
    };
    std::vector<Held> held;
  };
  auto gate = std::make_shared<Gate>();
  auto handles = std::make_shared<std::vector<serving::RequestHandle>>();
  // Set once the responder finished (engine thread only): a choice that
  // failed ends the response while the others may still be running, and
  // their later events have nothing more to send.
  auto ended = std::make_shared<bool>(false);
  for (size_t i = 0; i < n; ++i) {
    serving::Submission sub = scheduler_.submit(
        std::move(requests[i]), [this, exchange, responder, stream, headers, i, gate, billed, ended, key = who->key_id,
                                 team = who->team, reserved = reserved[i]](serving::StreamEvent&& e) {
          // Outside the gate: refused and cancelled prompts give back their share too.
          if (e.final) {
            rate_limiter_.settle(key, team, reserved, usedTokens(e.usage));
            if (options_.metrics) options_.metrics->generationEnded(exchange->request().received, e);
          }
          openai::ResponderOutput out = responder->onEvent(i, e);
          if (out.done && *ended) out = {};
          if (out.done) *ended = true;
          const bool last = billed && e.final && billed->addFinal(e);
          std::lock_guard lock(gate->mu);
          if (gate->refused) {
            // The refusal was the response; the entry (refused) follows the last prompt.
            if (last) billed->commit("", "", {});
            return;
          }
          if (!gate->open) {
            gate->held.push_back({std::move(out), e.timing, last});
          } else if (last) {
            commitAndDeliver(exchange, *billed, std::move(out), stream, e.timing, headers);
          } else {
            if (billed && stream) billed->keep(out.body);
            deliver(*exchange, std::move(out), stream, e.timing, headers);
          }
        });
    if (!sub) {
      // Those already submitted give back their share when their cancellation ends them.
      rate_limiter_.settle(who->key_id, who->team, unsubmitted, 0);
      {
        std::lock_guard lock(gate->mu);
        gate->refused = true;
        gate->held.clear();
      }
      for (const serving::RequestHandle& h : *handles) h.cancel();
      // The cancelled choices still end with final events; the entry
      // (refused) is committed after the last of them.
      if (billed && billed->submitted(i, sub.refused.reason)) billed->commit("", "", {});
      return respondWithApiError(*exchange, openai::refusalError(sub.refused.reason, sub.refused.message,
                                                                 parsed->params, options_.retry));
    }
    unsubmitted -= reserved[i];
    handles->push_back(sub.handle);
  }
  exchange->onDisconnect([handles, billed] {
    if (billed) billed->clientGone();
    for (const serving::RequestHandle& h : *handles) h.cancel();
  });
  if (stream) exchange->startStream(200, headers);
  std::lock_guard lock(gate->mu);
  gate->open = true;
  for (auto& h : gate->held) {
    if (h.last) {
      commitAndDeliver(exchange, *billed, std::move(h.out), stream, h.timing, headers);
      continue;
    }
    if (billed && stream) billed->keep(h.out.body);
    deliver(*exchange, std::move(h.out), stream, h.timing, headers);
  }
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
  json input;  // the effective input items, kept with the response when it is stored
  if (parsed->previous_response_id) {
    if (responses_ == nullptr) {
      // No store: say so rather than answer without the context.
      return respondWithApiError(*exchange, openai::invalidRequest("previous_response_id", "previous_response_not_found",
                                                                   "Stored responses are not kept by this server; "
                                                                   "send the whole conversation in `input`."));
    }
    auto previous = responses_->get(who->key_id, *parsed->previous_response_id);
    if (!previous.isOk()) {
      proxyLog()->error("request {}: reading a stored response failed: {}", request.id, previous.status().toString());
      return respondWithApiError(*exchange, openai::internalError());
    }
    if (!*previous) {
      // As OpenAI answers (400); another key's response is answered the same way.
      return respondWithApiError(*exchange, openai::invalidRequest("previous_response_id", "previous_response_not_found",
                                                                   "Previous response with id '" +
                                                                       *parsed->previous_response_id + "' not found."));
    }
    // The conversation so far and the new items, parsed as if the client had
    // sent them all: the prompt is the same tokens as a resent conversation,
    // so the prefix cache finds the earlier turns. (The request was parsed
    // once before so that its errors name the client's own items.)
    input = continuedInput(**previous, (*body)["input"]);
    (*body)["input"] = input;
    parsed = openai::parseResponsesRequest(*body, options_.limits);
    if (!parsed) return respondWithApiError(*exchange, parsed.error());
  } else if (parsed->store && responses_ != nullptr) {
    input = inputItems((*body)["input"]);
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
  bool answered = false;
  auto billed = RequestBilling::start(billing_, *exchange, *who, options_.model_id,
                                      billingInfo(ro.meta.id, parsed->model, systemPromptOf(billing_, parsed->prompt), parsed->stream),
                                      1, &answered);
  if (answered) return;
  if (billed) ro.cost = billed->costHook();
  ro.meta.created = unixSeconds();
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
  const int64_t reserved = reservedTokens(gen);
  if (!admit(*exchange, *who, reserved, billed.get(), maxCost(billed.get(), gen), headers)) return;
  std::function<void(const openai::ResponsesResponder&)> on_done;
  if (responses_ != nullptr) {
    // On the engine thread, before the client sees the end of the response,
    // so that a continuation sent at once finds it. record() writes without
    // an fsync (response_store.h), and nothing at all for store: false or a
    // response that failed.
    on_done = [store = responses_, owner = who->key_id, keep = parsed->store, input = std::move(input),
               request_id = request.id](const openai::ResponsesResponder& r) {
      if (Status s = store->record(owner, keep, input, r.finalResponse()); !s.isOk()) {
        proxyLog()->error("request {}: storing response {} failed: {}", request_id, r.id(), s.toString());
      }
    };
  }
  submitOne(exchange, std::move(gen), responder, stream, std::move(headers), parsed->params, *who, reserved,
            std::move(billed),
            std::move(on_done));
}

// ----------------------------------------------------- stored responses by id

namespace {

openai::ApiError responseNotFound(std::string_view id) {
  openai::ApiError e = openai::invalidRequest("", "", "Response with id '" + std::string(id) + "' not found.");
  e.http_status = 404;
  return e;
}

}  // namespace

void Gateway::getResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto who = authenticate(*exchange);
  if (!who) return;
  const std::string id = request.path.substr(std::string_view("/v1/responses/").size());
  if (responses_ == nullptr) return respondWithApiError(*exchange, responseNotFound(id));
  auto found = responses_->get(who->key_id, id);
  if (!found.isOk()) {
    proxyLog()->error("request {}: reading a stored response failed: {}", request.id, found.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  if (!*found) return respondWithApiError(*exchange, responseNotFound(id));
  exchange->respond(200, jsonHeaders(), (*found)->response.dump(-1, ' ', false, json::error_handler_t::replace));
}

void Gateway::deleteResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange) {
  auto who = authenticate(*exchange);
  if (!who) return;
  const std::string id = request.path.substr(std::string_view("/v1/responses/").size());
  if (responses_ == nullptr) return respondWithApiError(*exchange, responseNotFound(id));
  // A synced write on the I/O thread, as the admin API's: deletions are rare
  // and a deleted response must stay deleted after a crash.
  auto removed = responses_->remove(who->key_id, id);
  if (!removed.isOk()) {
    proxyLog()->error("request {}: deleting a stored response failed: {}", request.id, removed.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  if (!*removed) return respondWithApiError(*exchange, responseNotFound(id));
  exchange->respond(200, jsonHeaders(), json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
}

// One generation answered by a chat or Responses responder.
template <class Responder>
void Gateway::submitOne(std::shared_ptr<Exchange> exchange, serving::GenerationRequest request,
                        std::shared_ptr<Responder> responder, bool stream, HttpHeaders headers,
                        const openai::ParamNames& params, const billing::Principal& who, int64_t reserved,
                        std::shared_ptr<RequestBilling> billed,
                        std::function<void(const Responder&)> on_done) {
  // Taken before submit(), which orders it before the first event: only the
  // engine thread calls the sink afterwards, so the responder needs no lock.
  const std::string first = responder->start();
  if (billed && stream) billed->keep(first);
  serving::Submission sub = scheduler_.submit(
      std::move(request), [this, exchange, responder, stream, headers, billed, on_done = std::move(on_done),
                           key = who.key_id, team = who.team, reserved](serving::StreamEvent&& e) {
        if (e.final) {
          rate_limiter_.settle(key, team, reserved, usedTokens(e.usage));
          if (options_.metrics) options_.metrics->generationEnded(exchange->request().received, e);
        }
        openai::ResponderOutput out = responder->onEvent(e);
        if (out.done && on_done) on_done(*responder);
        if (billed && e.final && billed->addFinal(e)) {
          return commitAndDeliver(exchange, *billed, std::move(out), stream, e.timing, headers);
        }
        if (billed && stream) billed->keep(out.body);
        deliver(*exchange, std::move(out), stream, e.timing, headers);
      });
  if (!sub) {
    rate_limiter_.settle(who.key_id, who.team, reserved, 0);
    if (billed && billed->submitted(0, sub.refused.reason)) billed->commit("", "", {});
    return respondWithApiError(*exchange, openai::refusalError(sub.refused.reason, sub.refused.message, params,
                                                               options_.retry));
  }
  exchange->onDisconnect([handle = sub.handle, billed] {
    if (billed) billed->clientGone();
    handle.cancel();
  });
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

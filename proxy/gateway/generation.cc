#include "proxy/gateway/generation.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/sse.h"

namespace lg::proxy {
namespace {

constexpr std::string_view kSse = "text/event-stream";

// usage.cost: {"currency": "USD", "input_cache_hit", "input_cache_miss",
// "output", "total"}, exact decimal strings in dollars.
nlohmann::json costJson(const billing::Cost& c) {
  return nlohmann::json{{"currency", "USD"},
                        {"input_cache_hit", billing::usd(c.input_cache_hit)},
                        {"input_cache_miss", billing::usd(c.input_cache_miss)},
                        {"output", billing::usd(c.output)},
                        {"total", billing::usd(c.total())}};
}

billing::MissCause missCause(cache::BlockMiss cause) {
  switch (cause) {
    case cache::BlockMiss::kNew: return billing::MissCause::kNew;
    case cache::BlockMiss::kEvicted: return billing::MissCause::kEvicted;
    case cache::BlockMiss::kModelChanged: return billing::MissCause::kModelChanged;
    case cache::BlockMiss::kInFlight: return billing::MissCause::kInFlight;
    case cache::BlockMiss::kRecomputed: return billing::MissCause::kRecomputed;
    case cache::BlockMiss::kCount: break;
  }
  return billing::MissCause::kNew;
}

billing::PromptRegion promptRegion(openai::PromptPart part) {
  switch (part) {
    case openai::PromptPart::kSystem: return billing::PromptRegion::kSystem;
    case openai::PromptPart::kTools: return billing::PromptRegion::kTools;
    case openai::PromptPart::kHistory: return billing::PromptRegion::kHistory;
    case openai::PromptPart::kInput: return billing::PromptRegion::kInput;
    case openai::PromptPart::kNone: break;
  }
  return billing::PromptRegion::kNone;
}

// Why a choice's miss tokens missed (docs/cache.md, "Why requests miss"):
// the cache's classification of the blocks after the hit, the prompt's last
// block, and where the first missed block lies in the chat prompt's layout
// (in tokens): the message and part of its last token. What made a block
// miss lies somewhere in it, and everything before its first token was
// reused; a block that straddles a boundary typically misses for what
// follows the boundary (a new turn shares the history up to its new input).
// No prompt text.
billing::MissAnatomy missAnatomy(const serving::Usage& u, const openai::PromptLayout& layout) {
  billing::MissAnatomy m;
  if (u.miss_tokens <= 0) return m;
  int64_t classified = 0;
  if (u.looked_up) {
    const cache::LookupMisses& misses = u.misses;
    for (size_t i = 0; i < cache::kBlockMisses; ++i) {
      const int64_t tokens = int64_t{misses.blocks[i]} * misses.block_tokens;
      m.tokens_by_cause[static_cast<size_t>(missCause(static_cast<cache::BlockMiss>(i)))] += tokens;
      classified += tokens;
    }
    // The rest is the prompt's last block, which a lookup never hits.
    m.tokens_by_cause[static_cast<size_t>(billing::MissCause::kPartialBlock)] = u.miss_tokens - classified;
    m.first_miss_cause = misses.first_block >= 0 ? missCause(misses.first_cause) : billing::MissCause::kPartialBlock;
    if (m.first_miss_cause == billing::MissCause::kEvicted) {
      m.evicted_tier = std::string(cache::blockTierName(misses.evicted_tier));
      m.evicted_ago_ms = misses.evicted_ago_ms;
    }
  } else {
    m.tokens_by_cause[static_cast<size_t>(billing::MissCause::kUncached)] = u.miss_tokens;
    m.first_miss_cause = billing::MissCause::kUncached;
  }
  m.first_miss_token = u.hitTokens();
  const int32_t block_tokens = u.looked_up ? std::max(1, u.misses.block_tokens) : 1;
  const int64_t last = std::min<int64_t>(m.first_miss_token + block_tokens, u.prompt_tokens) - 1;
  const openai::PromptPlace place = openai::placeOf(layout, static_cast<size_t>(std::max<int64_t>(0, last)));
  m.first_miss_message = place.message;
  m.first_miss_region = promptRegion(place.part);
  return m;
}

// How a choice ended, for the ledger.
billing::ChoiceResult choiceResult(const serving::StreamEvent& e, billing::MissAnatomy miss) {
  billing::ChoiceResult r;
  r.usage = {e.usage.prompt_tokens, e.usage.hit_tokens_tier0, e.usage.hit_tokens_disk, e.usage.miss_tokens,
             e.usage.completion_tokens};
  r.ttft_s = e.usage.completion_tokens > 0 ? e.timing.first_token : -1;
  r.miss = std::move(miss);
  switch (e.finish_reason) {
    case serving::FinishReason::kError:
      r.end = billing::ChoiceEnd::kFailed;
      r.finish_reason = "error";
      break;
    case serving::FinishReason::kRefused:
      r.end = billing::ChoiceEnd::kRefused;
      r.finish_reason = "refused:" + std::string(serving::refusalName(e.refusal));
      break;
    case serving::FinishReason::kCancelled:
      r.end = billing::ChoiceEnd::kCancelled;
      r.finish_reason = "cancelled";
      break;
    default:
      r.end = billing::ChoiceEnd::kCompleted;
      r.finish_reason = std::string(serving::finishReasonName(e.finish_reason));
  }
  return r;
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

int64_t usedTokens(const serving::Usage& u) { return int64_t{u.prompt_tokens} + u.completion_tokens; }

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

// One generation call's shared state: made on the I/O thread, then fed by
// the choices' sinks on the engine thread.
struct Generation::Call {
  std::shared_ptr<Exchange> exchange;
  std::shared_ptr<openai::Responder> responder;  // the engine thread's once submitted
  std::optional<Ticket> ticket;                  // null: the admin's unmetered work
  std::shared_ptr<billing::MeteredRequest> metered;
  bool stream = false;
  HttpHeaders headers;
  std::function<void(const openai::Responder&)> on_done;
  std::function<void(size_t, const serving::StreamEvent&)> observe;
  openai::PromptLayout layout;  // the plan's, in tokens (for the miss anatomy)
  std::string key_id;  // whose (a revocation cancels it); empty: the admin's own work
  bool ended = false;  // the responder finished (engine thread only)

  std::mutex mu;
  bool open = false;  // the response started: deliver
  struct Held {
    openai::ResponderOutput out;
    serving::Timing timing;
    bool last = false;  // the response's last final event: its entry is committed before it is sent
  };
  std::vector<Held> held;                       // guarded by mu
  std::vector<serving::RequestHandle> handles;  // guarded by mu
  size_t awaited = 0;                           // guarded by mu: the choices' final events
  size_t finals = 0;                            // guarded by mu
  int64_t used_tokens = 0;                      // guarded by mu

  void cancelAll() {
    std::vector<serving::RequestHandle> all;
    {
      std::lock_guard lock(mu);
      all = handles;
    }
    for (const serving::RequestHandle& h : all) h.cancel();
  }

  // Under mu. The end of the response commits its entry first (its usage
  // reaches the client from the commit's callback); anything else goes out
  // at once. An error carries no usage: it is sent at once, and its entry
  // follows.
  void deliverLocked(openai::ResponderOutput out, const serving::Timing& timing, bool last) {
    if (!last || !metered) {
      if (metered && stream) metered->keep(out.body);
      return deliver(*exchange, std::move(out), stream, timing, headers);
    }
    if (out.error) {
      deliver(*exchange, std::move(out), stream, timing, headers);
      return metered->commit("", "", {});
    }
    auto kept = std::make_shared<openai::ResponderOutput>(std::move(out));
    const auto queued = std::chrono::steady_clock::now();
    metered->commit(kept->body, stream ? std::string(kSse) : "application/json",
                    [exchange = exchange, kept, stream = stream, timing, headers = headers, queued](Status s) {
                      if (!s.isOk()) {
                        // No entry, so no usage: the client gets an error instead.
                        proxyLog()->error("request {}: committing its ledger entry failed: {}",
                                          exchange->request().id, s.toString());
                        if (!stream) return respondWithApiError(*exchange, openai::internalError());
                        exchange->send(openai::sseErrorData(openai::internalError()));
                        exchange->end();
                        return;
                      }
                      const double ledger_s =
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count();
                      deliver(*exchange, std::move(*kept), stream, timing, headers, ledger_s);
                    });
  }
};

Generation::Generation(serving::Scheduler& scheduler, const Admission& admission, GenerationMetrics* metrics,
                       openai::RetryAfter retry)
    : scheduler_(scheduler), admission_(admission), metrics_(metrics), retry_(retry) {}

void Generation::run(std::shared_ptr<Exchange> exchange, const billing::Principal& who, GenerationPlan plan) const {
  AdmissionAsk ask;
  ask.served_model = plan.served_model;
  ask.requested_model = plan.requested_model;
  ask.response_id = plan.response_id;
  ask.system_prompt = plan.system_prompt;
  ask.stream = plan.stream;
  for (const serving::GenerationRequest& r : plan.choices) {
    ask.choices.push_back({static_cast<int64_t>(r.prompt.size()), r.sampling.max_tokens});
  }
  // The outcome comes inline from this replica's limits, or from the shared
  // store's thread (limits.redis_url): the plan waits in a shared holder.
  auto held = std::make_shared<GenerationPlan>(std::move(plan));
  const HttpRequest& request = exchange->request();
  admission_.admit(request, who, ask, [this, exchange = std::move(exchange), held](Admitted admitted) {
    if (auto* refused = std::get_if<Refused>(&admitted)) {
      return respondWithApiError(*exchange, refused->error, std::move(refused->headers));
    }
    if (auto* replayed = std::get_if<Replayed>(&admitted)) {
      return exchange->respond(200, std::move(replayed->headers), std::move(replayed->body));
    }
    start(exchange, std::get<Ticket>(std::move(admitted)), std::move(*held));
  });
}

void Generation::runAsAdmin(std::shared_ptr<Exchange> exchange, GenerationPlan plan) const {
  start(std::move(exchange), std::nullopt, std::move(plan));
}

void Generation::start(std::shared_ptr<Exchange> exchange, std::optional<Ticket> ticket, GenerationPlan plan) const {
  auto call = std::make_shared<Call>();
  call->exchange = exchange;
  call->stream = plan.stream;
  call->headers = std::move(plan.headers);
  call->on_done = std::move(plan.on_done);
  call->observe = std::move(plan.observe);
  if (ticket) {
    call->metered = ticket->metered;
    call->key_id = ticket->who.key_id;
    for (const auto& [name, value] : ticket->headers.fields()) call->headers.add(name, value);
  }
  // An admitted request of a key, with a chat prompt's layout: compared with
  // the key's previous one (what the admin publishes is not an agent's).
  if (ticket && breakers_ != nullptr && breakers_->enabled() && !plan.layout.empty()) {
    PrefixBreakers::Request seen;
    seen.key_id = ticket->who.key_id;
    seen.team = ticket->who.team;
    seen.team_generation = ticket->who.team_generation;
    seen.system_prompt = plan.system_prompt;
    seen.ids = plan.choices.front().prompt;
    seen.layout = &plan.layout;
    seen.rates = call->metered ? call->metered->rates().rates : billing::kDeepSeekRates;
    breakers_->observe(seen);
  }
  call->layout = std::move(plan.layout);
  call->ticket = std::move(ticket);
  openai::UsageCostHook cost;
  if (call->metered) {
    cost = [metered = call->metered](const openai::UsageCounts& u) -> std::optional<nlohmann::json> {
      return costJson(metered->costOf(u.hit_tokens, u.miss_tokens, u.completion_tokens));
    };
  }
  call->responder = plan.responder(std::move(cost));
  // Taken before the submit, which orders it before the first event: only
  // the engine thread calls the responder afterwards.
  const std::string first = call->responder->start();
  const size_t n = plan.choices.size();
  call->awaited = n;

  std::vector<serving::EventSink> sinks;
  for (size_t i = 0; i < n; ++i) {
    sinks.push_back([this, call, i](serving::StreamEvent&& e) {
      // Why its prompt tokens missed: for the metrics and the ledger entry.
      const billing::MissAnatomy miss = e.final ? missAnatomy(e.usage, call->layout) : billing::MissAnatomy{};
      if (e.final && metrics_ != nullptr) metrics_->generationEnded(call->exchange->request().received, e, miss);
      if (call->observe) call->observe(i, e);
      openai::ResponderOutput out = call->responder->onEvent(i, e);
      // A response ends once: later events (of choices still running when
      // it ended) have nothing more to send.
      const bool ended_now = out.done && !call->ended;
      if (out.done && call->ended) out = {};
      if (ended_now) {
        call->ended = true;
        if (call->on_done) call->on_done(*call->responder);
      }
      bool last = false;  // the last final event of the call
      int64_t used = 0;
      {
        std::lock_guard lock(call->mu);
        if (e.final) {
          used = call->used_tokens += usedTokens(e.usage);
          last = ++call->finals == call->awaited;
        }
      }
      if (e.final && call->metered) {
        const bool metered_last = call->metered->choiceEnded(i, choiceResult(e, miss));
        LG_CHECK(metered_last == last, "the metering and the call disagree on a request's last choice");
      }
      if (last) {
        if (call->ticket) admission_.settle(*call->ticket, used);
        untrack(call.get());
      }
      if (ended_now && !last) {
        // The response ended before its other choices: a refusal ends it
        // early (its siblings' work so far is billed), a failure fails it.
        if (call->metered && e.finish_reason == serving::FinishReason::kRefused) {
          call->metered->endedEarly(billing::EarlyEnd::kPartRefused);
        }
        call->cancelAll();
      }
      std::lock_guard lock(call->mu);
      if (!call->open) return call->held.push_back({std::move(out), e.timing, last});
      call->deliverLocked(std::move(out), e.timing, last);
    });
  }
  serving::GroupSubmission sub = scheduler_.submitGroup(std::move(plan.choices), std::move(sinks));
  if (!sub) {
    // Refused whole, before anything ran: the refusal is the response.
    if (call->ticket) admission_.settle(*call->ticket, 0);
    if (call->metered) {
      const std::string reason = "refused:" + std::string(serving::refusalName(sub.refused.reason));
      for (size_t i = 0; i < n; ++i) call->metered->choiceEnded(i, {billing::ChoiceEnd::kRefused, reason, {}, -1, {}});
      call->metered->commit("", "", {});
    }
    return respondWithApiError(*exchange,
                               openai::refusalError(sub.refused.reason, sub.refused.message, plan.params, retry_));
  }
  {
    std::lock_guard lock(call->mu);
    call->handles = std::move(sub.handles);
  }
  if (!call->key_id.empty()) track(call);
  exchange->onDisconnect([call](DisconnectCause cause) {
    if (call->metered) {
      call->metered->endedEarly(clientCaused(cause) ? billing::EarlyEnd::kClientLeft : billing::EarlyEnd::kServerStopped);
    }
    call->cancelAll();
  });
  if (call->stream) {
    exchange->startStream(200, call->headers);
    if (call->metered) call->metered->keep(first);
    exchange->send(first);
  }
  std::lock_guard lock(call->mu);
  call->open = true;
  for (Call::Held& h : call->held) call->deliverLocked(std::move(h.out), h.timing, h.last);
  call->held.clear();
}

void Generation::track(const std::shared_ptr<Call>& call) const {
  std::lock_guard lock(running_mu_);
  running_.emplace(call->key_id, call);
}

void Generation::untrack(const Call* call) const {
  if (call->key_id.empty()) return;
  std::lock_guard lock(running_mu_);
  auto [begin, end] = running_.equal_range(call->key_id);
  for (auto it = begin; it != end; ++it) {
    std::shared_ptr<Call> c = it->second.lock();
    if (c == nullptr || c.get() == call) {
      running_.erase(it);
      return;
    }
  }
}

size_t Generation::runningFor(const std::string& key_id) const {
  std::lock_guard lock(running_mu_);
  auto [begin, end] = running_.equal_range(key_id);
  size_t n = 0;
  for (auto it = begin; it != end; ++it) n += it->second.expired() ? 0 : 1;
  return n;
}

size_t Generation::cancelKey(const std::string& key_id) const {
  std::vector<std::shared_ptr<Call>> calls;
  {
    std::lock_guard lock(running_mu_);
    auto [begin, end] = running_.equal_range(key_id);
    for (auto it = begin; it != end; ++it) {
      if (std::shared_ptr<Call> c = it->second.lock()) calls.push_back(std::move(c));
    }
  }
  for (const std::shared_ptr<Call>& c : calls) {
    if (c->metered) c->metered->endedEarly(billing::EarlyEnd::kRevoked);
    c->cancelAll();
  }
  return calls.size();
}

}  // namespace lg::proxy

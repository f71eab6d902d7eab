// GET /metrics: the registry's families in the Prometheus text format
// (common/metrics.h), for the admin key or the metrics token
// (server.metrics_token). docs/metrics.md lists every family.
//
// What is collected where: each subsystem writes its own families.
//   - GenerationMetrics (here): per API generation, at its final event on the
//     engine thread (Gateway calls generationEnded()): time to first token,
//     time per output token and end-to-end latency histograms, tokens by
//     kind. Lock-free (atomics only).
//   - RequestMetrics (request_metrics.h): requests by endpoint and status.
//   - serving::addEngineCollectors (serving/serving_metrics.h): the
//     scheduler's families, the memory picture and the prefix cache's
//     (cache/cache_metrics.h), from stats snapshots at scrape time.
//   - the ledger (billing/ledger_metrics.h) and budgets (billing/budgets.h).
// Besides GenerationMetrics, this file says who may read /metrics and adds
// the route, which only scrapes the registry.
//
// Labels carry only bounded, non-secret values: route names, status codes,
// enum names, tier names, team ids (bounded). Never keys, prompts, paths or
// error messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "billing/key_store.h"
#include "common/metrics.h"
#include "common/status.h"
#include "proxy/router.h"
#include "serving/events.h"

namespace lg::proxy {

class GenerationMetrics {
 public:
  GenerationMetrics();
  GenerationMetrics(const GenerationMetrics&) = delete;
  GenerationMetrics& operator=(const GenerationMetrics&) = delete;

  // One generation of an API request ended: `final_event` is its final
  // event, `received` when its HTTP request was complete, `now` the time of
  // the final event. Any thread (the engine thread); lock-free.
  //   time to first token: received -> first token (the engine's
  //     submit -> first token plus what happened before submit: parsing,
  //     rendering, tokenizing); only when a token was generated.
  //   time per output token: first to last token / (tokens - 1); only with
  //     at least 2 tokens.
  //   end-to-end: received -> final event; not for requests refused in the
  //     queue (they were never served).
  //   tokens: the usage (hit tier 0, hit disk, miss, output), also of
  //     cancelled generations (what was computed).
  void generationEnded(serving::Clock::time_point received, const serving::StreamEvent& final_event,
                       serving::Clock::time_point now = serving::Clock::now());

  void collect(metrics::ExpositionWriter& w) const;

  enum TokenKind { kHitTier0, kHitDisk, kMiss, kOutput, kTokenKinds };
  uint64_t tokens(TokenKind kind) const { return tokens_[kind].load(std::memory_order_relaxed); }
  Histogram timeToFirstToken() const { return ttft_.snapshot(); }
  Histogram timePerOutputToken() const { return tpot_.snapshot(); }
  Histogram endToEnd() const { return e2e_.snapshot(); }

 private:
  metrics::AtomicHistogram ttft_;
  metrics::AtomicHistogram tpot_;
  metrics::AtomicHistogram e2e_;
  std::atomic<uint64_t> tokens_[kTokenKinds] = {};
};

// Who may read /metrics: the admin key, and the metrics token when one is
// configured (hashed like the admin key and compared in constant time).
struct MetricsAccess {
  const billing::AdminKey* admin = nullptr;
  std::optional<billing::AdminKey> token;  // server.metrics_token; nullopt: none
};
// The token as configured (empty: none); refuses one shorter than 16
// characters, as the admin key.
Result<MetricsAccess> metricsAccess(const billing::AdminKey& admin, std::string_view metrics_token);

// GET /metrics: the registry's text with Content-Type
// `text/plain; version=0.0.4; charset=utf-8`; anything but the admin key or
// the metrics token as a Bearer token is 401 invalid_api_key (an OpenAI
// error object). The registry and `access.admin` must outlive the router.
void addMetricsRoute(Router& router, const metrics::Registry& registry, MetricsAccess access);

}  // namespace lg::proxy

#include "proxy/metrics.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "proxy/openai/api_error.h"
#include "proxy/openai_error.h"

namespace lg::proxy {

namespace {

using metrics::Labels;
using metrics::MetricType;
using metrics::ExpositionWriter;

double seconds(serving::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Wide enough for a CPU engine on a big model (minutes) and fine enough for a
// GPU one (milliseconds).
std::vector<double> ttftBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120};
}
std::vector<double> tpotBuckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5};
}
std::vector<double> e2eBuckets() {
  return {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1200};
}

int64_t i64(uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)); }

void histogramFamily(ExpositionWriter& w, std::string_view name, std::string_view help, const Histogram& h) {
  if (w.family(name, help, MetricType::kHistogram)) w.histogram(h);
}

}  // namespace

// ------------------------------------------------------------ GenerationMetrics

GenerationMetrics::GenerationMetrics() : ttft_(ttftBuckets()), tpot_(tpotBuckets()), e2e_(e2eBuckets()) {}

void GenerationMetrics::generationEnded(serving::Clock::time_point received, const serving::StreamEvent& e,
                                        serving::Clock::time_point now) {
  const serving::Usage& u = e.usage;
  const serving::Timing& t = e.timing;
  const double since_received = std::max(0.0, seconds(now - received));
  if (u.completion_tokens > 0 && t.first_token > 0) {
    // What happened before submit (parsing, rendering, tokenizing, waiting
    // for the I/O thread) is the part of the wall time the engine did not see.
    const double before_submit = std::max(0.0, since_received - t.total);
    ttft_.observe(before_submit + t.first_token);
  }
  if (u.completion_tokens >= 2) tpot_.observe(t.decode / (u.completion_tokens - 1));
  if (e.finish_reason != serving::FinishReason::kRefused) e2e_.observe(since_received);
  auto add = [this](TokenKind k, int32_t n) {
    if (n > 0) tokens_[k].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  };
  add(kHitTier0, u.hit_tokens_tier0);
  add(kHitDisk, u.hit_tokens_disk);
  add(kMiss, u.miss_tokens);
  add(kOutput, u.completion_tokens);
}

void GenerationMetrics::collect(ExpositionWriter& w) const {
  histogramFamily(w, "latentgate_time_to_first_token_seconds",
                  "API generations: from the request received to the first generated token.", ttft_.snapshot());
  histogramFamily(w, "latentgate_time_per_output_token_seconds",
                  "API generations with 2 or more output tokens: first to last token over the tokens after the "
                  "first.",
                  tpot_.snapshot());
  histogramFamily(w, "latentgate_e2e_request_latency_seconds",
                  "API generations (not those refused in the queue): from the request received to its final event.",
                  e2e_.snapshot());
  if (w.family("latentgate_tokens_total",
               "Tokens of API generations by kind: prompt tokens served by the cache's tier 0 or disk tier, prompt "
               "tokens computed (cache misses), output tokens.",
               MetricType::kCounter)) {
    w.sample({{"kind", "prompt_hit_tier0"}}, tokens(kHitTier0));
    w.sample({{"kind", "prompt_hit_disk"}}, tokens(kHitDisk));
    w.sample({{"kind", "prompt_miss"}}, tokens(kMiss));
    w.sample({{"kind", "output"}}, tokens(kOutput));
  }
}

// ------------------------------------------------------------------- scheduler

void collectSchedulerStats(ExpositionWriter& w, const serving::SchedulerStats& s) {
  if (w.family("latentgate_scheduler_requests", "Requests in the scheduler now, by state.", MetricType::kGauge)) {
    w.sample({{"state", "queued"}}, s.queued);
    w.sample({{"state", "looking_up"}}, s.looking_up);
    w.sample({{"state", "prefilling"}}, s.prefilling);
    w.sample({{"state", "decoding"}}, s.decoding);
  }
  w.counter("latentgate_scheduler_submitted_total", "Requests submitted to the scheduler (refused ones too).",
            s.submitted);
  w.counter("latentgate_scheduler_admitted_total", "Admissions (a preempted request resumed is admitted again).",
            s.admitted);
  if (w.family("latentgate_scheduler_finished_total", "Requests that ended, by finish reason.", MetricType::kCounter)) {
    for (size_t i = 0; i < serving::kFinishReasonCount; ++i) {
      w.sample({{"reason", std::string(serving::finishReasonName(static_cast<serving::FinishReason>(i)))}},
               s.finished[i]);
    }
  }
  if (w.family("latentgate_scheduler_refusals_total",
               "Requests refused at submit or in the queue, by reason.", MetricType::kCounter)) {
    for (size_t i = 1; i < serving::kRefusalCount; ++i) {  // 0 is "none"
      w.sample({{"reason", std::string(serving::refusalName(static_cast<serving::Refusal>(i)))}}, s.refused[i]);
    }
  }
  w.counter("latentgate_scheduler_preemptions_total", "Running sequences preempted to free latent pool blocks.",
            s.preemptions);
  w.counter("latentgate_scheduler_steps_total", "Engine steps run.", s.steps);
  if (w.family("latentgate_scheduler_step_tokens_total", "Tokens run in engine steps: prompt (prefill, also resumed) "
               "and one-token decode.",
               MetricType::kCounter)) {
    w.sample({{"kind", "prefill"}}, s.prefill_tokens);
    w.sample({{"kind", "decode"}}, s.decode_tokens);
  }
  w.counter("latentgate_scheduler_generated_tokens_total", "Tokens generated (all requests, admin ones too).",
            s.generated_tokens);
  w.counter("latentgate_scheduler_prompt_tokens_total", "Prompt tokens of admitted requests.", s.prompt_tokens);
  w.counter("latentgate_scheduler_prompt_hit_tokens_total",
            "Prompt tokens served by the prefix cache (first admissions only).", s.hit_tokens);
  w.counter("latentgate_scheduler_engine_errors_total", "Engine steps that failed.", s.engine_errors);
  histogramFamily(w, "latentgate_scheduler_step_seconds", "Wall time of one engine step.", s.step_seconds);
  histogramFamily(w, "latentgate_scheduler_step_batch_tokens", "Tokens in one engine step.", s.step_batch_tokens);
  histogramFamily(w, "latentgate_scheduler_inter_token_seconds", "Gaps between a stream's consecutive tokens.",
                  s.inter_token_seconds);
  histogramFamily(w, "latentgate_scheduler_time_to_first_token_seconds",
                  "Submit to the first generated token, as the engine sees it (all requests).",
                  s.first_token_seconds);
  histogramFamily(w, "latentgate_scheduler_queue_wait_seconds", "Submit to admission (first admissions).",
                  s.queued_seconds);
}

// ----------------------------------------------------------------------- cache

void collectCacheStats(ExpositionWriter& w, const cache::CacheStats& s) {
  w.counter("latentgate_cache_lookups_total", "Completed prefix cache lookups.", s.lookups);
  w.counter("latentgate_cache_cancelled_lookups_total", "Lookups dropped while pending.", s.cancelled_lookups);
  w.counter("latentgate_cache_prompt_tokens_total", "Prompt tokens of completed lookups.", s.prompt_tokens);
  if (w.family("latentgate_cache_hit_tokens_total", "Prompt tokens served, by tier.", MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.hit_tokens);
    w.sample({{"tier", "disk"}}, s.disk.hit_tokens);
  }
  if (w.family("latentgate_cache_miss_tokens_total",
               "Prompt tokens not found, by tier (tier0: not in the latent pool; disk: not restored either, so "
               "computed).",
               MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.miss_tokens);
    w.sample({{"tier", "disk"}}, s.disk.miss_tokens);
  }
  if (w.family("latentgate_cache_blocks", "Blocks held, by tier.", MetricType::kGauge)) {
    w.sample({{"tier", "tier0"}}, s.tier0.blocks);
    w.sample({{"tier", "disk"}}, s.disk.blocks);
  }
  if (w.family("latentgate_cache_bytes", "Bytes of blocks held, by tier (disk: as stored).", MetricType::kGauge)) {
    w.sample({{"tier", "tier0"}}, s.tier0.bytes);
    w.sample({{"tier", "disk"}}, s.disk.bytes);
  }
  if (w.family("latentgate_cache_evicted_blocks_total",
               "Blocks evicted, by tier (tier0: byte budget or reclaimed for allocation; disk: cap or expiry).",
               MetricType::kCounter)) {
    w.sample({{"tier", "tier0"}}, s.tier0.evicted_blocks);
    w.sample({{"tier", "disk"}}, s.disk.evicted_blocks);
  }
  w.counter("latentgate_cache_reclaimed_blocks_total",
            "Tier-0 blocks evicted because an allocation found the latent pool full.", s.reclaimed_blocks);
  w.gauge("latentgate_cache_pinned_blocks", "Tier-0 blocks a request also holds now.", i64(s.tier0_pinned_blocks));
  w.gauge("latentgate_cache_tier0_budget_bytes", "Byte budget of tier 0 (0: bounded by the latent pool only).",
          i64(s.tier0_budget_bytes));
  w.gauge("latentgate_cache_in_flight_blocks", "Blocks claimed by a request that is computing them.",
          i64(s.in_flight_blocks));
  w.counter("latentgate_cache_in_flight_waits_total", "Lookups that waited for another request's blocks.",
            s.in_flight_waits);
  w.counter("latentgate_cache_in_flight_wait_timeouts_total", "In-flight waits that timed out.",
            s.in_flight_wait_timeouts);
  w.counter("latentgate_cache_published_blocks_total", "Blocks published into the cache.", s.published_blocks);
  w.counter("latentgate_cache_denied_shared_reads_total",
            "Shared namespaces a lookup named without its team being granted them.", s.denied_shared_reads);
  w.gauge("latentgate_cache_write_back_queue_blocks", "Blocks waiting in the write-back queue.",
          i64(s.write_back_queue_depth));
  if (w.family("latentgate_cache_write_back_blocks_total",
               "Write-back to the disk tier, by outcome (dropped: the queue was full).", MetricType::kCounter)) {
    w.sample({{"outcome", "queued"}}, s.write_back_queued_blocks);
    w.sample({{"outcome", "written"}}, s.write_back_written_blocks);
    w.sample({{"outcome", "dropped"}}, s.write_back_dropped_blocks);
    w.sample({{"outcome", "error"}}, s.write_back_errors);
  }
  w.counter("latentgate_cache_write_back_written_bytes_total", "Bytes written to the disk tier.",
            s.write_back_written_bytes);
  w.counter("latentgate_cache_write_through_blocks_total", "Blocks queued for writing because they were reused often.",
            s.write_through_blocks);
  w.counter("latentgate_cache_export_errors_total", "Blocks the latent pool failed to export for writing.",
            s.export_errors);
  w.counter("latentgate_cache_restored_blocks_total", "Blocks restored from the disk tier into the latent pool.",
            s.restored_blocks);
  w.counter("latentgate_cache_restore_bytes_total", "Stored bytes read by restores.", s.restore_bytes);
  if (w.family("latentgate_cache_restore_seconds_total", "Wall time of restores (read, verify, import).",
               MetricType::kCounter)) {
    w.sample(s.restore_seconds);
  }
  w.counter("latentgate_cache_disk_read_errors_total", "Disk tier reads that reported corruption or an I/O error.",
            s.disk_read_errors);
  if (w.family("latentgate_cache_rejected_blocks_total", "Stored blocks rejected (never served), by reason.",
               MetricType::kCounter)) {
    for (size_t i = 0; i < cache::kRejectReasonCount; ++i) {
      w.sample({{"reason", std::string(cache::rejectReasonName(static_cast<cache::RejectReason>(i)))}},
               s.rejected_blocks[i]);
    }
  }
  if (w.family("latentgate_cache_disk_state", "The disk tier's state: 1 for the current one.", MetricType::kGauge)) {
    for (cache::DiskState st : {cache::DiskState::kNone, cache::DiskState::kOk, cache::DiskState::kUnwritable,
                                cache::DiskState::kDegraded}) {
      w.sample({{"state", std::string(cache::diskStateName(st))}}, int64_t{s.disk_state == st ? 1 : 0});
    }
  }
  w.gauge("latentgate_cache_disk_occupied_bytes",
          "What the disk tier's store occupies on disk (files, garbage, WAL, set-aside stores).",
          i64(s.disk_occupied_bytes));
  w.counter("latentgate_cache_disk_write_failures_total", "Disk tier writes that failed, and background errors.",
            s.disk_write_failures);
  w.counter("latentgate_cache_disk_refused_writes_total", "Writes refused while the disk tier was unwritable.",
            s.disk_refused_writes);
  w.counter("latentgate_cache_disk_unwritable_episodes_total", "Times writing to the disk tier stopped working.",
            s.disk_unwritable_episodes);
  w.counter("latentgate_cache_disk_write_recoveries_total", "Times writing to the disk tier worked again.",
            s.disk_write_recoveries);
  w.gauge("latentgate_cache_disk_recovered_from_corruption",
          "1 when the disk tier's store was set aside as corrupt at open.",
          int64_t{s.disk_recovered_from_corruption ? 1 : 0});
  w.gauge("latentgate_cache_identity_stale", "1 when the weights changed under the server and the cache stopped.",
          int64_t{s.identity_stale ? 1 : 0});
  if (w.family("latentgate_cache_decisions_total", "Restore-or-recompute decisions for blocks found on disk.",
               MetricType::kCounter)) {
    w.sample({{"choice", "restore"}}, s.decisions_restore);
    w.sample({{"choice", "recompute"}}, s.decisions_recompute);
  }
  w.gauge("latentgate_cache_cost_restore_bandwidth_bytes_per_second", "The cost model's restore bandwidth.",
          s.costs.restore_bandwidth);
  w.gauge("latentgate_cache_cost_restore_latency_seconds", "The cost model's latency per restore.",
          s.costs.restore_latency);
  w.gauge("latentgate_cache_cost_prefill_token_seconds", "The cost model's prefill time per token outside attention.",
          s.costs.per_token);
  w.gauge("latentgate_cache_cost_attention_pair_seconds",
          "The cost model's prefill time per causal attention (query, key) pair.", s.costs.per_pair);
}

// ---------------------------------------------------------------------- memory

MemoryPicture memoryPicture(const MemoryFacts& memory, const serving::SchedulerStats& s, const cache::CacheStats* cache) {
  MemoryPicture m;
  m.weights_bytes = memory.weights_bytes;
  m.block_bytes = memory.block_bytes;
  m.capacity_blocks = s.pool_blocks;
  m.running_blocks = s.running_blocks;
  m.cached_blocks = s.cached_blocks;
  m.free_blocks = s.pool_free_blocks;
  m.reserved_blocks = s.reserved_blocks;
  if (cache != nullptr && cache->disk_state != cache::DiskState::kNone) {
    m.has_disk_tier = true;
    m.disk_blocks = cache->disk.blocks;
    m.disk_bytes = cache->disk.bytes;
    m.disk_occupied_bytes = cache->disk_occupied_bytes;
    m.disk_state = cache->disk_state;
  }
  return m;
}

void collectMemory(ExpositionWriter& w, const MemoryFacts& memory, const serving::SchedulerStats& s) {
  const MemoryPicture m = memoryPicture(memory, s, nullptr);
  w.gauge("latentgate_model_weights_bytes", "Bytes of the model's weight files (memory-mapped).",
          i64(m.weights_bytes));
  w.gauge("latentgate_latent_pool_block_bytes", "Bytes of one latent pool block.", i64(m.block_bytes));
  w.gauge("latentgate_latent_pool_capacity_blocks", "Blocks the latent pool holds.", m.capacity_blocks);
  w.gauge("latentgate_latent_pool_capacity_bytes", "Bytes of the latent pool.",
          m.capacity_blocks * static_cast<int64_t>(m.block_bytes));
  // running + cached + free = capacity.
  const int64_t running = m.running_blocks;
  const int64_t cached = m.cached_blocks;
  const int64_t free = m.free_blocks;
  if (w.family("latentgate_latent_pool_blocks",
               "Latent pool blocks by state: held by running sequences (a shared prefix once), cached (used, held "
               "by no running sequence), free.",
               MetricType::kGauge)) {
    w.sample({{"state", "running"}}, running);
    w.sample({{"state", "cached"}}, cached);
    w.sample({{"state", "free"}}, free);
  }
  if (w.family("latentgate_latent_pool_bytes", "Latent pool bytes by state (blocks times the block size).",
               MetricType::kGauge)) {
    const auto b = static_cast<int64_t>(m.block_bytes);
    w.sample({{"state", "running"}}, running * b);
    w.sample({{"state", "cached"}}, cached * b);
    w.sample({{"state", "free"}}, free * b);
  }
  w.gauge("latentgate_latent_pool_reserved_blocks",
          "Blocks promised to admitted sequences' remaining prompt and output, not allocated yet.", m.reserved_blocks);
}

void addEngineCollectors(metrics::Registry& registry, const serving::SchedulerMetricsSource& scheduler,
                         const cache::CacheMetricsSource* cache, MemoryFacts memory) {
  registry.add([&scheduler, cache, memory](ExpositionWriter& w) {
    const serving::SchedulerStats s = scheduler.schedulerStats();
    collectSchedulerStats(w, s);
    collectMemory(w, memory, s);
    if (cache != nullptr) collectCacheStats(w, cache->snapshot());
  });
}

// --------------------------------------------------------------------- the route

Result<MetricsAccess> metricsAccess(const billing::AdminKey& admin, std::string_view metrics_token) {
  MetricsAccess access;
  access.admin = &admin;
  if (!metrics_token.empty()) {
    auto token = billing::AdminKey::loadOrCreate(metrics_token, "", nullptr);
    if (!token.isOk()) return invalidArgument("server.metrics_token must be at least 16 characters long");
    access.token = std::move(token).value();
  }
  return access;
}

void addMetricsRoute(Router& router, const metrics::Registry& registry, MetricsAccess access) {
  router.add("GET", "/metrics", [&registry, access = std::move(access)](const HttpRequest&,
                                                                         std::shared_ptr<Exchange> exchange) {
    const auto header = exchange->request().headers.get("authorization");
    const std::string_view token = header ? billing::bearerToken(*header) : std::string_view();
    const bool allowed = !token.empty() && ((access.admin != nullptr && access.admin->matches(token)) ||
                                            (access.token && access.token->matches(token)));
    if (!allowed) {
      openai::ApiError e = openai::invalidApiKey();
      e.message = "This endpoint needs the admin key or the metrics token as a Bearer token.";
      return respondWithApiError(*exchange, e);
    }
    exchange->respond(200, {{"content-type", std::string(metrics::kContentType)}, {"cache-control", "no-store"}},
                      registry.scrape());
  });
}

}  // namespace lg::proxy

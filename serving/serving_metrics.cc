#include "serving/serving_metrics.h"

#include <string>

#include "cache/cache_metrics.h"

namespace lg::serving {

using metrics::ExpositionWriter;
using metrics::MetricType;

// ------------------------------------------------------------------- scheduler

void collectSchedulerStats(ExpositionWriter& w, const SchedulerStats& s) {
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
    for (size_t i = 0; i < kFinishReasonCount; ++i) {
      w.sample({{"reason", std::string(finishReasonName(static_cast<FinishReason>(i)))}},
               s.finished[i]);
    }
  }
  if (w.family("latentgate_scheduler_refusals_total",
               "Requests refused at submit or in the queue, by reason.", MetricType::kCounter)) {
    for (size_t i = 1; i < kRefusalCount; ++i) {  // 0 is "none"
      w.sample({{"reason", std::string(refusalName(static_cast<Refusal>(i)))}}, s.refused[i]);
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
  w.histogram("latentgate_scheduler_step_seconds", "Wall time of one engine step.", s.step_seconds);
  w.histogram("latentgate_scheduler_step_batch_tokens", "Tokens in one engine step.", s.step_batch_tokens);
  w.histogram("latentgate_scheduler_inter_token_seconds", "Gaps between a stream's consecutive tokens.",
              s.inter_token_seconds);
  w.histogram("latentgate_scheduler_constraint_mask_seconds",
              "Time to compute one constrained sequence's allowed-token mask (structured output), per step.",
              s.constraint_mask_seconds);
  w.histogram("latentgate_scheduler_time_to_first_token_seconds",
              "Submit to the first generated token, as the engine sees it (all requests).",
              s.first_token_seconds);
  w.histogram("latentgate_scheduler_queue_wait_seconds", "Submit to admission (first admissions).",
              s.queued_seconds);
}

// ---------------------------------------------------------------------- memory

MemoryPicture memoryPicture(const MemoryFacts& memory, const SchedulerStats& s, const cache::CacheStats* cache) {
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

void collectMemory(ExpositionWriter& w, const MemoryFacts& memory, const SchedulerStats& s) {
  const MemoryPicture m = memoryPicture(memory, s, nullptr);
  w.gauge("latentgate_model_weights_bytes", "Bytes of the model's weight files (memory-mapped).",
          m.weights_bytes);
  w.gauge("latentgate_latent_pool_block_bytes", "Bytes of one latent pool block.", m.block_bytes);
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

// ------------------------------------------------------------------------ vLLM

void collectVllmFamilies(ExpositionWriter& w, const VllmFacts& facts, const SchedulerStats& s) {
  const metrics::Labels labels = {{"model_name", facts.model_name}, {"engine", "0"}};
  if (w.family("vllm:num_requests_waiting", "Requests queued for admission (vLLM's name).", MetricType::kGauge)) {
    w.sample(labels, s.queued);
  }
  if (w.family("vllm:num_requests_running", "Sequences admitted to the engine (vLLM's name).", MetricType::kGauge)) {
    w.sample(labels, s.looking_up + s.prefilling + s.decoding);
  }
  if (w.family("vllm:kv_cache_usage_perc",
               "Fraction of latent pool blocks held by running sequences, 0 to 1 (vLLM's name).",
               MetricType::kGauge)) {
    w.sample(labels, s.pool_blocks > 0 ? static_cast<double>(s.running_blocks) / static_cast<double>(s.pool_blocks)
                                       : 0.0);
  }
  if (w.family("vllm:cache_config_info", "The latent pool's block size in tokens and capacity (vLLM's name).",
               MetricType::kGauge)) {
    w.sample({{"block_size", std::to_string(facts.block_tokens)},
              {"num_gpu_blocks", std::to_string(s.pool_blocks)},
              {"engine", "0"}},
             int64_t{1});
  }
}

void addEngineCollectors(metrics::Registry& registry, const SchedulerMetricsSource& scheduler,
                         const cache::CacheMetricsSource* cache, MemoryFacts memory, VllmFacts vllm) {
  registry.add([&scheduler, cache, memory, vllm = std::move(vllm)](ExpositionWriter& w) {
    const SchedulerStats s = scheduler.schedulerStats();
    collectSchedulerStats(w, s);
    collectMemory(w, memory, s);
    if (cache != nullptr) cache::collectCacheStats(w, cache->snapshot());
    collectVllmFamilies(w, vllm, s);
  });
}

}  // namespace lg::serving

#include "serving/scheduler.h"

#include <algorithm>
#include <ctime>
#include <random>
#include <unordered_set>

#include "common/check.h"
#include "engine/sequence_blocks.h"
#include "serving/logits_processor.h"
#include "serving/text_stream.h"

namespace lg::serving {

namespace {

// This thread's CPU time (what a step's own work costs, preemption aside).
int64_t threadCpuNs() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}


double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// splitmix64: spreads the base seed over request ids, so unseeded requests
// get independent streams.
uint64_t mixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The sampler's log-probabilities as the events report them (events.h).
std::vector<TokenLogprob> eventTop(const std::vector<engine::TokenLogprob>& top) {
  std::vector<TokenLogprob> out;
  out.reserve(top.size());
  for (const engine::TokenLogprob& t : top) out.push_back({t.token, t.logprob});
  return out;
}
SampledToken eventToken(const engine::SampledToken& t) { return {t.token, t.logprob, eventTop(t.top)}; }

}  // namespace

std::string_view finishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kRefused: return "refused";
  }
  return "unknown";
}

// Wakes the engine thread: new requests, cancellations, leases that became
// ready. Shared with handles and lease callbacks, which may outlive the
// scheduler.
struct Scheduler::Wakeup {
  std::mutex mu;
  std::condition_variable cv;
  bool signalled = false;

  void notify() {
    {
      std::lock_guard lock(mu);
      signalled = true;
    }
    cv.notify_one();
  }
};

struct RequestControl {
  uint64_t id = 0;
  std::atomic<bool> cancelled{false};
  std::weak_ptr<void> wakeup;  // Scheduler::Wakeup, type-erased (it is private)
  void (*notify)(void*) = nullptr;
};

uint64_t RequestHandle::id() const { return control_ ? control_->id : 0; }

void RequestHandle::cancel() const {
  if (!control_) return;
  control_->cancelled.store(true, std::memory_order_release);
  if (auto w = control_->wakeup.lock()) control_->notify(w.get());
}

enum class Phase : uint8_t { kQueued, kLookingUp, kComputing };

struct Scheduler::Sequence {
  Sequence(GenerationRequest r, engine::LatentPool& pool, int32_t max_context, const text::Tokenizer& tokenizer,
           const engine::SamplingParams& params, uint64_t fallback_seed)
      : request(std::move(r)),
        blocks(pool, max_context),
        sampler(params, fallback_seed),
        logits(request.sampling, request.prompt),
        constraint(request.sampling.constraint ? request.sampling.constraint() : nullptr),
        stop(params),
        text(tokenizer, request.sampling.stop) {}

  uint64_t id = 0;
  GenerationRequest request;
  EventSink sink;
  std::shared_ptr<RequestControl> control;
  Phase phase = Phase::kQueued;
  uint64_t admission = 0;  // order of the latest admission: larger is younger
  bool resumed = false;    // queued again after a preemption
  // The group it was submitted with (submitGroup; 0: alone): the group's
  // members wait together at the queue's head until all of them fit. A
  // member queued again after a preemption waits alone.
  uint64_t group = 0;

  // The whole token history: the prompt, then every generated token. The
  // sequence's blocks hold latents for ids[0, blocks.length()); the tokens
  // after that are what the next steps feed (all of them while prefilling,
  // the last sampled token while decoding).
  std::vector<int32_t> ids;
  int32_t generated = 0;
  cache::PrefixLease lease;
  engine::SequenceBlocks blocks;
  int32_t published_blocks = 0;  // full blocks handed to the lease so far
  int64_t reserved_blocks = 0;   // promised at admission: ids + output reservation

  engine::Sampler sampler;
  LogitsProcessor logits;          // penalties, bias, min_p (and the constraint's mask)
  std::vector<float> processed;    // the processed row, when there is processing
  std::unique_ptr<TokenConstraint> constraint;  // null: free text
  std::vector<uint32_t> allowed;                // the constraint's mask for this step
  engine::StopChecker stop;
  TextStream text;
  bool want_prompt_logprobs = false;  // until they are sent
  std::vector<int32_t> logprob_scratch;

  // Output gathered during a step, emitted after it.
  StreamEvent pending;
  bool has_pending = false;

  Usage usage;
  bool usage_recorded = false;  // the first admission's lookup decides the hit counts
  Clock::time_point submitted, queue_deadline, lookup_started, computing_since, first_token, last_token;
  Timing timing;

  int32_t toFeed() const { return static_cast<int32_t>(ids.size()) - blocks.length(); }
  bool decoding() const { return phase == Phase::kComputing && generated > 0 && toFeed() == 1; }
  bool cancelled() const { return control->cancelled.load(std::memory_order_acquire); }
};

struct Scheduler::StepEntry {
  Sequence* seq = nullptr;
  int32_t tokens = 0;
  engine::LogitsWanted logits = engine::LogitsWanted::kNone;
};

Result<std::unique_ptr<Scheduler>> Scheduler::create(engine::Backend& backend, cache::PrefixCache* cache,
                                                     const text::Tokenizer& tokenizer, SchedulerOptions options) {
  if (options.max_running < 1) return invalidArgument("scheduler: max_running must be >= 1");
  if (options.step_tokens < options.max_running) {
    return invalidArgument("scheduler: step_tokens (" + std::to_string(options.step_tokens) +
                           ") must be at least max_running (" + std::to_string(options.max_running) + ")");
  }
  if (options.step_tokens > backend.maxBatchTokens()) {
    return invalidArgument("scheduler: step_tokens (" + std::to_string(options.step_tokens) +
                           ") exceeds the backend's max_batch_tokens (" + std::to_string(backend.maxBatchTokens()) +
                           ")");
  }
  if (cache != nullptr && cache->blockTokens() != backend.latentLayout().block_tokens) {
    return invalidArgument("scheduler: the cache's block size differs from the pool's");
  }
  for (int32_t id : options.eos_token_ids) {
    if (id < 0 || id >= backend.config().vocab_size) {
      return invalidArgument("scheduler: end-of-sequence id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  return std::unique_ptr<Scheduler>(new Scheduler(backend, cache, tokenizer, std::move(options)));
}

Scheduler::Scheduler(engine::Backend& backend, cache::PrefixCache* cache, const text::Tokenizer& tokenizer,
                     SchedulerOptions options)
    : backend_(backend),
      cache_(cache),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      block_tokens_(backend.latentLayout().block_tokens),
      seed_base_(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)),
      wakeup_(std::make_shared<Wakeup>()) {
  limits_.vocab_size = backend.config().vocab_size;
  limits_.max_context = backend.maxContext();
  limits_.max_stop_strings = options_.max_stop_strings;
  limits_.pool_tokens = int64_t{backend.blocks().capacity()} * block_tokens_;
  stats_.pool_blocks = backend.blocks().capacity();
  engine_thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      stop_deadline_ = Clock::now() + grace;
    }
  }
  wakeup_->notify();
  if (engine_thread_.joinable()) {
    if (engine_thread_.get_id() == std::this_thread::get_id()) return;  // called from a sink: the loop ends itself
    engine_thread_.join();
  }
}

Submission Scheduler::submit(GenerationRequest request, EventSink sink) {
  std::vector<GenerationRequest> requests;
  requests.push_back(std::move(request));
  std::vector<EventSink> sinks;
  sinks.push_back(std::move(sink));
  GroupSubmission group = submitGroup(std::move(requests), std::move(sinks));
  Submission out;
  out.refused = std::move(group.refused);
  if (!out.refused) out.handle = std::move(group.handles.front());
  return out;
}

GroupSubmission Scheduler::submitGroup(std::vector<GenerationRequest> requests, std::vector<EventSink> sinks) {
  LG_CHECK(!requests.empty() && requests.size() == sinks.size(), "submitGroup: ", requests.size(), " requests, ",
           sinks.size(), " sinks");
  const auto n = static_cast<int64_t>(requests.size());
  GroupSubmission out;
  auto count_refusal = [&](Refusal r) {
    std::lock_guard lock(stats_mu_);
    stats_.submitted += static_cast<uint64_t>(n);
    stats_.refused[static_cast<size_t>(r)] += static_cast<uint64_t>(n);
  };
  for (const GenerationRequest& request : requests) {
    if (Refused r = validateRequest(request, limits_)) {
      count_refusal(r.reason);
      out.refused = std::move(r);
      return out;
    }
  }
  if (n > options_.max_running) {
    // It could never be admitted whole: refuse it now rather than run part of it.
    count_refusal(Refusal::kTooManyChoices);
    out.refused = {Refusal::kTooManyChoices, std::to_string(n) + " prompts or choices cannot run together: at most " +
                                                 std::to_string(options_.max_running) + " run at once"};
    return out;
  }
  std::vector<engine::SamplingParams> sampling;
  for (const GenerationRequest& request : requests) {
    engine::SamplingParams params;
    const SamplingOptions& s = request.sampling;
    params.temperature = s.temperature;
    params.top_p = s.top_p;
    params.top_k = s.top_k;
    params.seed = s.seed;
    params.max_tokens = s.max_tokens;
    params.eos_token_ids = options_.eos_token_ids;
    params.eos_token_ids.insert(params.eos_token_ids.end(), s.stop_token_ids.begin(), s.stop_token_ids.end());
    params.logprobs = s.logprobs;
    params.top_logprobs = s.top_logprobs;
    sampling.push_back(std::move(params));
  }

  std::lock_guard lock(mu_);
  if (stopping_) {
    count_refusal(Refusal::kShuttingDown);
    out.refused = {Refusal::kShuttingDown, "the server is shutting down"};
    return out;
  }
  if (waiting_.load() + n > options_.max_queued) {
    count_refusal(Refusal::kQueueFull);
    out.refused = {Refusal::kQueueFull, std::to_string(options_.max_queued) + " requests are already waiting"};
    return out;
  }
  const Clock::time_point now = Clock::now();
  const uint64_t group = n > 1 ? next_id_ : 0;  // the first member's id names the group
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint64_t id = next_id_++;
    auto seq = std::make_unique<Sequence>(std::move(requests[i]), backend_.latentPool(), backend_.maxContext(),
                                          tokenizer_, sampling[i], mixSeed(seed_base_ + id));
    seq->id = id;
    seq->group = group;
    seq->sink = std::move(sinks[i]);
    seq->control = std::make_shared<RequestControl>();
    seq->control->id = id;
    seq->control->wakeup = std::static_pointer_cast<void>(wakeup_);
    seq->control->notify = [](void* w) { static_cast<Wakeup*>(w)->notify(); };
    seq->ids = seq->request.prompt;
    seq->want_prompt_logprobs = seq->request.sampling.prompt_logprobs;
    seq->submitted = now;
    seq->queue_deadline = seq->submitted + options_.max_queue_wait;
    if (seq->request.deadline && *seq->request.deadline < seq->queue_deadline) seq->queue_deadline = *seq->request.deadline;
    seq->usage.prompt_tokens = static_cast<int32_t>(seq->request.prompt.size());
    out.handles.push_back(RequestHandle(seq->control));
    inbox_.push_back(std::move(seq));
  }
  waiting_.fetch_add(n);
  {
    std::lock_guard stats_lock(stats_mu_);
    stats_.submitted += static_cast<uint64_t>(n);
  }
  wakeup_->notify();
  return out;
}

SchedulerStats Scheduler::schedulerStats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

int64_t Scheduler::blocksFor(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

// ------------------------------------------------------------------ the loop

void Scheduler::loop() {
  for (;;) {
    Clock::time_point stop_deadline;
    const bool stopping = takeInbox(stop_deadline);
    const Clock::time_point now = Clock::now();
    if (stopping) {
      while (!queue_.empty()) {
        SequencePtr seq = std::move(queue_.front());
        queue_.pop_front();
        waiting_.fetch_sub(1);
        finish(*seq, FinishReason::kRefused, "the server is shutting down", Refusal::kShuttingDown);
      }
      if (now >= stop_deadline) {
        while (!running_.empty()) finish(*running_.back(), FinishReason::kCancelled, "the server is shutting down");
      }
      if (running_.empty()) break;
    }
    reapCancelledAndExpired(now);
    if (!stopping) admit(now);
    collectReadyLookups(now);
    const bool worked = runStep();
    updateGauges();
    if (!worked) waitForWork(Clock::now());
  }
  updateGauges();
}

void Scheduler::waitForWork(Clock::time_point now) {
  // Sleep until something arrives, a lease becomes ready or the nearest
  // queue deadline passes (checked at least every 50 ms).
  Clock::time_point until = now + std::chrono::milliseconds(50);
  for (const SequencePtr& seq : queue_) until = std::min(until, seq->queue_deadline);
  std::unique_lock lock(wakeup_->mu);
  wakeup_->cv.wait_until(lock, until, [&] { return wakeup_->signalled; });
  wakeup_->signalled = false;
}

bool Scheduler::takeInbox(Clock::time_point& stop_deadline) {
  std::vector<SequencePtr> arrived;
  bool stopping;
  {
    // One critical section: once stopping_ is seen, submit() adds nothing more.
    std::lock_guard lock(mu_);
    arrived.swap(inbox_);
    stopping = stopping_;
    stop_deadline = stop_deadline_;
  }
  for (SequencePtr& seq : arrived) {
    // Higher priority first; equal priorities keep arrival order.
    auto pos = std::find_if(queue_.begin(), queue_.end(), [&](const SequencePtr& q) {
      return q->request.priority < seq->request.priority;
    });
    queue_.insert(pos, std::move(seq));
  }
  return stopping;
}

void Scheduler::reapCancelledAndExpired(Clock::time_point now) {
  for (size_t i = 0; i < queue_.size();) {
    Sequence& seq = *queue_[i];
    if (seq.cancelled() || now >= seq.queue_deadline) {
      SequencePtr owned = std::move(queue_[i]);
      queue_.erase(queue_.begin() + static_cast<ptrdiff_t>(i));
      waiting_.fetch_sub(1);
      if (owned->cancelled()) {
        finish(*owned, FinishReason::kCancelled, "cancelled before admission");
      } else {
        finish(*owned, FinishReason::kRefused,
               "not admitted within " + std::to_string(static_cast<int64_t>(seconds(now - owned->submitted) * 1000)) +
                   " ms (the queue's limit or the request's deadline)",
               Refusal::kQueueTimeout);
      }
      continue;
    }
    ++i;
  }
  for (size_t i = 0; i < running_.size();) {
    Sequence& seq = *running_[i];
    if (seq.cancelled()) {
      finish(seq, FinishReason::kCancelled, "cancelled");  // erases running_[i]
    } else if (seq.request.deadline && now >= *seq.request.deadline) {
      finish(seq, FinishReason::kCancelled, "the request's deadline passed");
    } else {
      ++i;
    }
  }
}

void Scheduler::admit(Clock::time_point now) {
  const engine::BlockAllocator& allocator = backend_.blocks();
  // What running sequences hold (shared blocks once) and what they were
  // promised but have not allocated yet.
  std::unordered_set<engine::BlockId> held;
  int64_t promised = 0;
  for (const SequencePtr& seq : running_) {
    held.insert(seq->blocks.blocks().begin(), seq->blocks.blocks().end());
    promised += std::max<int64_t>(0, seq->reserved_blocks - static_cast<int64_t>(seq->blocks.blocks().size()));
  }
  int64_t available = allocator.capacity() - static_cast<int64_t>(held.size()) - promised;
  auto needOf = [this](const Sequence& seq) {
    const int32_t remaining_output = seq.request.sampling.max_tokens - seq.generated;
    return blocksFor(static_cast<int64_t>(seq.ids.size()) +
                     outputReservation(remaining_output, options_.output_reservation_tokens));
  };
  while (!queue_.empty()) {
    // The head and, when it heads a group, the rest of its group behind it
    // (a group's members are queued together): admitted together or not yet.
    size_t members = 1;
    const uint64_t group = queue_.front()->group;
    while (group != 0 && members < queue_.size() && queue_[members]->group == group) ++members;
    if (static_cast<int64_t>(running_.size() + members) > options_.max_running) break;
    int64_t need = 0;
    for (size_t i = 0; i < members; ++i) need += needOf(*queue_[i]);
    // Strict order: a large request (or group) at the head is not overtaken (it would starve).
    if (need > available) break;
    available -= need;
    for (size_t i = 0; i < members; ++i) {
      SequencePtr owned = std::move(queue_.front());
      queue_.pop_front();
      waiting_.fetch_sub(1);
      owned->reserved_blocks = needOf(*owned);
      owned->admission = next_admission_++;
      {
        std::lock_guard lock(stats_mu_);
        ++stats_.admitted;
        if (!owned->resumed) stats_.queued_seconds.observe(seconds(now - owned->submitted));
      }
      if (!owned->resumed) owned->timing.queued = seconds(now - owned->submitted);
      running_.push_back(std::move(owned));
      startLookup(*running_.back(), now);
    }
  }
}

void Scheduler::startLookup(Sequence& seq, Clock::time_point now) {
  // Read the clock here and when the lease is collected (not the step's
  // `now`, which a lookup that resolves at once shares): Server-Timing's
  // `cache` is then the lookup's own time, hashing and index included.
  seq.lookup_started = Clock::now();
  if (cache_ == nullptr) {
    seq.phase = Phase::kComputing;
    seq.computing_since = now;
    return;
  }
  cache::LookupOptions options;
  options.shared_namespaces = seq.request.shared;
  options.on_ready = [w = std::weak_ptr<Wakeup>(wakeup_)] {
    if (auto wake = w.lock()) wake->notify();
  };
  seq.phase = Phase::kLookingUp;
  seq.lease = cache_->lookup(seq.request.ns, seq.ids, std::move(options));
}

void Scheduler::collectReadyLookups(Clock::time_point now) {
  for (SequencePtr& ptr : running_) {
    Sequence& seq = *ptr;
    if (seq.phase != Phase::kLookingUp || !seq.lease.ready()) continue;
    std::vector<engine::BlockId> hit = seq.lease.takeBlocks();
    int32_t cached = seq.lease.cachedTokens();
    if (seq.want_prompt_logprobs) {
      // Prompt log-probabilities need the logits of every prompt position,
      // which a cache hit skips: compute the whole prompt (the lease still
      // publishes what this request computes).
      engine::SequenceBlocks discard(backend_.latentPool(), backend_.maxContext());
      discard.adopt(std::move(hit), cached);
      hit.clear();
      cached = 0;
    } else {
      seq.blocks.adopt(std::move(hit), cached);
    }
    seq.published_blocks = cached / block_tokens_;
    if (!seq.usage_recorded) {
      seq.usage_recorded = true;
      const int32_t hit_blocks = cached / block_tokens_;
      const int32_t disk = std::min(seq.lease.diskBlocks(), hit_blocks);
      seq.usage.hit_tokens_disk = disk * block_tokens_;
      seq.usage.hit_tokens_tier0 = cached - seq.usage.hit_tokens_disk;
      if (!seq.want_prompt_logprobs) {
        seq.usage.misses = seq.lease.misses();
        seq.usage.looked_up = true;
      }
      seq.timing.cache_lookup = seconds(Clock::now() - seq.lookup_started);
      seq.timing.cache_restore = seq.lease.restoreSeconds();
      std::lock_guard lock(stats_mu_);
      stats_.prompt_tokens += static_cast<uint64_t>(seq.usage.prompt_tokens);
      stats_.hit_tokens += static_cast<uint64_t>(cached);
    }
    seq.phase = Phase::kComputing;
    seq.computing_since = now;
  }
  // Without a cache the usage is all misses.
  for (SequencePtr& ptr : running_) {
    Sequence& seq = *ptr;
    if (seq.phase == Phase::kComputing && !seq.usage_recorded) {
      seq.usage_recorded = true;
      std::lock_guard lock(stats_mu_);
      stats_.prompt_tokens += static_cast<uint64_t>(seq.usage.prompt_tokens);
    }
  }
}

Scheduler::Sequence* Scheduler::preemptionVictim() {
  // Lowest priority, then youngest; among those, one that holds blocks (a
  // sequence still looking up frees nothing by leaving).
  Sequence* victim = nullptr;
  auto better = [](const Sequence* a, const Sequence* b) {
    const bool a_holds = !a->blocks.blocks().empty(), b_holds = !b->blocks.blocks().empty();
    if (a->request.priority != b->request.priority) return a->request.priority < b->request.priority;
    if (a_holds != b_holds) return a_holds;
    return a->admission > b->admission;
  };
  for (const SequencePtr& seq : running_) {
    if (victim == nullptr || better(seq.get(), victim)) victim = seq.get();
  }
  return victim;
}

bool Scheduler::runStep() {
  std::vector<StepEntry> entries;
  engine::ForwardBatch batch;
  for (;;) {
    entries.clear();
    batch.sequences.clear();
    // Decodes first (oldest admission first), then prefill chunks in
    // admission order while the budget lasts.
    std::vector<Sequence*> order;
    for (const SequencePtr& seq : running_) {
      if (seq->phase == Phase::kComputing) order.push_back(seq.get());
    }
    std::stable_sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) {
      if (a->decoding() != b->decoding()) return a->decoding();
      return a->admission < b->admission;
    });
    int32_t budget = options_.step_tokens;
    for (Sequence* seq : order) {
      if (budget == 0) break;
      const int32_t n = std::min(seq->toFeed(), budget);
      budget -= n;
      const bool completes = n == seq->toFeed();
      // Rows whose logits are wanted: the last one when the chunk completes
      // what is to be fed; every row while prompt log-probabilities are due.
      engine::LogitsWanted logits = engine::LogitsWanted::kNone;
      if (seq->want_prompt_logprobs) {
        logits = engine::LogitsWanted::kAll;
      } else if (completes) {
        logits = engine::LogitsWanted::kLast;
      }
      entries.push_back({seq, n, logits});
    }
    if (entries.empty()) return false;
    // Allocate the blocks the step writes; when the pool (after the cache's
    // reclaimer evicted what nobody pins) cannot hold them, preempt and retry.
    Sequence* failed = nullptr;
    Status failure;
    for (const StepEntry& e : entries) {
      Sequence& seq = *e.seq;
      auto tokens = std::span<const int32_t>(seq.ids).subspan(static_cast<size_t>(seq.blocks.length()),
                                                               static_cast<size_t>(e.tokens));
      Result<engine::SequenceStep> step = seq.blocks.step(tokens, e.logits);
      if (!step.isOk()) {
        failed = &seq;
        failure = step.status();
        break;
      }
      batch.sequences.push_back(std::move(step).value());
    }
    if (failed == nullptr) break;
    if (failure.code() != StatusCode::kResourceExhausted) {
      // Not a full pool: this sequence cannot go on; the others can.
      finish(*failed, FinishReason::kError, "the engine refused the sequence: " + failure.toString());
      continue;
    }
    Sequence* victim = preemptionVictim();
    LG_CHECK(victim != nullptr, "scheduler: a step failed to allocate with no running sequence");
    if (running_.size() == 1) {
      // Alone and still out of blocks: pinned blocks of pending lookups hold
      // the pool (validateRequest guarantees a lone request fits the pool).
      finish(*victim, FinishReason::kError, "the latent pool has no room for this sequence");
    } else {
      preempt(*victim);
    }
  }

  const Clock::time_point t0 = Clock::now();
  Result<engine::ForwardOutput> out = backend_.forward(batch);
  const Clock::time_point t1 = Clock::now();
  int64_t tokens = 0, decode_tokens = 0;
  for (const StepEntry& e : entries) {
    tokens += e.tokens;
    if (e.seq->decoding()) ++decode_tokens;
  }
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.steps;
    stats_.step_tokens += static_cast<uint64_t>(tokens);
    stats_.decode_tokens += static_cast<uint64_t>(decode_tokens);
    stats_.prefill_tokens += static_cast<uint64_t>(tokens - decode_tokens);
    stats_.step_seconds.observe(seconds(t1 - t0));
    stats_.step_batch_tokens.observe(static_cast<double>(tokens));
    if (!out.isOk()) ++stats_.engine_errors;
  }
  if (!out.isOk()) {
    // Nothing was written (forward() is all or nothing): fail the batch's
    // requests, keep serving the others.
    const std::string message = "the engine failed: " + out.status().toString();
    std::vector<Sequence*> failed;
    for (const StepEntry& e : entries) failed.push_back(e.seq);
    for (Sequence* seq : failed) finish(*seq, FinishReason::kError, message);
    return true;
  }
  if (cache_ != nullptr) {
    // The cost model learns what prefill costs on this machine.
    const engine::ForwardTiming& timing = out.value().timing;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].tokens < 2) continue;
      const int64_t begin = batch.sequences[i].cached_len;
      const double share = static_cast<double>(entries[i].tokens) / static_cast<double>(tokens);
      cache_->observePrefill(begin, begin + entries[i].tokens,
                             (timing.total_seconds - timing.attention_seconds) * share, timing.attention_seconds * share);
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) processOutput(*entries[i].seq, entries[i], out.value(), i, t1);
  // Emit, then retire what finished (finish() erases from running_).
  std::vector<Sequence*> done;
  for (const StepEntry& e : entries) {
    Sequence& seq = *e.seq;
    if (seq.pending.final) {
      done.push_back(&seq);
    } else if (seq.has_pending) {
      emit(seq, false);
    }
  }
  for (Sequence* seq : done) {
    finish(*seq, seq->pending.finish_reason, seq->pending.message);
  }
  return true;
}

void Scheduler::processOutput(Sequence& seq, const StepEntry& entry, const engine::ForwardOutput& out, size_t index,
                              Clock::time_point now) {
  const int32_t first_position = seq.blocks.length();
  seq.blocks.commit(entry.tokens);
  publishBlocks(seq);
  const int32_t prompt_len = static_cast<int32_t>(seq.request.prompt.size());
  if (seq.want_prompt_logprobs) {
    // Row r (position p) predicts the token at p + 1.
    if (seq.pending.prompt_logprobs.empty()) {
      seq.pending.prompt_logprobs.push_back({seq.request.prompt[0], std::nullopt, {}});
    }
    for (int32_t r = 0; r < entry.tokens; ++r) {
      const int32_t next = first_position + r + 1;
      if (next >= prompt_len) break;
      const float* row = out.row(index, r);
      engine::SampledToken scored =
          engine::scoreToken(std::span(row, static_cast<size_t>(out.vocab_size)), seq.request.prompt[next],
                             seq.request.sampling.top_logprobs, seq.logprob_scratch);
      seq.pending.prompt_logprobs.push_back({scored.token, scored.logprob, eventTop(scored.top)});
    }
    if (seq.blocks.length() >= prompt_len) {
      seq.want_prompt_logprobs = false;
      seq.has_pending = true;
    }
  }
  if (seq.toFeed() > 0) return;  // more of the prompt to prefill
  if (seq.generated == 0) seq.timing.prefill += seconds(now - seq.computing_since);
  if (seq.request.sampling.max_tokens == 0) {
    // Scoring the prompt only (echo with max_tokens 0).
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kLength;
    return;
  }
  const int32_t rows = out.num_rows[index];
  std::span<const float> row(out.row(index, rows - 1), static_cast<size_t>(out.vocab_size));
  const uint32_t* allowed = nullptr;
  if (seq.constraint) {
    if (!constrain(seq, row.size())) return;
    allowed = seq.allowed.data();
  }
  if (seq.logits.active() || allowed != nullptr) {
    seq.processed.resize(row.size());
    seq.logits.apply(row, seq.processed, allowed);
    row = seq.processed;
  }
  acceptToken(seq, seq.sampler.sample(row), now);
}

bool Scheduler::constrain(Sequence& seq, size_t vocab) {
  const auto fail = [&](std::string message) {
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kError;
    seq.pending.message = std::move(message);
    return false;
  };
  if (seq.constraint->mustEnd()) {  // complete, and nothing may follow
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kStop;
    return false;
  }
  const Clock::time_point started = Clock::now();
  const int64_t cpu_started_ns = threadCpuNs();
  seq.allowed.assign((vocab + 31) / 32, 0u);
  seq.constraint->fillAllowed(seq.allowed);
  // Ids past the vocabulary the constraint knows (a padded logits row) stay
  // masked; the end-of-sequence tokens are allowed once the output is complete.
  const size_t words = seq.allowed.size();
  if (vocab % 32 != 0) seq.allowed[words - 1] &= (1u << (vocab % 32)) - 1;
  if (seq.constraint->canEnd()) {
    for (int32_t eos : options_.eos_token_ids) {
      if (eos >= 0 && static_cast<size_t>(eos) < vocab) seq.allowed[static_cast<size_t>(eos) / 32] |= 1u << (eos % 32);
    }
  }
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  {
    std::lock_guard lock(stats_mu_);
    stats_.constraint_mask_seconds.observe(seconds(took));
  }
  // The budget is the engine thread's CPU time, not the wall clock's: on a
  // loaded machine the thread may be preempted mid-mask, which says nothing
  // of the grammar. (A thread's CPU time never exceeds the wall time, so it
  // is only read when the wall time is over.)
  if (took > options_.max_constraint_step) {
    const auto cpu = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::nanoseconds(threadCpuNs() - cpu_started_ns));
    if (cpu > options_.max_constraint_step) {
      return fail("the response format's grammar took " + std::to_string(cpu.count() / 1000) +
                  " ms of CPU time to find the allowed tokens of one step, more than the " +
                  std::to_string(options_.max_constraint_step.count() / 1000) +
                  " ms a step allows; simplify the schema");
    }
  }
  if (std::all_of(seq.allowed.begin(), seq.allowed.end(), [](uint32_t w) { return w == 0; })) {
    return fail("the response format allows no next token");
  }
  return true;
}

void Scheduler::acceptToken(Sequence& seq, const engine::SampledToken& sampled, Clock::time_point now) {
  const int32_t token = sampled.token;
  seq.logits.accepted(token);
  seq.ids.push_back(token);
  ++seq.generated;
  ++seq.usage.completion_tokens;
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.generated_tokens;
    if (seq.generated == 1) {
      stats_.first_token_seconds.observe(seconds(now - seq.submitted));
    } else {
      stats_.inter_token_seconds.observe(seconds(now - seq.last_token));
    }
  }
  if (seq.generated == 1) {
    seq.first_token = now;
    seq.timing.first_token = seconds(now - seq.submitted);
  }
  seq.last_token = now;
  seq.has_pending = true;
  const engine::FinishReason stop = seq.stop.push(token);
  const bool hidden = stop == engine::FinishReason::kStop && seq.stop.matchedLength() > 0;  // an end token
  if (seq.constraint && !hidden && !seq.constraint->accept(token)) {
    // The mask allowed it, so the constraint contradicts itself: a bug, never
    // a token outside the format in the output.
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kError;
    seq.pending.message = "the response format refused a token its own mask allowed";
    return;
  }
  if (!hidden) {
    seq.pending.token_ids.push_back(token);
    if (seq.request.sampling.logprobs || seq.request.sampling.top_logprobs > 0) seq.pending.logprobs.push_back(eventToken(sampled));
    TextStream::Piece piece = seq.text.push(token);
    seq.pending.text += piece.text;
    if (piece.stopped) {
      seq.pending.final = true;
      seq.pending.finish_reason = FinishReason::kStop;
      return;
    }
  }
  if (stop == engine::FinishReason::kStop || (seq.constraint && seq.constraint->mustEnd())) {
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kStop;
    if (hidden && seq.stop.matchedLength() == 1) seq.pending.end_token = token;  // one end token
  } else if (stop == engine::FinishReason::kLength || static_cast<int32_t>(seq.ids.size()) >= backend_.maxContext()) {
    seq.pending.final = true;
    seq.pending.finish_reason = FinishReason::kLength;
  }
}

void Scheduler::publishBlocks(Sequence& seq) {
  if (cache_ == nullptr || seq.lease.coveredTokens() == 0) return;
  const int32_t full = seq.blocks.length() / block_tokens_;
  if (full <= seq.published_blocks) return;
  // The lease covers the ids it was looked up with; generated tokens extend it.
  const int32_t covered = seq.lease.coveredTokens();
  if (covered < seq.blocks.length()) {
    Status s = seq.lease.extend(std::span<const int32_t>(seq.ids).subspan(
        static_cast<size_t>(covered), static_cast<size_t>(seq.blocks.length() - covered)));
    LG_CHECK(s.isOk(), "scheduler: extending a ready lease failed: ", s.toString());
  }
  Status s = seq.lease.publish(seq.blocks.blocks(), seq.blocks.length());
  LG_CHECK(s.isOk(), "scheduler: publishing a sequence's blocks failed: ", s.toString());
  seq.published_blocks = full;
}

void Scheduler::preempt(Sequence& seq) {
  // Publish what it computed, so resuming is mostly a cache hit, then give
  // everything back. Its sampler, stop checker and text stream stay as they
  // are: a resumed request continues exactly where it stopped.
  if (seq.phase == Phase::kComputing) publishBlocks(seq);
  seq.lease = cache::PrefixLease();
  seq.blocks.reset();
  seq.published_blocks = 0;
  seq.phase = Phase::kQueued;
  seq.resumed = true;
  // It was admitted once: only its own deadline can refuse it now.
  seq.queue_deadline = seq.request.deadline.value_or(Clock::time_point::max());
  if (seq.request.sampling.prompt_logprobs && seq.pending.prompt_logprobs.size() < seq.request.prompt.size()) {
    seq.pending.prompt_logprobs.clear();  // recomputed from the start
    seq.want_prompt_logprobs = true;
  }
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.preemptions;
  }
  auto it = std::find_if(running_.begin(), running_.end(), [&](const SequencePtr& p) { return p.get() == &seq; });
  LG_CHECK(it != running_.end(), "scheduler: preempting a sequence that is not running");
  SequencePtr owned = std::move(*it);
  running_.erase(it);
  owned->group = 0;  // it ran with its group; it resumes alone
  // First in the queue among its priority: it already waited once.
  auto pos = std::find_if(queue_.begin(), queue_.end(),
                          [&](const SequencePtr& q) { return q->request.priority <= owned->request.priority; });
  queue_.insert(pos, std::move(owned));
  waiting_.fetch_add(1);
}

void Scheduler::finish(Sequence& seq, FinishReason reason, std::string message, Refusal refusal) {
  const Clock::time_point now = Clock::now();
  if (seq.phase == Phase::kComputing) publishBlocks(seq);
  seq.lease = cache::PrefixLease();  // abandons claims; cancels a pending lookup
  seq.blocks.reset();
  // Out of running_ (queued sequences are removed by their caller), so that
  // the gauges a client reads after the final event no longer count it.
  SequencePtr owned;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const SequencePtr& p) { return p.get() == &seq; });
  if (it != running_.end()) {
    owned = std::move(*it);
    running_.erase(it);
  }
  seq.pending.text += seq.text.finish();
  seq.pending.final = true;
  seq.pending.finish_reason = reason;
  seq.pending.refusal = refusal;
  seq.pending.message = std::move(message);
  if (seq.want_prompt_logprobs) seq.pending.prompt_logprobs.clear();  // never half of them
  // Hits and misses are what the (first) admission found; a request never
  // admitted reports neither.
  seq.usage.miss_tokens = seq.usage_recorded ? seq.usage.prompt_tokens - seq.usage.hitTokens() : 0;
  seq.timing.decode = seq.generated > 1 ? seconds(seq.last_token - seq.first_token) : 0;
  seq.timing.total = seconds(now - seq.submitted);
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.finished[static_cast<size_t>(reason)];
    if (reason == FinishReason::kRefused) ++stats_.refused[static_cast<size_t>(refusal)];
  }
  updateGauges();
  emit(seq, true);
}

void Scheduler::emit(Sequence& seq, bool final) {
  StreamEvent event = std::move(seq.pending);
  seq.pending = StreamEvent();
  seq.has_pending = false;
  event.request_id = seq.id;
  event.final = final;
  if (final) {
    event.usage = seq.usage;
    event.timing = seq.timing;
  }
  if (seq.sink) seq.sink(std::move(event));
}

void Scheduler::updateGauges() {
  std::unordered_set<engine::BlockId> held;
  int64_t promised = 0, looking_up = 0, prefilling = 0, decoding = 0;
  for (const SequencePtr& seq : running_) {
    held.insert(seq->blocks.blocks().begin(), seq->blocks.blocks().end());
    promised += std::max<int64_t>(0, seq->reserved_blocks - static_cast<int64_t>(seq->blocks.blocks().size()));
    if (seq->phase == Phase::kLookingUp) {
      ++looking_up;
    } else if (seq->decoding()) {
      ++decoding;
    } else {
      ++prefilling;
    }
  }
  const engine::BlockAllocator& allocator = backend_.blocks();
  const int64_t free_blocks = allocator.numFree();
  std::lock_guard lock(stats_mu_);
  stats_.queued = static_cast<int64_t>(queue_.size());
  stats_.looking_up = looking_up;
  stats_.prefilling = prefilling;
  stats_.decoding = decoding;
  stats_.pool_free_blocks = free_blocks;
  stats_.running_blocks = static_cast<int64_t>(held.size());
  stats_.cached_blocks = std::max<int64_t>(0, allocator.capacity() - free_blocks - static_cast<int64_t>(held.size()));
  stats_.reserved_blocks = promised;
}

}  // namespace lg::serving

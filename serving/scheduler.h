// Scheduler: the serving core. It turns concurrent generation requests into
// streams of events, running them on one engine thread with continuous
// batching over the prefix cache. docs/serving.md describes the design.
//
// Each engine step packs, under a token budget (step_tokens), the one decode
// token of every running sequence and then prefill chunks of the sequences
// still computing their prompt into one ForwardBatch, so that every weight
// read is shared and a long prompt never stalls the running streams for more
// than one step. The batch's tokens are sampled in the same step, each
// request with its own RNG (a seeded request gives the same tokens whatever
// else is in the batch).
//
// A request's life: submit() validates it (refusals happen before any work)
// and queues it; admission (by priority, then arrival) waits until the
// latent pool can hold its tokens plus an output reservation and starts its
// cache lookup (non-blocking: restores and waits for blocks another request
// is computing happen off the engine thread); once the lease is ready the
// sequence adopts the hit blocks, prefills the rest and decodes. Its prompt's
// blocks and, as they fill, its generated tokens' blocks are published to the
// cache. When the pool runs out, the cache's unpinned blocks are evicted
// first (the allocator's reclaimer); if running sequences still do not fit,
// the youngest (lowest priority first) is preempted: its blocks are published
// and released, and it is queued again at the front, to resume mostly from
// the cache with its sampler state intact.
//
// Threads: submit(), RequestHandle::cancel(), stats() and shutdown() may be
// called from any thread; everything else runs on the engine thread. The
// backend, the cache (may be null: no prefix cache) and the tokenizer must
// outlive the scheduler.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "serving/events.h"
#include "serving/request.h"
#include "serving/scheduler_stats.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::serving {

struct SchedulerOptions {
  int32_t step_tokens = 512;  // tokens per step; at least max_running, at most the backend's max_batch_tokens
  int32_t max_running = 64;
  int32_t max_queued = 256;
  std::chrono::milliseconds max_queue_wait{30000};
  int32_t output_reservation_tokens = 256;
  int32_t max_stop_strings = 4;
  std::vector<int32_t> eos_token_ids;  // the model's end-of-sequence tokens
  // The longest a constrained sequence's allowed-token mask may take in one
  // step, in the engine thread's CPU time: the step waits for it, so a slower
  // one fails that request (and only it) instead of slowing every stream in
  // the batch.
  std::chrono::microseconds max_constraint_step{20000};
};

struct RequestControl;  // scheduler.cc
class Scheduler;

// The owner's side of a submitted request. Copyable; cancel() from any thread.
class RequestHandle {
 public:
  RequestHandle() = default;
  uint64_t id() const;
  // Stops the request within one engine step (a client went away): its pins,
  // claims and blocks are released and it ends with a kCancelled final event.
  // Idempotent; a no-op after the final event.
  void cancel() const;

 private:
  friend class Scheduler;
  explicit RequestHandle(std::shared_ptr<RequestControl> control) : control_(std::move(control)) {}
  std::shared_ptr<RequestControl> control_;
};

struct Submission {
  RequestHandle handle;  // valid unless refused
  Refused refused;       // set when the request was refused at once (no events follow)
  explicit operator bool() const { return !refused; }
};

// The requests of one API request that run together (a completions request's
// prompts, a chat request's n choices).
struct GroupSubmission {
  std::vector<RequestHandle> handles;  // one per request, in order, unless refused
  Refused refused;                     // the whole group was refused at once (no events follow)
  explicit operator bool() const { return !refused; }
};

class Scheduler final : public SchedulerMetricsSource {
 public:
  static Result<std::unique_ptr<Scheduler>> create(engine::Backend& backend, cache::PrefixCache* cache,
                                                   const text::Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler() override;  // shutdown with no grace
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Refuses bad input, a full queue or a shutdown at once; otherwise the
  // request is queued and `sink` will receive its events, the last one final.
  Submission submit(GenerationRequest request, EventSink sink);

  // A group admitted whole or not at all, as OpenAI and vLLM treat a request
  // with several prompts or choices: submitted together (any member's bad
  // input, a queue without room for all, or more members than max_running
  // refuses them all at once), admitted together once the pool and the
  // running slots hold every member, and refused together when they waited
  // past the queue's limit. A member preempted later is queued again on its
  // own. sinks[i] receives requests[i]'s events.
  GroupSubmission submitGroup(std::vector<GenerationRequest> requests, std::vector<EventSink> sinks);

  // Stops admitting: queued requests are refused (shutting_down), running
  // ones may finish until `grace` has passed and are then cancelled. Returns
  // once the engine thread has ended. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  SchedulerStats schedulerStats() const override;
  const RequestLimits& limits() const { return limits_; }

 private:
  struct Sequence;
  struct StepEntry;
  using SequencePtr = std::unique_ptr<Sequence>;
  struct Wakeup;

  Scheduler(engine::Backend& backend, cache::PrefixCache* cache, const text::Tokenizer& tokenizer,
            SchedulerOptions options);

  void loop();
  // Engine-thread steps of the loop.
  // Moves submitted requests into the queue; returns whether shutdown began.
  bool takeInbox(Clock::time_point& stop_deadline);
  void reapCancelledAndExpired(Clock::time_point now);
  void admit(Clock::time_point now);
  void startLookup(Sequence& seq, Clock::time_point now);
  void collectReadyLookups(Clock::time_point now);
  bool runStep();  // false when there was nothing to run
  void processOutput(Sequence& seq, const StepEntry& entry, const engine::ForwardOutput& out, size_t index,
                     Clock::time_point now);
  void acceptToken(Sequence& seq, const engine::SampledToken& sampled, Clock::time_point now);
  // Fills the sequence's allowed-token mask for this step; false: the
  // sequence ended instead (complete, or its constraint failed).
  bool constrain(Sequence& seq, size_t vocab);
  void publishBlocks(Sequence& seq);
  void preempt(Sequence& seq);
  // Picks a running sequence to preempt: lowest priority, then youngest.
  Sequence* preemptionVictim();
  void finish(Sequence& seq, FinishReason reason, std::string message, Refusal refusal = Refusal::kNone);
  void emit(Sequence& seq, bool final);
  int64_t blocksFor(int64_t tokens) const;
  void updateGauges();
  void waitForWork(Clock::time_point now);

  engine::Backend& backend_;
  cache::PrefixCache* cache_;
  const text::Tokenizer& tokenizer_;
  const SchedulerOptions options_;
  RequestLimits limits_;
  const int32_t block_tokens_;
  const uint64_t seed_base_;

  std::shared_ptr<Wakeup> wakeup_;

  // Guarded by mu_: what other threads hand the engine thread.
  mutable std::mutex mu_;
  std::vector<SequencePtr> inbox_;
  bool stopping_ = false;
  Clock::time_point stop_deadline_;
  uint64_t next_id_ = 1;
  std::atomic<int64_t> waiting_{0};  // inbox + queue, for the queue-length check

  // Engine thread only.
  std::deque<SequencePtr> queue_;       // waiting for admission, in admission order
  std::vector<SequencePtr> running_;    // looking up, prefilling or decoding
  uint64_t next_admission_ = 1;

  mutable std::mutex stats_mu_;
  SchedulerStats stats_;  // guarded by stats_mu_

  std::thread engine_thread_;  // last: started when everything else exists
};

}  // namespace lg::serving

// What the scheduler tells a request's owner, in order, through an EventSink:
// zero or more delta events (new text, its token ids and log-probabilities),
// then exactly one final event (finish reason, usage, timing). A request that
// submit() refused gets no events at all.
//
// The sink is called on the engine thread and must not block: post the event
// to a network thread's queue (the gateway posts to its connection's strand)
// or use EventQueue below. Events are moved into the sink.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/miss_anatomy.h"

#include "serving/request.h"

namespace lg::serving {

enum class FinishReason : uint8_t {
  kStop,       // an end-of-sequence token, a stop token id or a stop string
  kLength,     // max_tokens, or the model's context
  kCancelled,  // the owner cancelled (a client went away), the deadline passed, or shutdown
  kError,      // the engine failed; `message` says why
  kRefused,    // never admitted: `refusal` says why (queue timeout)
};
std::string_view finishReasonName(FinishReason reason);  // "stop", "length", ...

// Hit and miss tokens add up to prompt_tokens once the request was admitted;
// a request refused or cancelled in the queue reports neither.
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t hit_tokens_tier0 = 0;  // prompt tokens whose latents came from tier 0 (the latent pool)
  int32_t hit_tokens_disk = 0;   // ... restored from the disk tier
  int32_t miss_tokens = 0;       // prompt tokens computed: prompt_tokens - hits
  int32_t completion_tokens = 0;  // generated, including a final end-of-sequence token
  // Why the full blocks after the hit were computed (cache/miss_anatomy.h),
  // when the hits came from a lookup (`looked_up`); without a cache, or with
  // prompt log-probabilities (every position computed), there is none.
  cache::LookupMisses misses;
  bool looked_up = false;
  int32_t hitTokens() const { return hit_tokens_tier0 + hit_tokens_disk; }
};

// Seconds, measured on the engine thread's clock.
struct Timing {
  double queued = 0;         // submit to admission (its cache lookup starts)
  double cache_lookup = 0;   // lookup to lease ready: waits for in-flight blocks and restores
  double cache_restore = 0;  // the part of cache_lookup spent restoring from disk
  double prefill = 0;        // lease ready to the whole prompt computed
  double first_token = 0;    // submit to the first generated token (TTFT)
  double decode = 0;         // first to last generated token
  double total = 0;          // submit to the final event
};

// Log-probabilities as the events report them: the model's distribution
// (log_softmax of the raw logits), whatever the sampling settings. Plain
// values of serving's own, so that what reads events (the OpenAI layer)
// sees no engine type; the scheduler copies the sampler's into them.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// A generated token with its log-probability and its `top_logprobs` most
// likely alternatives, most likely first (ties: lowest id first).
struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// A prompt token's log-probability given the tokens before it (the first
// prompt token has none).
struct PromptLogprob {
  int32_t token = 0;
  std::optional<float> logprob;
  std::vector<TokenLogprob> top;
};

struct StreamEvent {
  uint64_t request_id = 0;
  // Text completed since the last event: never a split UTF-8 character, never
  // text that could still turn out to be the start of a stop string. May be
  // empty while text is held back.
  std::string text;
  std::vector<int32_t> token_ids;               // generated since the last event
  std::vector<SampledToken> logprobs;           // one per token id, when requested
  std::vector<PromptLogprob> prompt_logprobs;   // first event only, when requested

  bool final = false;
  // Final event only:
  FinishReason finish_reason = FinishReason::kStop;
  Refusal refusal = Refusal::kNone;  // with kRefused
  std::string message;               // with kError, kRefused, kCancelled: why
  // kStop by an end-of-sequence or stop token id: that id, which token_ids
  // and text leave out; -1 otherwise (a stop string, a constraint's end).
  int32_t end_token = -1;
  Usage usage;
  Timing timing;
};

using EventSink = std::function<void(StreamEvent&&)>;

// A thread-safe queue of events for a consumer that may block (the CLI,
// tests). push() never blocks.
class EventQueue {
 public:
  EventSink sink() {
    return [this](StreamEvent&& e) {
      {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(e));
      }
      cv_.notify_all();
    };
  }
  StreamEvent pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !events_.empty(); });
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  template <class Rep, class Period>
  std::optional<StreamEvent> popFor(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
};

}  // namespace lg::serving

// ReplyIds: replies come back as they were generated (docs/cache.md,
// "Replies come back as they were generated").
//
// A chat reply goes back to the client as text; the next turn sends it back in
// its history, and the chat template and tokenizer turn that text into the
// canonical ids of its text, which are often not the ids the model generated
// (a model may write "re"+"ply" where the tokenizer writes "reply"). The prefix
// chain then breaks at the first reply: the blocks the scheduler published
// while generating it (PrefixLease::extend) never match again.
//
// So the gateway keeps, for a bounded time and a bounded number of bytes, the
// generated ids of each finished chat reply, keyed by a keyed hash (HMAC-SHA-256
// under a random secret this process makes at start and never writes out) of
// the team's namespace, the reply's content as the client received it and its
// tool calls' canonical form (name and arguments, in order). A team can only
// ever find its own replies, and nothing outside the process can tell from a
// key what text it was made of.
//
// When a later request's history holds an assistant message whose key is
// kept, its generated ids replace the ids the template and tokenizer made for
// it, but only where that is exactly what the model saw and wrote:
//  - the prompt ids before the message, after any earlier substitution, are
//    the very prompt the reply was generated for (its length and SHA-256 are
//    kept with the ids), so the message sits where the reply was generated,
//    after the same generation prompt ("<｜Assistant｜>" in DeepSeek V3's
//    template);
//  - the rendered ids that follow are, piece for piece, the generated ones:
//    the same added tokens (tool-call markers, the end token the model
//    emitted) at the same places, and between them runs of ordinary tokens
//    whose bytes equal the generated runs' bytes. A template that drops or
//    rewrites part of the reply (reasoning, a reformatted tool call, a
//    stripped space) fails this and the message keeps its canonical ids.
// The substituted ids encode the same text, so nothing the model reads changes
// but the tokenization it produced itself. What is not kept, and why, is
// counted: a reply that ended on a stop string (its text was trimmed), a
// structured-output reply (the grammar chose its tokens), a reply with
// reasoning (templates drop it from the history), one that did not finish.
// A reply cut by max_tokens is kept: its ids are the ones the engine computed,
// and the check above proves the history renders exactly their text (a
// character cut in half does not).
//
// Thread-safety: every method may be called from any thread (one mutex, held
// for map and list operations only; hashing happens outside it).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/metrics.h"
#include "proxy/openai/output_parser.h"
#include "proxy/openai/request_types.h"
#include "serving/events.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy {

struct ReplyIdsOptions {
  int64_t max_bytes = int64_t{64} << 20;  // what the kept ids and their keys may occupy; 0: off
  int64_t ttl_seconds = 3600;             // a reply unused this long is dropped; 0: never
};

using ReplyKey = std::array<uint8_t, 32>;
using PromptDigest = std::array<uint8_t, 32>;

// SHA-256 of token ids (little-endian int32), as the store keeps a prompt's.
PromptDigest promptDigest(std::span<const int32_t> ids);

// One tool call as the client got it and sends it back.
struct ReplyToolCall {
  std::string_view name;
  std::string_view arguments;
};

struct KeptReply {
  std::vector<int32_t> ids;      // generated, with the end token the model emitted (if it did)
  uint32_t prompt_tokens = 0;    // the prompt it was generated for
  PromptDigest prompt_digest{};  // ... and its SHA-256
};

// Why a finished reply was not kept.
enum class ReplySkip : uint8_t {
  kStopString,  // ended on a stop string (its text was trimmed) or a constraint's end
  kStructured,  // its tokens followed an output grammar
  kReasoning,   // it reasoned: templates drop reasoning from the history
  kUnfinished,  // cancelled, failed or refused
  kEmpty,       // no tokens
  kTooLarge,    // bigger than the whole budget
  kCount
};
// Why an assistant message of a request's history kept its canonical ids
// although its reply was found.
enum class ReplyReject : uint8_t {
  kPrefix,  // the ids before it are not the prompt the reply was generated for
  kText,    // the template rendered it differently from what the model wrote
  kCount
};

class ReplyIdStore {
 public:
  using Clock = std::chrono::steady_clock;
  // `now` (tests): the clock expiry reads. The HMAC secret is 32 random bytes
  // made here; `secret` (tests) replaces it.
  explicit ReplyIdStore(ReplyIdsOptions options, std::function<Clock::time_point()> now = {},
                        std::string secret = {});
  ReplyIdStore(const ReplyIdStore&) = delete;
  ReplyIdStore& operator=(const ReplyIdStore&) = delete;

  bool enabled() const { return options_.max_bytes > 0; }
  const ReplyIdsOptions& options() const { return options_; }

  // HMAC-SHA-256(secret, domain | scope | content | calls), every field
  // length-prefixed. `scope`: the team's namespace (its generation included).
  ReplyKey key(std::string_view scope, std::string_view content, std::span<const ReplyToolCall> calls) const;

  // Keeps `reply` under `key` (replacing what was there), evicting least
  // recently used replies while over the byte budget.
  void put(const ReplyKey& key, KeptReply reply);
  // The reply under `key`, unexpired (an expired one is dropped); refreshes
  // its place in the LRU list and its expiry. Null: none.
  std::shared_ptr<const KeptReply> find(const ReplyKey& key);

  // A request's prompt as encodeChat made it: each assistant message of
  // `prompt` whose reply is kept has its ids replaced in `ids` by the
  // generated ones where that is safe (above). Returns how many were.
  size_t substitute(const text::Tokenizer& tokenizer, std::string_view scope, const openai::ChatPrompt& prompt,
                    std::vector<int32_t>& ids);

  // Counts a reply that was not kept.
  void skipped(ReplySkip why) { skipped_[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed); }

  struct Stats {
    uint64_t entries = 0, bytes = 0;
    uint64_t stored = 0;     // replies kept
    uint64_t hits = 0;       // assistant messages given their generated ids
    uint64_t misses = 0;     // assistant messages whose reply was not kept (or expired, or evicted)
    uint64_t evicted = 0;    // dropped for the byte budget
    uint64_t expired = 0;    // dropped after ttl_seconds unused
    uint64_t skipped[static_cast<size_t>(ReplySkip::kCount)] = {};
    uint64_t rejected[static_cast<size_t>(ReplyReject::kCount)] = {};
  };
  Stats stats() const;
  // latentgate_reply_ids_* (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

  // What one kept reply counts against max_bytes.
  static size_t footprint(const KeptReply& reply);

 private:
  struct KeyHash {
    size_t operator()(const ReplyKey& k) const {
      size_t h;
      static_assert(sizeof h <= sizeof k);
      std::memcpy(&h, k.data(), sizeof h);
      return h;
    }
  };
  struct Slot {
    std::shared_ptr<const KeptReply> reply;
    Clock::time_point used;
    std::list<ReplyKey>::iterator lru;
  };
  void eraseLocked(std::unordered_map<ReplyKey, Slot, KeyHash>::iterator it);
  Clock::time_point now() const { return now_ ? now_() : Clock::now(); }

  const ReplyIdsOptions options_;
  const std::function<Clock::time_point()> now_;
  std::string secret_;

  mutable std::mutex mu_;
  std::unordered_map<ReplyKey, Slot, KeyHash> map_;  // guarded by mu_
  std::list<ReplyKey> lru_;                          // guarded by mu_: most recently used first
  uint64_t bytes_ = 0;                               // guarded by mu_
  uint64_t stored_ = 0, evicted_ = 0, expired_ = 0;  // guarded by mu_

  std::atomic<uint64_t> hits_{0}, misses_{0};
  std::atomic<uint64_t> skipped_[static_cast<size_t>(ReplySkip::kCount)] = {};
  std::atomic<uint64_t> rejected_[static_cast<size_t>(ReplyReject::kCount)] = {};
};

// Records one chat request's replies (its choices) into a store: fed every
// event of every choice on the engine thread, as the responder is; at a
// choice's final event it parses the reply as the responder did (the same
// output parser options), so the key is of the content and tool calls the
// client received.
class ReplyRecorder {
 public:
  ReplyRecorder(ReplyIdStore& store, std::string scope, std::span<const int32_t> prompt,
                openai::OutputParserOptions parser, size_t choices, bool structured);
  void onEvent(size_t choice, const serving::StreamEvent& event);

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> ids;
  };
  ReplyIdStore& store_;
  const std::string scope_;
  const uint32_t prompt_tokens_;
  const PromptDigest prompt_digest_;
  const openai::OutputParserOptions parser_;
  const bool structured_;
  std::vector<Choice> choices_;
};

}  // namespace lg::proxy

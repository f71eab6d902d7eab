// PrefixBreakers: which prompts break their own prefix (docs/cache.md,
// "Prefix breakers"; issue 25, point 3).
//
// An agent that writes a timestamp, a request id or a shuffled tool list near
// the top of its prompt makes every request a cache miss from that point on,
// although the rest of the prompt (the tool definitions, the conversation) is
// the same as in its previous request. The prefix cache cannot say so: its
// block keys are chained, so every block after the first difference differs.
// This detector compares each chat and Responses request of an API key with
// that key's previous request, token by token, and flags the request when
//  - the two diverge (neither is a prefix of the other: growth at the end,
//    a new turn appended to the conversation, is what the cache is for),
//  - the divergence lies in the system prompt, the tool definitions or the
//    history, not in the new input (a new question is not a breaker),
//  - the previous request's tokens there were replaced, not just preceded
//    by an insertion (text added at the end of the system prompt is growth
//    the team chose; a value that changes every request replaces the old one),
//  - and at least `min_common_tokens` of the current request's tokens after
//    the divergence are found again in the previous request (in runs of
//    kMinRunTokens or more, wherever they lie: a fixed-width timestamp keeps
//    them aligned, a longer id shifts them, a shuffled tool list reorders
//    them). Had the varying part been stable, those tokens would have been
//    cache hits: the estimated saving is their count times (miss rate - hit
//    rate) at the request's prices.
//
// Nothing of the prompt's text is kept. Each token is kept as a 32-bit keyed
// hash (SipHash-2-4 under a random key this process makes at start and never
// writes out) of the token and the kWindowTokens - 1 tokens before it, so the
// first differing hash is at the first differing token, and identical tokens
// in different contexts hash differently (no token-by-token dictionary). A
// key keeps the hashes of its last request and of the last request of up to
// kPromptsPerKey - 1 other system prompts (by fingerprint), each cut to its
// first `max_prompt_tokens` tokens. A request is compared with the last one
// of its own system prompt fingerprint when one is kept (an agent that
// shuffles its tools after a stable system prompt), else with the key's last
// request (a timestamp inside the system prompt changes the fingerprint every
// time). The key's report rows are per (key, fingerprint); a request compared
// across fingerprints is reported under the empty fingerprint ("the system
// prompt itself differs"). Memory is bounded per key (prompts, at most
// kRowsPerKey rows) and in all (`max_bytes`, the least recently seen keys
// dropped first).
//
// Snippets: the few tokens around the divergence, decoded, are the one place
// prompt text is kept, and only for a team whose consent an admin recorded
// (`snippet_retention`, proxy/gateway/snippet_consent.h): kept in memory with
// the row, dropped after the team's retention or when the consent is
// withdrawn (dropSnippets), never logged, never written to disk.
//
// Thread-safety: every method may be called from any thread. One mutex guards
// the tracked state; observe() hashes and compares outside it (the previous
// request's hashes are shared immutable vectors).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "billing/prices.h"
#include "common/metrics.h"
#include "proxy/openai/prompt_layout.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy {

// SipHash-2-4 (Aumasson and Bernstein) of one 16-byte message, the words
// m0 and m1 as its little-endian halves, under the 128-bit key (k0, k1): a
// keyed pseudo-random function, so nothing outside the process can tell
// from a hash which tokens it was made of, nor make a table of tokens'
// hashes. Written out rather than called through OpenSSL's EVP_MAC, which
// costs an allocation and a context per call, on every token of every
// request; checked against OpenSSL's in prefix_breakers_test.
uint64_t sipHash16(const std::array<uint64_t, 2>& key, uint64_t m0, uint64_t m1);

struct PrefixBreakersOptions {
  int64_t max_bytes = int64_t{32} << 20;  // every key's kept hashes, rows and snippets; 0: off
  int64_t max_prompt_tokens = 16384;      // a request's first tokens that are compared
  int64_t min_common_tokens = 256;        // tokens found again after a divergence that flag a request
};

// The tokens each kept hash covers (the token and those before it).
inline constexpr size_t kWindowTokens = 4;
// The shortest run of equal hashes counted as found again after a divergence.
inline constexpr size_t kMinRunTokens = 16;
// Prompts (the last one, and the last of other fingerprints) and report rows per key.
inline constexpr size_t kPromptsPerKey = 4;
inline constexpr size_t kRowsPerKey = 8;
// Tokens decoded either side of a divergence for a snippet.
inline constexpr size_t kSnippetTokensBefore = 4;
inline constexpr size_t kSnippetTokensAfter = 8;

// How `current` diverges from `previous` (hash sequences). Null when it does
// not: one is a prefix of the other.
struct Divergence {
  size_t at = 0;            // the first differing position
  size_t common = 0;        // tokens of `current` after it found again in `previous`
  bool replaced = false;    // tokens of `previous` at `at` were dropped, not only preceded by an insertion
};
std::optional<Divergence> findDivergence(std::span<const uint32_t> previous, std::span<const uint32_t> current);

// One flagged (key, system prompt) pair, as the admin API and the dashboard show it.
struct PrefixBreakerReport {
  std::string key_id;
  std::string team;
  std::string system_prompt;    // fingerprint; empty: compared with a request of another system prompt (or none)
  uint64_t flagged = 0;         // requests flagged
  // The last flagged request's divergence.
  int32_t message = -1;         // the message it lies in (ChatPrompt order); -1: after the last
  int32_t message_token = 0;    // tokens from the start of that message's part (its role markers included)
  int64_t token = 0;            // tokens from the start of the prompt
  openai::PromptPart part = openai::PromptPart::kNone;
  int64_t common_tokens = 0;    // tokens after it found again in the previous request
  int64_t saving_per_request = 0;  // pico-dollars: common_tokens x (miss - hit rate)
  int64_t saving_total = 0;     // pico-dollars, every flagged request
  int64_t saving_per_day = 0;   // pico-dollars: saving_total over the time observed (at least an hour), per day
  int64_t first_seen_us = 0;    // Unix microseconds
  int64_t last_seen_us = 0;
  std::optional<std::string> snippet;  // the tokens around the divergence (consenting teams only)
};

class PrefixBreakers {
 public:
  // `snippet_retention`: seconds a team's snippets are kept (its consent);
  // 0 (or null function): none kept. `clock_us` (tests): Unix microseconds.
  // `key` (tests): replaces the 16 random bytes of the hash key.
  PrefixBreakers(PrefixBreakersOptions options, const text::Tokenizer& tokenizer,
                 std::function<int64_t(std::string_view team, uint32_t generation)> snippet_retention = {},
                 std::function<int64_t()> clock_us = {}, std::string key = {});
  PrefixBreakers(const PrefixBreakers&) = delete;
  PrefixBreakers& operator=(const PrefixBreakers&) = delete;

  bool enabled() const { return options_.max_bytes > 0; }
  const PrefixBreakersOptions& options() const { return options_; }

  struct Request {
    std::string_view key_id;
    std::string_view team;
    uint32_t team_generation = 0;
    std::string_view system_prompt;  // fingerprint; empty: none
    std::span<const int32_t> ids;    // the prompt
    const openai::PromptLayout* layout = nullptr;  // its messages and parts, in tokens (required)
    billing::Rates rates;            // the request's prices
  };
  // Compares the request with the key's previous one (above), records a
  // flag, and keeps its hashes for the next. Returns whether it was flagged.
  bool observe(const Request& request);

  // The rows of `team` (empty: every team), most saving per day first.
  std::vector<PrefixBreakerReport> report(std::string_view team = {}) const;
  // Drops every snippet of `team` (its consent was withdrawn).
  void dropSnippets(std::string_view team);
  // Drops everything kept for `key_id` (revoked; a deleted team's keys are).
  void forgetKey(std::string_view key_id);

  struct Stats {
    uint64_t keys = 0, rows = 0, snippets = 0, bytes = 0;
    uint64_t observed = 0, flagged = 0, evicted_keys = 0;
  };
  Stats stats() const;
  // latentgate_prefix_breakers_* (docs/metrics.md).
  void collect(metrics::ExpositionWriter& w) const;

  // The keyed hashes of `ids` (their first max_prompt_tokens).
  std::vector<uint32_t> hashes(std::span<const int32_t> ids) const;

 private:
  using Hashes = std::shared_ptr<const std::vector<uint32_t>>;
  struct KeptPrompt {
    std::string system_prompt;
    Hashes hashes;
  };
  struct Row {
    PrefixBreakerReport report;
    int64_t snippet_expires_us = 0;
  };
  struct KeyState {
    std::string team;
    std::list<KeptPrompt> prompts;         // most recent first, at most kPromptsPerKey, fingerprints distinct
    std::map<std::string, Row> rows;       // by fingerprint, at most kRowsPerKey
    std::list<std::string>::iterator lru;  // its place in lru_
    uint64_t bytes = 0;
  };
  static uint64_t footprint(const KeyState& state);
  void recountLocked(KeyState& state);  // state.bytes and bytes_ after state changed
  void eraseLocked(std::unordered_map<std::string, KeyState>::iterator it);
  void dropExpiredSnippetsLocked(KeyState& state, int64_t now_us);
  int64_t nowUs() const;

  const PrefixBreakersOptions options_;
  const text::Tokenizer& tokenizer_;
  const std::function<int64_t(std::string_view, uint32_t)> snippet_retention_;
  const std::function<int64_t()> clock_us_;
  std::array<uint64_t, 2> key_{};

  mutable std::mutex mu_;
  std::unordered_map<std::string, KeyState> keys_;  // guarded by mu_, by key id
  std::list<std::string> lru_;                      // guarded by mu_: most recently seen key first
  uint64_t bytes_ = 0;                              // guarded by mu_
  uint64_t evicted_keys_ = 0;                       // guarded by mu_
  std::atomic<uint64_t> observed_{0}, flagged_{0};
};

}  // namespace lg::proxy

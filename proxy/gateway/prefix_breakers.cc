#include "proxy/gateway/prefix_breakers.h"

#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

#include "common/check.h"
#include "common/decimal.h"

namespace lg::proxy {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void word(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t sipHash16(const std::array<uint64_t, 2>& key, uint64_t m0, uint64_t m1) {
  SipState s{key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL, key[0] ^ 0x6c7967656e657261ULL,
             key[1] ^ 0x7465646279746573ULL};
  s.word(m0);
  s.word(m1);
  s.word(uint64_t{16} << 56);  // the length byte, no tail
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

namespace {

// A kept prompt's and a row's bookkeeping beyond their vectors and strings.
constexpr uint64_t kPromptOverhead = 96;
constexpr uint64_t kRowOverhead = sizeof(PrefixBreakerReport) + 96;
constexpr uint64_t kKeyOverhead = 192;

int64_t savingPerDay(int64_t total, int64_t first_us, int64_t last_us) {
  // Over at least an hour: two requests a second apart are not a rate.
  constexpr int64_t kMinSpanUs = int64_t{3600} * 1'000'000;
  constexpr int64_t kDayUs = int64_t{86400} * 1'000'000;
  const int64_t span = std::max(last_us - first_us, kMinSpanUs);
  return static_cast<int64_t>(static_cast<Int128>(total) * kDayUs / span);
}

}  // namespace

std::optional<Divergence> findDivergence(std::span<const uint32_t> previous, std::span<const uint32_t> current) {
  const size_t shorter = std::min(previous.size(), current.size());
  size_t at = 0;
  while (at < shorter && previous[at] == current[at]) ++at;
  if (at == shorter) return std::nullopt;  // one is a prefix of the other

  // Where the previous request's rest has each hash, at every kIndexStride-th
  // position (a run of kMinRunTokens holds at least one of them, and the
  // index costs an eighth of one over every position); the current
  // request's rest is then scanned for runs of at least kMinRunTokens equal
  // hashes, wherever they lie in the previous request (aligned, shifted by a
  // longer id, or reordered by a shuffle). Each current token counts once.
  constexpr size_t kIndexStride = 8;
  static_assert(kIndexStride * 2 <= kMinRunTokens, "every run holds an indexed position");
  std::unordered_map<uint32_t, uint32_t> first;
  first.reserve((previous.size() - at) / kIndexStride + 1);
  for (size_t i = at; i < previous.size(); i += kIndexStride) first.emplace(previous[i], static_cast<uint32_t>(i));
  Divergence d;
  d.at = at;
  bool first_run = true;
  size_t counted_to = at;  // current tokens before this are counted (or skipped) already
  size_t j = at;
  while (j < current.size()) {
    const auto it = first.find(current[j]);
    if (it == first.end()) {
      ++j;
      continue;
    }
    // The run through (i, j), extended back to where it starts.
    size_t i = it->second, start_j = j;
    while (start_j > counted_to && i > at && previous[i - 1] == current[start_j - 1]) {
      --i;
      --start_j;
    }
    size_t run = 0;
    while (i + run < previous.size() && start_j + run < current.size() && previous[i + run] == current[start_j + run]) {
      ++run;
    }
    if (run < kMinRunTokens) {
      ++j;
      continue;
    }
    if (first_run) {
      // The previous request's tokens from `at` on were only preceded by an
      // insertion when they are found again at once: hashes cover
      // kWindowTokens tokens, so the first kWindowTokens - 1 after an
      // insertion still differ.
      d.replaced = i >= at + kWindowTokens;
      first_run = false;
    }
    d.common += run;
    j = counted_to = start_j + run;
  }
  return d;
}

PrefixBreakers::PrefixBreakers(PrefixBreakersOptions options, const text::Tokenizer& tokenizer,
                               std::function<int64_t(std::string_view, uint32_t)> snippet_retention,
                               std::function<int64_t()> clock_us, std::string key)
    : options_(options),
      tokenizer_(tokenizer),
      snippet_retention_(std::move(snippet_retention)),
      clock_us_(std::move(clock_us)) {
  if (key.empty()) {
    key.resize(sizeof key_);
    LG_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) == 1,
             "RAND_bytes failed");
  }
  LG_CHECK(key.size() == sizeof key_, "prefix breakers: the hash key must be 16 bytes");
  std::memcpy(key_.data(), key.data(), sizeof key_);
}

int64_t PrefixBreakers::nowUs() const {
  if (clock_us_) return clock_us_();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<uint32_t> PrefixBreakers::hashes(std::span<const int32_t> ids) const {
  const size_t n = std::min(ids.size(), static_cast<size_t>(std::max<int64_t>(options_.max_prompt_tokens, 0)));
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    // The token and the kWindowTokens - 1 before it (-1 before the start).
    uint32_t w[kWindowTokens];
    for (size_t k = 0; k < kWindowTokens; ++k) {
      const size_t back = kWindowTokens - 1 - k;
      w[k] = i >= back ? static_cast<uint32_t>(ids[i - back]) : 0xffffffffu;
    }
    static_assert(kWindowTokens == 4, "the hash input is two 64-bit words");
    const uint64_t h = sipHash16(key_, (uint64_t{w[0]} << 32) | w[1], (uint64_t{w[2]} << 32) | w[3]);
    out[i] = static_cast<uint32_t>(h ^ (h >> 32));
  }
  return out;
}

uint64_t PrefixBreakers::footprint(const KeyState& state) {
  uint64_t bytes = kKeyOverhead + state.team.size();
  for (const KeptPrompt& p : state.prompts) {
    bytes += kPromptOverhead + p.system_prompt.size() + p.hashes->size() * sizeof(uint32_t);
  }
  for (const auto& [fingerprint, row] : state.rows) {
    bytes += kRowOverhead + 2 * fingerprint.size() + row.report.key_id.size() + row.report.team.size() +
             (row.report.snippet ? row.report.snippet->size() : 0);
  }
  return bytes;
}

void PrefixBreakers::recountLocked(KeyState& state) {
  bytes_ -= state.bytes;
  state.bytes = footprint(state);
  bytes_ += state.bytes;
}

void PrefixBreakers::eraseLocked(std::unordered_map<std::string, KeyState>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  keys_.erase(it);
}

void PrefixBreakers::dropExpiredSnippetsLocked(KeyState& state, int64_t now_us) {
  for (auto& [fingerprint, row] : state.rows) {
    if (row.report.snippet && row.snippet_expires_us <= now_us) row.report.snippet.reset();
  }
}

bool PrefixBreakers::observe(const Request& request) {
  if (!enabled() || request.layout == nullptr || request.layout->empty()) return false;
  observed_.fetch_add(1, std::memory_order_relaxed);
  auto current = std::make_shared<const std::vector<uint32_t>>(hashes(request.ids));
  const std::string key_id(request.key_id);
  const std::string fingerprint(request.system_prompt);

  // The request to compare with: the last of this fingerprint, else the key's last.
  Hashes previous;
  bool same_fingerprint = false;
  {
    std::lock_guard lock(mu_);
    const auto it = keys_.find(key_id);
    if (it != keys_.end() && !it->second.prompts.empty()) {
      const auto& prompts = it->second.prompts;
      const auto same = std::find_if(prompts.begin(), prompts.end(), [&](const KeptPrompt& p) {
        return !fingerprint.empty() && p.system_prompt == fingerprint;
      });
      same_fingerprint = same != prompts.end();
      previous = same_fingerprint ? same->hashes : prompts.front().hashes;
    }
  }

  // The comparison and the naming of its place, outside the lock.
  std::optional<Divergence> d;
  if (previous) d = findDivergence(*previous, *current);
  openai::PromptPlace place;
  int32_t message_token = 0;
  bool flag = false;
  if (d && d->replaced && d->common >= static_cast<size_t>(std::max<int64_t>(options_.min_common_tokens, 1))) {
    place = openai::placeOf(*request.layout, d->at);
    flag = place.part == openai::PromptPart::kSystem || place.part == openai::PromptPart::kTools ||
           place.part == openai::PromptPart::kHistory;
    if (flag && place.message >= 0) {
      // Counted from the first token of the message's part.
      const size_t begin = place.message == 0 ? 0 : request.layout->message_end[place.message - 1];
      message_token = static_cast<int32_t>(d->at - std::min(begin, d->at));
    }
  }
  std::optional<std::string> snippet;
  int64_t retention_s = 0;
  if (flag && snippet_retention_) retention_s = snippet_retention_(request.team, request.team_generation);
  if (flag && retention_s > 0) {
    const size_t from = d->at >= kSnippetTokensBefore ? d->at - kSnippetTokensBefore : 0;
    const size_t to = std::min(request.ids.size(), d->at + kSnippetTokensAfter);
    auto text = tokenizer_.decode(request.ids.subspan(from, to - from));
    if (text) snippet = std::move(*text);
  }

  const int64_t now = nowUs();
  std::lock_guard lock(mu_);
  auto it = keys_.find(key_id);
  if (it == keys_.end()) {
    lru_.push_front(key_id);
    it = keys_.emplace(key_id, KeyState{}).first;
    it->second.team = std::string(request.team);
    it->second.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  KeyState& state = it->second;
  dropExpiredSnippetsLocked(state, now);

  // Keep this request as the key's last, and its fingerprint's.
  auto& prompts = state.prompts;
  std::erase_if(prompts, [&](const KeptPrompt& p) { return p.system_prompt == fingerprint; });
  prompts.push_front(KeptPrompt{fingerprint, current});
  if (prompts.size() > kPromptsPerKey) prompts.pop_back();

  if (flag) {
    flagged_.fetch_add(1, std::memory_order_relaxed);
    const std::string row_key = same_fingerprint ? fingerprint : std::string();
    auto row_it = state.rows.find(row_key);
    if (row_it == state.rows.end()) {
      if (state.rows.size() >= kRowsPerKey) {
        // The row seen least recently makes room.
        auto oldest = std::min_element(state.rows.begin(), state.rows.end(), [](const auto& a, const auto& b) {
          return a.second.report.last_seen_us < b.second.report.last_seen_us;
        });
        state.rows.erase(oldest);
      }
      row_it = state.rows.emplace(row_key, Row{}).first;
      PrefixBreakerReport& r = row_it->second.report;
      r.key_id = key_id;
      r.team = state.team;
      r.system_prompt = row_key;
      r.first_seen_us = now;
    }
    Row& row = row_it->second;
    PrefixBreakerReport& r = row.report;
    ++r.flagged;
    r.message = place.message;
    r.message_token = message_token;
    r.token = static_cast<int64_t>(d->at);
    r.part = place.part;
    r.common_tokens = static_cast<int64_t>(d->common);
    const int64_t per_token = std::max<int64_t>(request.rates.input_cache_miss - request.rates.input_cache_hit, 0);
    r.saving_per_request = r.common_tokens * per_token;
    r.saving_total += r.saving_per_request;
    r.last_seen_us = now;
    r.saving_per_day = savingPerDay(r.saving_total, r.first_seen_us, r.last_seen_us);
    if (snippet) {
      r.snippet = std::move(snippet);
      row.snippet_expires_us = now + retention_s * 1'000'000;
    }
  }

  recountLocked(state);
  // The least recently seen keys go first; the key just seen last of all.
  while (bytes_ > static_cast<uint64_t>(options_.max_bytes) && !lru_.empty()) {
    eraseLocked(keys_.find(lru_.back()));
    ++evicted_keys_;
  }
  return flag;
}

std::vector<PrefixBreakerReport> PrefixBreakers::report(std::string_view team) const {
  std::vector<PrefixBreakerReport> out;
  const int64_t now = nowUs();
  {
    std::lock_guard lock(mu_);
    for (const auto& [key_id, state] : keys_) {
      if (!team.empty() && state.team != team) continue;
      for (const auto& [fingerprint, row] : state.rows) {
        out.push_back(row.report);
        // Past its retention, a snippet is not shown (and is dropped at the key's next request).
        if (out.back().snippet && row.snippet_expires_us <= now) out.back().snippet.reset();
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const PrefixBreakerReport& a, const PrefixBreakerReport& b) {
    return std::tie(b.saving_per_day, b.flagged, a.key_id, a.system_prompt) <
           std::tie(a.saving_per_day, a.flagged, b.key_id, b.system_prompt);
  });
  return out;
}

void PrefixBreakers::dropSnippets(std::string_view team) {
  std::lock_guard lock(mu_);
  for (auto& [key_id, state] : keys_) {
    if (state.team != team) continue;
    for (auto& [fingerprint, row] : state.rows) row.report.snippet.reset();
    recountLocked(state);
  }
}

void PrefixBreakers::forgetKey(std::string_view key_id) {
  std::lock_guard lock(mu_);
  const auto it = keys_.find(std::string(key_id));
  if (it != keys_.end()) eraseLocked(it);
}

PrefixBreakers::Stats PrefixBreakers::stats() const {
  Stats s;
  {
    std::lock_guard lock(mu_);
    s.keys = keys_.size();
    for (const auto& [key_id, state] : keys_) {
      s.rows += state.rows.size();
      for (const auto& [fingerprint, row] : state.rows) s.snippets += row.report.snippet ? 1 : 0;
    }
    s.bytes = bytes_;
    s.evicted_keys = evicted_keys_;
  }
  s.observed = observed_.load(std::memory_order_relaxed);
  s.flagged = flagged_.load(std::memory_order_relaxed);
  return s;
}

void PrefixBreakers::collect(metrics::ExpositionWriter& w) const {
  const Stats s = stats();
  w.counter("latentgate_prefix_breakers_observed_total",
            "Chat and Responses requests compared with their key's previous request (cache.prefix_breakers_*).",
            s.observed);
  w.counter("latentgate_prefix_breakers_flagged_total",
            "Requests that diverged from their key's previous request early (system prompt, tools or history) "
            "although much of the rest was the same: a timestamp, an id or a shuffle breaking the prefix.",
            s.flagged);
  w.gauge("latentgate_prefix_breakers_keys", "API keys whose last requests' token hashes are kept.", s.keys);
  w.gauge("latentgate_prefix_breakers_rows", "Flagged (key, system prompt) pairs kept for the report.", s.rows);
  w.gauge("latentgate_prefix_breakers_snippets",
          "Snippets of prompt text around a divergence kept, for teams that consented.", s.snippets);
  w.gauge("latentgate_prefix_breakers_bytes",
          "Bytes the kept hashes, rows and snippets occupy, against cache.prefix_breakers_max_bytes.", s.bytes);
  w.counter("latentgate_prefix_breakers_evicted_keys_total",
            "Keys dropped, least recently seen first, to stay within cache.prefix_breakers_max_bytes.",
            s.evicted_keys);
}

}  // namespace lg::proxy

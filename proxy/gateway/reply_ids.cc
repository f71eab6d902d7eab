#include "proxy/gateway/reply_ids.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/check.h"

namespace lg::proxy {
namespace {

static_assert(std::endian::native == std::endian::little, "token ids are hashed as little-endian int32");

constexpr std::string_view kDomain = "latentgate reply ids v1";

void appendField(std::string& out, std::string_view field) {
  const uint64_t n = field.size();
  char len[8];
  std::memcpy(len, &n, sizeof len);
  out.append(len, sizeof len);
  out.append(field);
}

// Incremental SHA-256 of token ids, with the digest of what was fed so far.
class IdHasher {
 public:
  IdHasher() : ctx_(EVP_MD_CTX_new()) {
    LG_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1, "SHA-256 failed");
  }
  ~IdHasher() { EVP_MD_CTX_free(ctx_); }
  IdHasher(const IdHasher&) = delete;
  IdHasher& operator=(const IdHasher&) = delete;
  void feed(std::span<const int32_t> ids) {
    if (ids.empty()) return;
    LG_CHECK(EVP_DigestUpdate(ctx_, ids.data(), ids.size() * sizeof(int32_t)) == 1, "SHA-256 failed");
  }
  PromptDigest digest() const {
    EVP_MD_CTX* copy = EVP_MD_CTX_new();
    PromptDigest out{};
    unsigned int len = 0;
    const bool ok = copy != nullptr && EVP_MD_CTX_copy_ex(copy, ctx_) == 1 &&
                    EVP_DigestFinal_ex(copy, out.data(), &len) == 1 && len == out.size();
    EVP_MD_CTX_free(copy);
    LG_CHECK(ok, "SHA-256 failed");
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// An added token (a special token, a tool-call marker): the template writes
// them, and the tokenizer never merges them with the text around them.
bool isAdded(const text::Tokenizer& tokenizer, int32_t id) {
  const std::string bytes = tokenizer.tokenBytes(id);
  if (bytes.empty()) return false;
  const std::optional<int32_t> added = tokenizer.addedTokenId(bytes);
  return added && *added == id;
}

// Whether the rendered ids from `at` are the generated ones rendered back:
// every added token the template wrote (a tool-call marker, the end token) is
// the same added token the model generated, at the same place, and the
// ordinary tokens between two of them have the bytes the generated tokens
// between the same two decode to (decode's U+FFFD for bytes that are not
// UTF-8, as the client got them; an added token the model wrote inside its
// text, which the client got as text and the template renders as text,
// counts as its text). `consumed`: how many rendered ids that covers.
bool rendersAsGenerated(const text::Tokenizer& tokenizer, std::span<const int32_t> generated,
                        std::span<const int32_t> rendered, size_t at, size_t& consumed) {
  // The rendered run of ordinary tokens from `p`: its end and its bytes.
  size_t run_from = SIZE_MAX, run_end = 0;
  std::string run_bytes;
  auto runAt = [&](size_t p) {
    if (run_from == p) return;
    run_from = p;
    run_bytes.clear();
    run_end = p;
    while (run_end < rendered.size() && !isAdded(tokenizer, rendered[run_end])) {
      run_bytes += tokenizer.tokenBytes(rendered[run_end++]);
    }
  };
  // Whether the generated ids [from, to) decode to the run's bytes.
  auto sameText = [&](size_t from, size_t to) {
    Result<std::string> text = tokenizer.decode(generated.subspan(from, to - from));
    return text.isOk() && *text == run_bytes;
  };
  size_t p = at, since = 0;  // generated[since, g) are text not yet matched
  for (size_t g = 0; g < generated.size(); ++g) {
    if (!isAdded(tokenizer, generated[g])) continue;
    runAt(p);
    if (run_end < rendered.size() && rendered[run_end] == generated[g] && sameText(since, g)) {
      p = run_end + 1;
      since = g + 1;
    }
  }
  if (generated.empty()) return false;
  if (since == generated.size()) {  // it ended with an added token the template wrote too
    consumed = p - at;
    return true;
  }
  runAt(p);  // text to the end (cut by max_tokens): the whole rendered run, up to what the template adds
  if (!sameText(since, generated.size())) return false;
  consumed = run_end - at;
  return true;
}

std::string randomSecret() {
  std::string key(32, '\0');
  LG_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) == 1,
           "RAND_bytes failed");
  return key;
}

}  // namespace

PromptDigest promptDigest(std::span<const int32_t> ids) {
  IdHasher h;
  h.feed(ids);
  return h.digest();
}

ReplyIdStore::ReplyIdStore(ReplyIdsOptions options, std::function<Clock::time_point()> now, std::string secret)
    : options_(options), now_(std::move(now)), secret_(secret.empty() ? randomSecret() : std::move(secret)) {}

ReplyKey ReplyIdStore::key(std::string_view scope, std::string_view content,
                           std::span<const ReplyToolCall> calls) const {
  std::string msg;
  msg.reserve(kDomain.size() + scope.size() + content.size() + 64);
  appendField(msg, kDomain);
  appendField(msg, scope);
  appendField(msg, content);
  appendField(msg, std::to_string(calls.size()));
  for (const ReplyToolCall& c : calls) {
    appendField(msg, c.name);
    appendField(msg, c.arguments);
  }
  ReplyKey out{};
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  LG_CHECK(ok != nullptr && len == out.size(), "HMAC-SHA-256 failed");
  return out;
}

size_t ReplyIdStore::footprint(const KeptReply& reply) {
  // The ids, the key (in the map and the LRU list) and the bookkeeping around them.
  return reply.ids.size() * sizeof(int32_t) + sizeof(KeptReply) + 2 * sizeof(ReplyKey) + sizeof(Slot) + 64;
}

void ReplyIdStore::eraseLocked(std::unordered_map<ReplyKey, Slot, KeyHash>::iterator it) {
  bytes_ -= footprint(*it->second.reply);
  lru_.erase(it->second.lru);
  map_.erase(it);
}

void ReplyIdStore::put(const ReplyKey& key, KeptReply reply) {
  if (!enabled()) return;
  const size_t size = footprint(reply);
  if (size > static_cast<uint64_t>(options_.max_bytes)) return skipped(ReplySkip::kTooLarge);
  auto kept = std::make_shared<const KeptReply>(std::move(reply));
  const Clock::time_point t = now();
  std::lock_guard lock(mu_);
  if (auto it = map_.find(key); it != map_.end()) eraseLocked(it);
  lru_.push_front(key);
  map_.emplace(key, Slot{std::move(kept), t, lru_.begin()});
  bytes_ += size;
  ++stored_;
  const auto ttl = std::chrono::seconds(options_.ttl_seconds);
  // The least recently used are the oldest: expired ones go first, then
  // whatever the budget needs.
  while (!lru_.empty()) {
    auto it = map_.find(lru_.back());
    LG_CHECK(it != map_.end(), "reply ids: the LRU list names a reply that is not kept");
    if (options_.ttl_seconds > 0 && t - it->second.used >= ttl) {
      ++expired_;
    } else if (bytes_ > static_cast<uint64_t>(options_.max_bytes)) {
      ++evicted_;
    } else {
      break;
    }
    eraseLocked(it);
  }
}

std::shared_ptr<const KeptReply> ReplyIdStore::find(const ReplyKey& key) {
  if (!enabled()) return nullptr;
  const Clock::time_point t = now();
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  if (options_.ttl_seconds > 0 && t - it->second.used >= std::chrono::seconds(options_.ttl_seconds)) {
    ++expired_;
    eraseLocked(it);
    return nullptr;
  }
  it->second.used = t;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.reply;
}

size_t ReplyIdStore::substitute(const text::Tokenizer& tokenizer, std::string_view scope,
                                const openai::ChatPrompt& prompt, std::vector<int32_t>& ids) {
  if (!enabled()) return 0;
  std::vector<int32_t> out;
  std::optional<IdHasher> hasher;  // of `out`, made at the first kept reply
  size_t in = 0;                   // ids[0, in) are in `out`
  size_t done = 0;
  std::vector<ReplyToolCall> calls;
  for (const openai::ChatMessage& m : prompt.messages) {
    if (m.role != openai::Role::kAssistant) continue;
    calls.clear();
    for (const openai::ToolCall& c : m.tool_calls) calls.push_back({c.name, c.arguments});
    std::shared_ptr<const KeptReply> kept = find(key(scope, m.content ? std::string_view(*m.content) : "", calls));
    if (kept == nullptr) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!hasher) {
      hasher.emplace();
      out.reserve(ids.size() + 64);
    }
    // The ids before the message must be the prompt the reply was generated for.
    const size_t want = kept->prompt_tokens;
    if (want < out.size() || want - out.size() > ids.size() - in) {
      rejected_[static_cast<size_t>(ReplyReject::kPrefix)].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const std::span<const int32_t> more(ids.data() + in, want - out.size());
    out.insert(out.end(), more.begin(), more.end());
    hasher->feed(more);
    in += more.size();
    if (hasher->digest() != kept->prompt_digest) {
      rejected_[static_cast<size_t>(ReplyReject::kPrefix)].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    size_t consumed = 0;
    if (!rendersAsGenerated(tokenizer, kept->ids, ids, in, consumed)) {
      rejected_[static_cast<size_t>(ReplyReject::kText)].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    out.insert(out.end(), kept->ids.begin(), kept->ids.end());
    hasher->feed(kept->ids);
    in += consumed;
    ++done;
    hits_.fetch_add(1, std::memory_order_relaxed);
  }
  if (done == 0) return 0;
  out.insert(out.end(), ids.begin() + static_cast<ptrdiff_t>(in), ids.end());
  ids = std::move(out);
  return done;
}

ReplyIdStore::Stats ReplyIdStore::stats() const {
  Stats s;
  {
    std::lock_guard lock(mu_);
    s.entries = map_.size();
    s.bytes = bytes_;
    s.stored = stored_;
    s.evicted = evicted_;
    s.expired = expired_;
  }
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < static_cast<size_t>(ReplySkip::kCount); ++i) s.skipped[i] = skipped_[i].load();
  for (size_t i = 0; i < static_cast<size_t>(ReplyReject::kCount); ++i) s.rejected[i] = rejected_[i].load();
  return s;
}

void ReplyIdStore::collect(metrics::ExpositionWriter& w) const {
  using metrics::MetricType;
  const Stats s = stats();
  w.gauge("latentgate_reply_ids_entries", "Chat replies whose generated token ids are kept (cache.reply_ids_*).",
          s.entries);
  w.gauge("latentgate_reply_ids_bytes", "Bytes the kept replies' ids occupy, against cache.reply_ids_max_bytes.",
          s.bytes);
  w.counter("latentgate_reply_ids_stored_total", "Chat replies whose generated ids were kept.", s.stored);
  w.counter("latentgate_reply_ids_hits_total",
            "Assistant messages of a request's history given the ids the model generated for them.", s.hits);
  w.counter("latentgate_reply_ids_misses_total",
            "Assistant messages of a request's history whose reply was not kept (never, expired or evicted).",
            s.misses);
  if (w.family("latentgate_reply_ids_evictions_total",
               "Kept replies dropped: for the byte budget, or unused for cache.reply_ids_ttl_seconds.",
               MetricType::kCounter)) {
    w.sample({{"cause", "bytes"}}, s.evicted);
    w.sample({{"cause", "expired"}}, s.expired);
  }
  if (w.family("latentgate_reply_ids_skipped_total", "Finished chat replies not kept, by why.",
               MetricType::kCounter)) {
    static constexpr const char* kNames[] = {"stop_string", "structured", "reasoning", "unfinished", "empty",
                                             "too_large"};
    static_assert(std::size(kNames) == static_cast<size_t>(ReplySkip::kCount));
    for (size_t i = 0; i < std::size(kNames); ++i) w.sample({{"reason", kNames[i]}}, s.skipped[i]);
  }
  if (w.family("latentgate_reply_ids_rejected_total",
               "Kept replies found for a history's assistant message but not substituted, by why: the ids before "
               "it differ from the prompt it was generated for (prefix), or it renders differently (text).",
               MetricType::kCounter)) {
    w.sample({{"reason", "prefix"}}, s.rejected[static_cast<size_t>(ReplyReject::kPrefix)]);
    w.sample({{"reason", "text"}}, s.rejected[static_cast<size_t>(ReplyReject::kText)]);
  }
}

ReplyRecorder::ReplyRecorder(ReplyIdStore& store, std::string scope, std::span<const int32_t> prompt,
                             openai::OutputParserOptions parser, size_t choices, bool structured)
    : store_(store),
      scope_(std::move(scope)),
      prompt_tokens_(static_cast<uint32_t>(prompt.size())),
      prompt_digest_(promptDigest(prompt)),
      parser_(parser),
      structured_(structured),
      choices_(choices) {}

void ReplyRecorder::onEvent(size_t choice, const serving::StreamEvent& e) {
  if (choice >= choices_.size()) return;
  Choice& c = choices_[choice];
  c.text += e.text;
  c.ids.insert(c.ids.end(), e.token_ids.begin(), e.token_ids.end());
  if (!e.final) return;
  const Choice done = std::move(c);
  c = {};
  if (e.finish_reason != serving::FinishReason::kStop && e.finish_reason != serving::FinishReason::kLength) {
    return store_.skipped(ReplySkip::kUnfinished);
  }
  if (structured_) return store_.skipped(ReplySkip::kStructured);
  // Ended by kStop without an end token: a stop string (trimmed from the
  // text) or the end of a constraint.
  if (e.finish_reason == serving::FinishReason::kStop && e.end_token < 0) return store_.skipped(ReplySkip::kStopString);
  if (done.ids.empty() && e.end_token < 0) return store_.skipped(ReplySkip::kEmpty);
  // The reply as the client got it: the responder's parser over the same text.
  openai::DeepSeekOutputParser parser(parser_);
  std::vector<openai::OutputPiece> pieces;
  parser.push(done.text, pieces);
  parser.finish(pieces);
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
  for (const openai::OutputPiece& p : pieces) {
    switch (p.kind) {
      case openai::OutputPiece::Kind::kReasoning:
        return store_.skipped(ReplySkip::kReasoning);
      case openai::OutputPiece::Kind::kContent:
        content += p.text;
        break;
      case openai::OutputPiece::Kind::kToolCallBegin:
        calls.emplace_back(p.name, "");
        break;
      case openai::OutputPiece::Kind::kToolCallArguments:
        if (p.tool_index >= 0 && static_cast<size_t>(p.tool_index) < calls.size()) calls[p.tool_index].second += p.text;
        break;
      case openai::OutputPiece::Kind::kToolCallEnd:
        break;
    }
  }
  std::vector<ReplyToolCall> views;
  for (const auto& [name, args] : calls) views.push_back({name, args});
  KeptReply kept;
  kept.ids = done.ids;
  if (e.end_token >= 0) kept.ids.push_back(e.end_token);
  kept.prompt_tokens = prompt_tokens_;
  kept.prompt_digest = prompt_digest_;
  store_.put(store_.key(scope_, content, views), std::move(kept));
}

}  // namespace lg::proxy

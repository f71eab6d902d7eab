// Prefix breakers (proxy/gateway/prefix_breakers.h) over the real DeepSeek-V3
// tokenizer and chat template: a timestamp in the system prompt's first line
// is flagged there, at the first token that differs; a shuffled tool list in
// the tools part, under its stable system prompt; a prompt that grows at its
// end (a new turn, or text added at the end of the system prompt) and a new
// question are not; the memory bound holds under many keys; snippets only
// with a team's consent, and only for its retention; the consent itself.
// tests/integration/prefix_breakers_test.cc runs it through the real server.
#include "proxy/gateway/prefix_breakers.h"

#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "billing/control_plane.h"
#include "proxy/gateway/snippet_consent.h"
#include "proxy/openai/prompt_encoder.h"
#include "tests/proxy/gateway/deepseek_v3_text.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using openai::PromptPart;

using v3::encoder;
using v3::tokenizer;

openai::ChatMessage msg(openai::Role role, std::string content) {
  openai::ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

// Distinct sentences, `n` of them (about 12 tokens each).
std::string rules(int n, std::string_view topic) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "Rule " + std::to_string(i) + " about " + std::string(topic) + ": check item " + std::to_string(i * 7) +
           " twice before answering.\n";
  }
  return out;
}

const std::string kInstructions = "You are a careful operations agent.\n" + rules(30, "operations");
const std::string kDocument = rules(30, "the incident report");

// system, a long user document, the assistant's answer, a new question.
openai::ChatPrompt conversation(std::string system, std::string question = "What should we do next?") {
  openai::ChatPrompt p;
  p.messages.push_back(msg(openai::Role::kSystem, std::move(system)));
  p.messages.push_back(msg(openai::Role::kUser, "Here is the report:\n" + kDocument));
  p.messages.push_back(msg(openai::Role::kAssistant, "I read the report; the database failed over twice."));
  p.messages.push_back(msg(openai::Role::kUser, std::move(question)));
  return p;
}

struct Encoded {
  std::vector<int32_t> ids;
  openai::PromptLayout layout;
};

Encoded encode(const openai::ChatPrompt& p) {
  auto r = encoder().encodeChat(p, "messages");
  EXPECT_TRUE(static_cast<bool>(r));
  // In tokens, as the gateway's plans carry it.
  static const openai::TokenLengths lengths(tokenizer());
  return {r->ids, openai::inTokens(r->layout, lengths, r->ids)};
}

size_t firstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

struct Fixture {
  int64_t now_us = int64_t{1'780'000'000} * 1'000'000;
  int64_t retention_s = 0;  // the team's consent; 0: none
  PrefixBreakers breakers;
  explicit Fixture(PrefixBreakersOptions options = {})
      : breakers(options, tokenizer(), [this](std::string_view, uint32_t) { return retention_s; },
                 [this] { return now_us; }) {}

  bool observe(const Encoded& e, std::string_view key = "key-a", std::string_view fingerprint = "",
               std::string_view team = "team-a") {
    PrefixBreakers::Request r;
    r.key_id = key;
    r.team = team;
    r.system_prompt = fingerprint;
    r.ids = e.ids;
    r.layout = &e.layout;
    r.rates = billing::kDeepSeekRates;
    return breakers.observe(r);
  }
};

std::string stamped(int second) {
  char line[64];
  std::snprintf(line, sizeof line, "Current time: 2026-12-03T07:41:%02dZ\n", second);
  return line + kInstructions;
}

TEST(PrefixBreakersTest, ATimestampInTheSystemPromptsFirstLineIsFlaggedAtThatLine) {
  Fixture f;
  const Encoded first = encode(conversation(stamped(5)));
  const Encoded second = encode(conversation(stamped(6)));
  const size_t differs = firstDifference(first.ids, second.ids);
  // The first line ends where its "\n" is: the divergence must lie before it.
  const std::string before = *tokenizer().decode(std::span(second.ids).first(differs));
  ASSERT_EQ(before.find('\n'), std::string::npos) << before;

  EXPECT_FALSE(f.observe(first)) << "a first request has nothing to diverge from";
  // A timestamp changes the fingerprint every request: compared with the key's last request.
  f.now_us += 1'000'000;
  EXPECT_TRUE(f.observe(second, "key-a", "fingerprint-6"));
  const std::vector<PrefixBreakerReport> rows = f.breakers.report("team-a");
  ASSERT_EQ(rows.size(), 1u);
  const PrefixBreakerReport& r = rows[0];
  EXPECT_EQ(r.key_id, "key-a");
  EXPECT_EQ(r.system_prompt, "") << "compared across fingerprints";
  EXPECT_EQ(r.flagged, 1u);
  EXPECT_EQ(r.message, 0);
  EXPECT_EQ(r.part, PromptPart::kSystem);
  EXPECT_EQ(r.token, static_cast<int64_t>(differs));
  EXPECT_EQ(r.message_token, static_cast<int32_t>(differs)) << "message 0 starts at the prompt's first token";
  // Everything after the seconds is the same: nearly the whole rest of the prompt.
  EXPECT_GT(r.common_tokens, static_cast<int64_t>(second.ids.size() - differs) - 16);
  EXPECT_LE(r.common_tokens, static_cast<int64_t>(second.ids.size() - differs));
  const int64_t per_token = billing::kDeepSeekRates.input_cache_miss - billing::kDeepSeekRates.input_cache_hit;
  EXPECT_EQ(r.saving_per_request, r.common_tokens * per_token);
  EXPECT_EQ(r.saving_total, r.saving_per_request);
  // One request in (at least) an hour: 24 a day.
  EXPECT_EQ(r.saving_per_day, 24 * r.saving_total);
  EXPECT_FALSE(r.snippet.has_value()) << "no consent, no text";

  f.now_us += 1'000'000;
  EXPECT_TRUE(f.observe(encode(conversation(stamped(7))), "key-a", "fingerprint-7"));
  EXPECT_EQ(f.breakers.report()[0].flagged, 2u);
  EXPECT_EQ(f.breakers.stats().flagged, 2u);
  EXPECT_EQ(f.breakers.stats().observed, 3u);
}

TEST(PrefixBreakersTest, APromptThatOnlyGrowsAtItsEndIsNotFlagged) {
  Fixture f;
  // A new turn appended to the conversation: the previous request is a prefix.
  openai::ChatPrompt p = conversation(kInstructions);
  EXPECT_FALSE(f.observe(encode(p), "key-a", "fp"));
  p.messages.push_back(msg(openai::Role::kAssistant, "Restart the replica, then check the lag."));
  p.messages.push_back(msg(openai::Role::kUser, "Done. And now?"));
  EXPECT_FALSE(f.observe(encode(p), "key-a", "fp"));

  // The system prompt grows at its end (notes appended), the rest unchanged:
  // growth the team chose, not a value that changes every request.
  std::string system = kInstructions;
  Encoded before = encode(conversation(system));
  EXPECT_FALSE(f.observe(before, "key-b"));
  for (int i = 0; i < 3; ++i) {
    system += "Note " + std::to_string(i) + ": the on-call engineer this week is on the second floor.\n";
    const Encoded after = encode(conversation(system));
    ASSERT_LT(firstDifference(before.ids, after.ids), before.ids.size()) << "the prompts diverge";
    EXPECT_FALSE(f.observe(after, "key-b"));
    before = after;
  }
  EXPECT_TRUE(f.breakers.report().empty());
  EXPECT_EQ(f.breakers.stats().flagged, 0u);
}

TEST(PrefixBreakersTest, ANewQuestionIsNotFlagged) {
  Fixture f;
  // The same long document asked about twice, the question changed: the
  // divergence lies in the new input.
  openai::ChatPrompt p;
  p.messages.push_back(msg(openai::Role::kSystem, kInstructions));
  p.messages.push_back(msg(openai::Role::kUser, "Question one. " + kDocument));
  EXPECT_FALSE(f.observe(encode(p), "key-a", "fp"));
  p.messages[1] = msg(openai::Role::kUser, "Question two. " + kDocument);
  EXPECT_FALSE(f.observe(encode(p), "key-a", "fp"));
  EXPECT_TRUE(f.breakers.report().empty());
}

openai::FunctionTool tool(const std::string& name) {
  openai::FunctionTool t;
  t.name = name;
  t.description = "Looks up " + name + " in the inventory. " + rules(6, name);
  t.parameters = nlohmann::json{{"type", "object"},
                                {"properties", {{"id", {{"type", "string"}, {"description", "the item's id"}}}}}};
  return t;
}

TEST(PrefixBreakersTest, AShuffledToolListIsFlaggedInTheToolsPartUnderItsStableSystemPrompt) {
  Fixture f;
  openai::ChatPrompt p = conversation(kInstructions);
  p.tools = {tool("hosts"), tool("disks"), tool("networks"), tool("queues")};
  const Encoded first = encode(p);
  ASSERT_LT(first.layout.tools_begin, first.layout.tools_end) << "the encoder writes the tools";
  std::swap(p.tools[0], p.tools[1]);
  const Encoded second = encode(p);

  // Another agent (system prompt and conversation) on the same key in
  // between: each system prompt is compared with its own last request.
  openai::ChatPrompt other;
  other.messages.push_back(msg(openai::Role::kSystem, "You are a billing agent.\n" + rules(20, "invoices")));
  other.messages.push_back(msg(openai::Role::kUser, rules(20, "the customer's letter")));
  EXPECT_FALSE(f.observe(first, "key-a", "fp-agent"));
  EXPECT_FALSE(f.observe(encode(other), "key-a", "fp-other"));
  EXPECT_TRUE(f.observe(second, "key-a", "fp-agent"));
  const std::vector<PrefixBreakerReport> rows = f.breakers.report();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].system_prompt, "fp-agent");
  EXPECT_EQ(rows[0].part, PromptPart::kTools);
  EXPECT_EQ(rows[0].message, 0) << "the tools are written into the system message";
  EXPECT_EQ(rows[0].token, static_cast<int64_t>(firstDifference(first.ids, second.ids)));
  // The reordered tools are found again too, not only what follows them.
  const int64_t after_tools = static_cast<int64_t>(second.ids.size()) - rows[0].token;
  EXPECT_GT(rows[0].common_tokens, after_tools * 9 / 10);
}

TEST(PrefixBreakersTest, SnippetsOnlyWithTheTeamsConsentAndOnlyForItsRetention) {
  Fixture f;
  f.retention_s = 60;
  f.observe(encode(conversation(stamped(5))));
  ASSERT_TRUE(f.observe(encode(conversation(stamped(6)))));
  auto rows = f.breakers.report();
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].snippet.has_value());
  EXPECT_NE(rows[0].snippet->find("07:41:"), std::string::npos) << *rows[0].snippet;
  EXPECT_EQ(f.breakers.stats().snippets, 1u);

  f.now_us += 61'000'000;
  EXPECT_FALSE(f.breakers.report()[0].snippet.has_value()) << "past its retention";

  ASSERT_TRUE(f.observe(encode(conversation(stamped(7)))));
  ASSERT_TRUE(f.breakers.report()[0].snippet.has_value());
  f.breakers.dropSnippets("team-a");
  EXPECT_FALSE(f.breakers.report()[0].snippet.has_value()) << "consent withdrawn";
  EXPECT_EQ(f.breakers.stats().snippets, 0u);
}

TEST(PrefixBreakersTest, TheMemoryBoundHoldsUnderManyKeys) {
  PrefixBreakersOptions o;
  o.max_bytes = 256 << 10;
  o.max_prompt_tokens = 2048;
  Fixture f(o);
  const Encoded a = encode(conversation(stamped(1)));
  const Encoded b = encode(conversation(stamped(2)));
  ASSERT_GT(a.ids.size(), 900u);
  for (int k = 0; k < 500; ++k) {
    const std::string key = "key-" + std::to_string(k);
    f.observe(a, key);
    f.observe(b, key);  // flagged: a row too
    ASSERT_LE(f.breakers.stats().bytes, static_cast<uint64_t>(o.max_bytes));
  }
  const PrefixBreakers::Stats s = f.breakers.stats();
  EXPECT_EQ(s.flagged, 500u);
  EXPECT_LT(s.keys, 100u);
  EXPECT_GT(s.keys, 10u);
  EXPECT_EQ(s.keys + s.evicted_keys, 500u);
  // The most recent keys are the ones kept.
  const auto rows = f.breakers.report();
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.key_id == "key-499"; }));
  EXPECT_FALSE(std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.key_id == "key-0"; }));

  for (int k = 0; k < 500; ++k) f.breakers.forgetKey("key-" + std::to_string(k));
  EXPECT_EQ(f.breakers.stats().keys, 0u);
  EXPECT_EQ(f.breakers.stats().bytes, 0u);
}

TEST(PrefixBreakersTest, AKeyKeepsOnePromptPerSystemPromptAndTheLastOneCutToMaxPromptTokens) {
  PrefixBreakersOptions o;
  o.max_prompt_tokens = 512;
  Fixture f(o);
  const Encoded e = encode(conversation(kInstructions));
  ASSERT_GT(e.ids.size(), 512u);
  for (int i = 0; i < 10; ++i) f.observe(e, "key-a", "");  // no system prompt fingerprint
  const uint64_t one = f.breakers.stats().bytes;
  EXPECT_GE(one, 512u * 4);
  EXPECT_LT(one, 2u * 512 * 4) << "one prompt of the empty fingerprint, not ten";
  f.observe(e, "key-a", "fp-1");
  f.observe(e, "key-a", "fp-2");
  f.observe(e, "key-a", "fp-3");
  f.observe(e, "key-a", "fp-4");
  EXPECT_LT(f.breakers.stats().bytes, static_cast<uint64_t>(kPromptsPerKey + 1) * 512 * 4) << "at most four prompts";
  EXPECT_EQ(f.breakers.hashes(e.ids).size(), 512u);
}

TEST(PrefixBreakersTest, FindDivergenceSeparatesReplacementFromInsertion) {
  std::vector<uint32_t> base(400);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint32_t>(1000 + i);
  EXPECT_FALSE(findDivergence(base, base).has_value());
  std::vector<uint32_t> grown = base;
  grown.push_back(7);
  EXPECT_FALSE(findDivergence(base, grown).has_value()) << "growth at the end";

  // Hashes cover four tokens: one replaced token changes four hashes.
  std::vector<uint32_t> replaced = base;
  for (size_t i = 10; i < 14; ++i) replaced[i] = 5;
  auto d = findDivergence(base, replaced);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->at, 10u);
  EXPECT_TRUE(d->replaced);
  EXPECT_EQ(d->common, base.size() - 14);

  // One token inserted at 10: three hashes after it still differ.
  std::vector<uint32_t> inserted(base.begin(), base.begin() + 10);
  inserted.insert(inserted.end(), {5, 6, 7, 8});
  inserted.insert(inserted.end(), base.begin() + 13, base.end());
  d = findDivergence(base, inserted);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->at, 10u);
  EXPECT_FALSE(d->replaced);
  EXPECT_EQ(d->common, base.size() - 13);

  // An id of another length: two tokens replaced by five, the rest shifted
  // by three and found again all the same.
  std::vector<uint32_t> shifted(base.begin(), base.begin() + 10);
  shifted.insert(shifted.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  shifted.insert(shifted.end(), base.begin() + 15, base.end());
  d = findDivergence(base, shifted);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->at, 10u);
  EXPECT_TRUE(d->replaced);
  EXPECT_EQ(d->common, base.size() - 15);

  // Two halves swapped: both found again.
  std::vector<uint32_t> swapped(base.begin(), base.begin() + 10);
  swapped.insert(swapped.end(), base.begin() + 200, base.end());
  swapped.insert(swapped.end(), base.begin() + 10, base.begin() + 200);
  d = findDivergence(base, swapped);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->at, 10u);
  EXPECT_TRUE(d->replaced);
  EXPECT_EQ(d->common, base.size() - 10);
}

// The consent is a control record: kept across a restart, for the team's
// generation only, and its withdrawal is observed where it is applied.
TEST(SnippetConsentsTest, AConsentOutlivesARestartBelongsToOneGenerationAndItsWithdrawalIsObserved) {
  test::TempDir dir;
  SnippetConsent consent{"team-a", 2, "Ada, team lead (OPS-42)", 1'780'000'000'000'000, 3600};
  {
    auto db = billing::BillingDb::open(dir.file("billing"));
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    billing::LocalControlPlane control(**db);
    auto consents = SnippetConsents::open(**db, control);
    ASSERT_TRUE(consents.isOk()) << consents.status().toString();
    EXPECT_EQ((*consents)->retentionFor("team-a", 2), 0);
    ASSERT_TRUE((*consents)->grant(consent).isOk());
    EXPECT_EQ((*consents)->retentionFor("team-a", 2), 3600);
    EXPECT_EQ((*consents)->retentionFor("team-a", 3), 0) << "the id reused after a deletion starts without one";
    EXPECT_EQ((*consents)->retentionFor("team-b", 2), 0);
  }
  auto db = billing::BillingDb::open(dir.file("billing"));
  ASSERT_TRUE(db.isOk()) << db.status().toString();
  billing::LocalControlPlane control(**db);
  auto consents = SnippetConsents::open(**db, control);
  ASSERT_TRUE(consents.isOk()) << consents.status().toString();
  ASSERT_EQ((*consents)->find("team-a"), consent) << "kept across a restart";
  std::vector<std::string> withdrawn;
  (*consents)->onWithdrawn([&](const std::string& team) { withdrawn.push_back(team); });
  auto w = (*consents)->withdraw("team-a");
  ASSERT_TRUE(w.isOk());
  EXPECT_TRUE(*w);
  EXPECT_EQ(withdrawn, std::vector<std::string>{"team-a"});
  EXPECT_FALSE((*consents)->find("team-a").has_value());
  w = (*consents)->withdraw("team-a");
  ASSERT_TRUE(w.isOk());
  EXPECT_FALSE(*w) << "nothing left to withdraw";
}

// The hand-written SipHash-2-4 equals OpenSSL's (EVP_MAC "SIPHASH", 8-byte
// output) on keys and messages of every kind, the message being the two
// words' little-endian bytes and the key likewise.
TEST(PrefixBreakersHashTest, SipHashEqualsOpenSsls) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  ASSERT_NE(mac, nullptr);
  const auto littleEndian = [](uint64_t v, unsigned char* out) {
    for (int b = 0; b < 8; ++b) out[b] = static_cast<unsigned char>(v >> (8 * b));
  };
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int i = 0; i < 200; ++i) {
    const std::array<uint64_t, 2> key = {i == 0 ? 0 : next(), i == 0 ? 0 : next()};
    const uint64_t m0 = i == 1 ? 0 : next(), m1 = i == 1 ? ~uint64_t{0} : next();
    unsigned char key_bytes[16], message[16], out[8];
    littleEndian(key[0], key_bytes);
    littleEndian(key[1], key_bytes + 8);
    littleEndian(m0, message);
    littleEndian(m1, message + 8);
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
    ASSERT_NE(ctx, nullptr);
    unsigned int size = 8;
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};
    size_t written = 0;
    ASSERT_EQ(EVP_MAC_init(ctx, key_bytes, sizeof key_bytes, params), 1);
    ASSERT_EQ(EVP_MAC_update(ctx, message, sizeof message), 1);
    ASSERT_EQ(EVP_MAC_final(ctx, out, &written, sizeof out), 1);
    EVP_MAC_CTX_free(ctx);
    ASSERT_EQ(written, 8u);
    uint64_t want = 0;
    for (int b = 7; b >= 0; --b) want = (want << 8) | out[b];
    EXPECT_EQ(sipHash16(key, m0, m1), want) << i;
  }
  EVP_MAC_free(mac);
}

}  // namespace
}  // namespace lg::proxy

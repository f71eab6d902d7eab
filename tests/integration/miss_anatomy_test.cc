// Why requests miss (docs/cache.md, "Why requests miss"), through the real
// server: each cause produced on purpose, reported in the ledger entry with
// the position of the first computed token (its message and part of the chat
// prompt), and counted in /metrics.
//   - never computed in the namespace: a team's first request, another
//     team's identical one, a system prompt changed in its middle;
//   - evicted from tier 0 under memory pressure (a tier-0 budget of nothing:
//     every unpinned block goes at the end of each lookup);
//   - written under an older latent identity: a restart on the same data
//     directory with another stored dtype;
//   - in flight: two identical new prompts at once, the second not waiting
//     for the first's blocks.
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/harness.h"
#include "tests/support/temp_dir.h"

namespace lg {
namespace {

using billing::LedgerEntry;
using billing::MissCause;
using billing::PromptRegion;
using nlohmann::json;

// A system prompt of a few hundred tokens (several 16-token blocks);
// `inserted` goes between its sixth and seventh rule.
std::string systemPrompt(const std::string& variant = "", const std::string& inserted = "") {
  std::string s = "You are the build agent of the " + variant + "repository. ";
  for (int i = 0; i < 12; ++i) {
    if (i == 6) s += inserted;
    s += "Rule " + std::to_string(i) + ": keep every change small, tested and explained. ";
  }
  return s;
}

json chat(const std::string& system, const std::string& user, int max_tokens = 4) {
  return json{{"model", "demo"},
              {"messages", json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
}

LedgerEntry send(test::Harness& h, const std::string& key, const json& body) {
  const auto r = h.call("POST", "/v1/chat/completions", key, body);
  EXPECT_EQ(r.status, 200) << r.body;
  std::optional<LedgerEntry> e = h.ledgerEntry(r.header("x-request-id").value_or(""));
  if (!e) ADD_FAILURE() << "no ledger entry";
  return e.value_or(LedgerEntry{});
}

int64_t causeTokens(const LedgerEntry& e, MissCause c) { return e.miss.tokens(c); }

// The anatomy adds up: every miss token has exactly one cause.
void expectConsistent(const LedgerEntry& e) {
  int64_t sum = 0;
  for (int64_t t : e.miss.tokens_by_cause) sum += t;
  EXPECT_EQ(sum, e.miss_tokens);
  EXPECT_EQ(e.miss.first_miss_token, e.hitTokens());
}

double metric(test::Harness& h, const std::string& sample) {
  const auto r = h.call("GET", "/metrics", h.adminKey());
  const size_t at = r.body.find("\n" + sample + " ");
  return at == std::string::npos ? -1 : std::stod(r.body.substr(at + sample.size() + 2));
}

TEST(MissAnatomyServerTest, NewNamespacesAndNewTextAreNewAndPlacedInTheirMessage) {
  auto h = test::Harness::start();
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string a = (*h)->newKey("team-a");

  LedgerEntry e = send(**h, a, chat(systemPrompt(), "List the files."));
  ASSERT_TRUE(e.miss.recorded());
  expectConsistent(e);
  EXPECT_EQ(e.miss.first_miss_token, 0);
  EXPECT_EQ(e.miss.first_miss_message, 0);
  EXPECT_EQ(e.miss.first_miss_region, PromptRegion::kSystem);
  EXPECT_EQ(e.miss.first_miss_cause, MissCause::kNew);
  EXPECT_GT(causeTokens(e, MissCause::kNew), 0);
  EXPECT_GT(causeTokens(e, MissCause::kPartialBlock), 0);

  // The same system prompt, another question: the hit ends in the block
  // where the system prompt gives way to the user's message (the new input),
  // and that block and the rest are computed.
  e = send(**h, a, chat(systemPrompt(), "Run the tests, then list the files."));
  expectConsistent(e);
  EXPECT_GT(e.hitTokens(), 0);
  EXPECT_EQ(e.miss.first_miss_message, 1);
  EXPECT_EQ(e.miss.first_miss_region, PromptRegion::kInput);

  // Another team's identical request: never computed in its namespace.
  e = send(**h, (*h)->newKey("team-b"), chat(systemPrompt(), "List the files."));
  expectConsistent(e);
  EXPECT_EQ(e.hitTokens(), 0);
  EXPECT_EQ(e.miss.first_miss_cause, MissCause::kNew);
  EXPECT_EQ(e.miss.first_miss_region, PromptRegion::kSystem);

  // A system prompt that differs in its middle: the first miss lies inside
  // the system prompt, after the blocks it still shares.
  e = send(**h, a, chat(systemPrompt("", "Today is Thursday. "), "List."));
  expectConsistent(e);
  EXPECT_GT(e.hitTokens(), 0);
  EXPECT_EQ(e.miss.first_miss_region, PromptRegion::kSystem);
  EXPECT_EQ(e.miss.first_miss_message, 0);
  EXPECT_EQ(e.miss.first_miss_cause, MissCause::kNew);

  // /metrics counts the causes and where first misses lie.
  EXPECT_GT(metric(**h, "latentgate_prompt_miss_tokens_total{cause=\"new\"}"), 0);
  EXPECT_EQ(metric(**h, "latentgate_first_miss_total{region=\"system\",cause=\"new\"}"), 3);
  EXPECT_EQ(metric(**h, "latentgate_first_miss_total{region=\"input\",cause=\"new\"}"), 1);
}

TEST(MissAnatomyServerTest, BlocksEvictedUnderMemoryPressureAreEvictedFromThePool) {
  test::HarnessOptions o;
  o.config.cache.tier0_budget_bytes = 1;  // every unpinned block leaves at the end of each lookup
  auto h = test::Harness::start(std::move(o));
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string a = (*h)->newKey("team-a");
  send(**h, a, chat(systemPrompt(), "List the files."));
  send(**h, a, chat(systemPrompt("other "), "List the files."));  // its lookup evicts the first
  const LedgerEntry e = send(**h, a, chat(systemPrompt(), "List the files."));
  expectConsistent(e);
  EXPECT_EQ(e.hitTokens(), 0);
  EXPECT_EQ(e.miss.first_miss_token, 0);
  EXPECT_EQ(e.miss.first_miss_region, PromptRegion::kSystem);
  EXPECT_EQ(e.miss.first_miss_cause, MissCause::kEvicted);
  EXPECT_EQ(e.miss.evicted_tier, "pool");
  EXPECT_GE(e.miss.evicted_ago_ms, 0);
  EXPECT_LT(e.miss.evicted_ago_ms, 60000);
  EXPECT_GT(causeTokens(e, MissCause::kEvicted), 0);
  EXPECT_EQ(metric(**h, "latentgate_prompt_evicted_tokens_total{tier=\"pool\"}"),
            static_cast<double>(causeTokens(e, MissCause::kEvicted)));
}

TEST(MissAnatomyServerTest, ARestartUnderAnotherLatentIdentityReportsTheModelChanged) {
  test::TempDir data{"lg_miss_anatomy"};
  const json body = chat(systemPrompt(), "List the files.");
  {
    test::HarnessOptions o;
    o.disk = true;
    o.data_dir = data.path();
    o.config.cache.write_through_hits = 0;  // written to disk as published
    o.config.cache.stored_dtype = StoredDTypeSetting::kF32;
    auto h = test::Harness::start(std::move(o));
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    send(**h, (*h)->newKey("team-a"), body);
  }  // the writer stores what is queued before the cache goes
  test::HarnessOptions o;
  o.disk = true;
  o.data_dir = data.path();
  o.config.cache.stored_dtype = StoredDTypeSetting::kBF16;  // another latent identity
  auto h = test::Harness::start(std::move(o));
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  // The team's key survived the restart with the billing store; make a new
  // one of the same team (same namespace).
  const LedgerEntry e = send(**h, (*h)->newKey("team-a"), body);
  expectConsistent(e);
  EXPECT_EQ(e.hitTokens(), 0);
  EXPECT_EQ(e.miss.first_miss_token, 0);
  EXPECT_EQ(e.miss.first_miss_cause, MissCause::kModelChanged);
  EXPECT_GT(causeTokens(e, MissCause::kModelChanged), 0);
  // Written under the new identity, it hits now.
  EXPECT_GT(send(**h, (*h)->newKey("team-a"), body).hitTokens(), 0);
}

TEST(MissAnatomyServerTest, ARequestThatStopsWaitingOnAnothersBlocksReportsThemInFlight) {
  test::HarnessOptions o;
  o.config.cache.in_flight_wait_ms = 1;  // gives up on another request's blocks at once
  o.config.serving.step_tokens = 16;    // a long prefill, one block per step
  auto h = test::Harness::start(std::move(o));
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  const std::string a = (*h)->newKey("team-a");
  // Two identical new prompts at once: the later lookup finds the earlier
  // one's claims. (Retried with a new prompt should one finish before the
  // other starts.)
  bool seen = false;
  for (int attempt = 0; attempt < 5 && !seen; ++attempt) {
    const json body = chat(systemPrompt("attempt " + std::to_string(attempt) + " "), "List the files.");
    LedgerEntry first, second;
    std::thread t([&] { first = send(**h, a, body); });
    second = send(**h, a, body);
    t.join();
    for (const LedgerEntry* e : {&first, &second}) {
      expectConsistent(*e);
      if (e->miss.first_miss_cause != MissCause::kInFlight) continue;
      seen = true;
      EXPECT_GT(causeTokens(*e, MissCause::kInFlight), 0);
      EXPECT_EQ(e->miss.first_miss_region, PromptRegion::kSystem);
    }
  }
  EXPECT_TRUE(seen) << "no request found the other's blocks in flight in 5 attempts";
}

}  // namespace
}  // namespace lg

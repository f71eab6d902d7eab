// Replicas (issue 23, deliverable 1): two whole servers, each with its own
// data directory, sharing one real, private PostgreSQL through
// billing.postgres_url (tests/support/postgres_server.h), driven over TLS:
//   - an admin call on either replica acts on both within the stated bound
//     (billing.control_sync_interval_ms plus one poll): a key made on one
//     authenticates on the other, a budget set on one binds on the other, a
//     price table scheduled on one prices the other's requests, a key
//     revoked on one is refused by the other;
//   - one team's system prompt has one fingerprint on both (the key they
//     share through PostgreSQL);
//   - a team deleted on one is purged on the other (its stored responses);
//   - a stored response is found on the replica that holds it, refused as
//     misdirected (421) on the other, 404 for another key; a purge on one
//     replica removes it on the other;
//   - PostgreSQL away: admin writes 503 control_plane_unavailable, requests
//     go on with the last view, /readyz says "stale"; back: in step again.
#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "billing/postgres/pg_control_plane.h"
#include "tests/integration/harness.h"
#include "tests/support/postgres_environment.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr int kIntervalMs = 100;
// The stated bound (interval plus one poll), with room for two shared cores
// and a curl round trip per try.
constexpr auto kBound = std::chrono::milliseconds(kIntervalMs) + 2s;

struct Reply : testing::CurlReply {
  json parsed() const { return json::parse(body, nullptr, false); }
};

// How long until `done` held (polled), or nullopt after `limit`.
std::optional<std::chrono::milliseconds> waitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 15s) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (done()) return took;
    if (took > limit) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

class ReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    const auto url = test::freshPostgresDatabase("r", &error);
    ASSERT_TRUE(url.has_value()) << error;
    for (auto* h : {&a_, &b_}) {
      test::HarnessOptions options;
      options.config.billing.postgres_url = *url + "?connect_timeout=1";
      options.config.billing.control_sync_interval_ms = kIntervalMs;
      auto started = test::Harness::start(options);
      ASSERT_TRUE(started.isOk()) << started.status().toString();
      *h = std::move(started).value();
    }
  }

  static Reply call(test::Harness& h, const std::string& method, const std::string& path, const std::string& key,
                    const json& body = nullptr) {
    return {h.call(method, path, key, body)};
  }
  static std::string makeKey(test::Harness& h, const std::string& team) {
    const Reply r = call(h, "POST", "/admin/keys", h.adminKey(), json{{"team", team}, {"name", "k"}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed().value("key", std::string());
  }
  static std::string keyId(test::Harness& h, const std::string& key) {
    const Reply r = call(h, "GET", "/v1/usage", key);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed().value("key_id", std::string());
  }
  static Reply chat(test::Harness& h, const std::string& key) {
    return call(h, "POST", "/v1/chat/completions", key,
                json{{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 2}});
  }
  static std::string respond(test::Harness& h, const std::string& key) {
    const Reply r = call(h, "POST", "/v1/responses", key, json{{"model", "demo"}, {"input", "Hi"}, {"max_output_tokens", 2}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed().value("id", std::string());
  }
  static bool authenticates(test::Harness& h, const std::string& key) {
    return call(h, "GET", "/v1/models", key).status == 200;
  }

  std::unique_ptr<test::Harness> a_, b_;
};

TEST_F(ReplicasTest, AnAdminCallOnEitherReplicaActsOnBothWithinTheBound) {
  const std::string key = makeKey(*a_, "acme");
  ASSERT_FALSE(key.empty());
  EXPECT_TRUE(authenticates(*a_, key));
  auto took = waitFor([&] { return authenticates(*b_, key); });
  ASSERT_TRUE(took) << "a key made on A never authenticated on B";
  EXPECT_LE(*took, kBound);
  const std::string id = keyId(*b_, key);
  // One system prompt, one fingerprint on both: the key they share.
  std::string fingerprints[2];
  for (int i = 0; i < 2; ++i) {
    test::Harness& h = i == 0 ? *a_ : *b_;
    const Reply r = call(h, "POST", "/v1/chat/completions", key,
                         json{{"model", "demo"},
                              {"messages", {{{"role", "system"}, {"content", "Be terse."}}, {{"role", "user"}, {"content", "Hello"}}}},
                              {"max_tokens", 2}});
    ASSERT_EQ(r.status, 200) << r.body;
    const auto entry = h.ledgerEntry(r.header("x-request-id").value_or(""));
    ASSERT_TRUE(entry.has_value());
    fingerprints[i] = entry->system_prompt;
  }
  EXPECT_FALSE(fingerprints[0].empty());
  EXPECT_EQ(fingerprints[0], fingerprints[1]) << "one prompt, one fingerprint on every replica";
  // The admin lists it on both.
  const Reply listed = call(*b_, "GET", "/admin/keys", b_->adminKey());
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.parsed()["data"].size(), 1u);
  EXPECT_EQ(listed.parsed()["data"][0]["id"], id);

  // A budget set on B binds on A: a zero budget blocks the key.
  Reply r = call(*b_, "PUT", "/admin/budgets/keys/" + id, b_->adminKey(), json{{"limit", "0"}, {"period", "day"}});
  ASSERT_EQ(r.status, 200) << r.body;
  took = waitFor([&] { return chat(*a_, key).status == 429; });
  ASSERT_TRUE(took) << "the budget set on B never bound on A";
  EXPECT_LE(*took, kBound);
  r = call(*a_, "DELETE", "/admin/budgets/keys/" + id, a_->adminKey());
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(waitFor([&] { return chat(*b_, key).status == 200; }));

  // A price table scheduled on A prices B's requests.
  r = call(*a_, "PUT", "/admin/pricing", a_->adminKey(),
           json{{"prices", {{"*", {{"input_cache_hit", "1"}, {"input_cache_miss", "2"}, {"output", "3"}}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const int64_t version = r.parsed()["version"].get<int64_t>();
  took = waitFor([&] {
    const Reply p = call(*b_, "GET", "/admin/pricing", b_->adminKey());
    return p.status == 200 && p.parsed()["in_force"]["version"] == version;
  });
  ASSERT_TRUE(took) << "the price table scheduled on A never reached B";
  EXPECT_LE(*took, kBound);
  const Reply priced = chat(*b_, key);
  ASSERT_EQ(priced.status, 200) << priced.body;
  const auto entry = b_->ledgerEntry(priced.header("x-request-id").value_or(""));
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->prices.version, version);
  EXPECT_EQ(entry->prices.rates.output, 3'000'000);

  // Revoked on B: refused on B at once, on A within the bound.
  r = call(*b_, "DELETE", "/admin/keys/" + id, b_->adminKey());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(call(*b_, "GET", "/v1/models", key).status, 401);
  took = waitFor([&] { return call(*a_, "GET", "/v1/models", key).status == 401; });
  ASSERT_TRUE(took) << "a key revoked on B was never refused by A";
  EXPECT_LE(*took, kBound);

  // What the operator sees.
  for (test::Harness* h : {a_.get(), b_.get()}) {
    const Reply ready = call(*h, "GET", "/readyz", "");
    EXPECT_EQ(ready.status, 200);
    EXPECT_EQ(ready.parsed().value("control_sync", ""), "synced") << ready.body;
    const Reply metrics = call(*h, "GET", "/metrics", h->adminKey());
    EXPECT_NE(metrics.body.find("latentgate_control_sync_age_seconds "), std::string::npos);
    EXPECT_NE(metrics.body.find("latentgate_control_sync_state{state=\"synced\"} 1"), std::string::npos);
  }
}

TEST_F(ReplicasTest, StoredResponsesAreFoundWhereTheyLiveAndRefusedAsMisdirectedElsewhere) {
  const std::string key = makeKey(*a_, "acme");
  ASSERT_TRUE(waitFor([&] { return authenticates(*b_, key); }));
  const std::string other = makeKey(*b_, "acme");
  ASSERT_TRUE(waitFor([&] { return authenticates(*a_, other); }));
  const std::string id = respond(*a_, key);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(call(*a_, "GET", "/v1/responses/" + id, key).status, 200);
  // B: once the index holds it, refused as held by another replica, the same
  // way for GET, DELETE, previous_response_id and item_reference.
  auto took = waitFor([&] { return call(*b_, "GET", "/v1/responses/" + id, key).status == 421; });
  ASSERT_TRUE(took) << call(*b_, "GET", "/v1/responses/" + id, key).body;
  EXPECT_LE(*took, kBound);
  Reply r = call(*b_, "GET", "/v1/responses/" + id, key);
  EXPECT_EQ(r.parsed()["error"]["code"], "response_on_other_replica") << r.body;
  r = call(*b_, "DELETE", "/v1/responses/" + id, key);
  EXPECT_EQ(r.status, 421) << r.body;
  r = call(*b_, "POST", "/v1/responses", key,
           json{{"model", "demo"}, {"input", "more"}, {"previous_response_id", id}, {"max_output_tokens", 2}});
  EXPECT_EQ(r.status, 421) << r.body;
  EXPECT_EQ(r.parsed()["error"]["param"], "previous_response_id");
  // Another key of the same team: an unknown id, on both.
  EXPECT_EQ(call(*b_, "GET", "/v1/responses/" + id, other).status, 404);
  EXPECT_EQ(call(*a_, "GET", "/v1/responses/" + id, other).status, 404);
  // Continued where it lives.
  r = call(*a_, "POST", "/v1/responses", key,
           json{{"model", "demo"}, {"input", "more"}, {"previous_response_id", id}, {"max_output_tokens", 2}});
  EXPECT_EQ(r.status, 200) << r.body;
  const std::string next = r.parsed().value("id", std::string());

  // The admin purges the key's responses on B: A purges its own, and B
  // then answers 404 (the index says nobody holds them).
  r = call(*b_, "DELETE", "/admin/responses?key_id=" + keyId(*a_, key), b_->adminKey());
  ASSERT_EQ(r.status, 200) << r.body;
  took = waitFor([&] {
    auto found = a_->server().responses().get(keyId(*a_, key), next);
    return found.isOk() && !found->has_value();
  });
  ASSERT_TRUE(took) << "the purge on B never reached A";
  EXPECT_EQ(call(*a_, "GET", "/v1/responses/" + id, key).status, 404);
  ASSERT_TRUE(waitFor([&] { return call(*b_, "GET", "/v1/responses/" + next, key).status == 404; }));
  EXPECT_EQ(call(*b_, "GET", "/v1/responses/" + id, key).status, 404);

  // A client's DELETE where it lives: the other replica says 404 after it.
  const std::string third = respond(*a_, key);
  ASSERT_TRUE(waitFor([&] { return call(*b_, "GET", "/v1/responses/" + third, key).status == 421; }));
  EXPECT_EQ(call(*a_, "DELETE", "/v1/responses/" + third, key).status, 200);
  ASSERT_TRUE(waitFor([&] { return call(*b_, "GET", "/v1/responses/" + third, key).status == 404; }));
}

TEST_F(ReplicasTest, ATeamDeletedOnOneReplicaIsPurgedOnTheOther) {
  const std::string key = makeKey(*b_, "doomed");
  const std::string bystander = makeKey(*b_, "other");
  const std::string kid = keyId(*b_, key);
  const std::string id = respond(*b_, key);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(waitFor([&] { return authenticates(*a_, key); }));
  const Reply r = call(*a_, "DELETE", "/admin/teams/doomed", a_->adminKey());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["revoked_keys"], 1);
  EXPECT_EQ(call(*a_, "GET", "/v1/models", key).status, 401);
  auto took = waitFor([&] { return call(*b_, "GET", "/v1/models", key).status == 401; });
  ASSERT_TRUE(took);
  EXPECT_LE(*took, kBound);
  // B purges what it holds of the team: the stored response of its key.
  ASSERT_TRUE(waitFor([&] {
    auto found = b_->server().responses().get(kid, id);
    return found.isOk() && !found->has_value();
  })) << "B kept the deleted team's stored response";
  EXPECT_TRUE(authenticates(*b_, bystander));
  // The id is refused on B too unless reused on purpose.
  const Reply again = call(*b_, "POST", "/admin/keys", b_->adminKey(), json{{"team", "doomed"}, {"name", "k"}});
  EXPECT_EQ(again.status, 409) << again.body;
}

TEST_F(ReplicasTest, WithPostgresAwayAdminWritesAre503AndRequestsGoOnWithTheLastView) {
  const std::string key = makeKey(*a_, "acme");
  ASSERT_TRUE(waitFor([&] { return authenticates(*b_, key); }));
  const std::string id = keyId(*a_, key);
  test::sharedPostgres()->stop();
  Reply r = call(*a_, "POST", "/admin/keys", a_->adminKey(), json{{"team", "acme"}, {"name", "k2"}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.parsed()["error"]["code"], "control_plane_unavailable") << r.body;
  EXPECT_TRUE(r.header("retry-after").has_value());
  r = call(*b_, "DELETE", "/admin/keys/" + id, b_->adminKey());
  EXPECT_EQ(r.status, 503) << r.body;
  r = call(*b_, "PUT", "/admin/budgets/teams/acme", b_->adminKey(), json{{"limit", "0"}, {"period", "day"}});
  EXPECT_EQ(r.status, 503) << r.body;
  // Requests go on, on both, with the last synced view.
  EXPECT_EQ(chat(*a_, key).status, 200);
  EXPECT_EQ(chat(*b_, key).status, 200);
  ASSERT_TRUE(waitFor([&] { return call(*b_, "GET", "/readyz", "").parsed().value("control_sync", "") == "stale"; }));
  EXPECT_EQ(call(*b_, "GET", "/readyz", "").status, 200) << "serving on the last view is ready";
  // Back: in step again; a revocation then reaches both.
  std::string error;
  ASSERT_TRUE(test::sharedPostgres()->start(&error)) << error;
  ASSERT_TRUE(waitFor([&] { return call(*a_, "GET", "/readyz", "").parsed().value("control_sync", "") == "synced"; }));
  r = call(*b_, "DELETE", "/admin/keys/" + id, b_->adminKey());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto took = waitFor([&] { return call(*a_, "GET", "/v1/models", key).status == 401; });
  ASSERT_TRUE(took);
  EXPECT_LE(*took, kBound);
}

}  // namespace
}  // namespace lg::proxy

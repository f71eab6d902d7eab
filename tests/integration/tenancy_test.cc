// Tenancy (issue 21, items 10 to 12), through the whole server over TLS:
//   - a deleted team's cache, stored responses, dashboard sessions and keys
//     are gone, its id is refused for a new key unless the admin says so, and
//     a new team under the old id hits nothing of the earlier owner's prompt
//     and does not see its ledger history (which the admin still sees,
//     marked deleted);
//   - the same system prompt has unrelated fingerprints in two teams;
//   - time parameters near INT64_MAX on the usage routes answer 400.

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;

struct Reply : testing::CurlReply {
  json parsed() const { return json::parse(body, nullptr, false); }
};

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = test::Harness::start();
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    admin_ = harness_->adminKey();
    // A system prompt of many cache blocks (16 tokens each in the harness).
    system_ = "You are the support agent of Acme. Internal playbook:";
    for (int i = 0; i < 30; ++i) system_ += " step " + std::to_string(i) + " is confidential;";
  }
  Server& server() { return harness_->server(); }

  Reply curl(const std::string& method, const std::string& path, std::vector<std::string> extra) const {
    return {testing::curlOverTls(harness_->caFile(), harness_->port(), method, path, extra, 120)};
  }
  Reply post(const std::string& path, const json& body, const std::string& key,
             std::vector<std::string> extra = {}) const {
    extra.insert(extra.end(), {"-H", "content-type: application/json", "-H", "Authorization: Bearer " + key,
                               "--data-binary", body.dump()});
    return curl("POST", path, extra);
  }
  Reply get(const std::string& path, const std::string& key) const {
    return curl("GET", path, {"-H", "Authorization: Bearer " + key});
  }
  Reply createKey(const json& body) const { return post("/admin/keys", body, admin_); }

  json chatBody(const std::string& system, const std::string& question) const {
    return {{"model", "demo"},
            {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", question}}}},
            {"max_tokens", 2}};
  }
  // The cached tokens of a chat request, or -1.
  int64_t cachedTokens(const std::string& key, const std::string& question) const {
    const Reply r = post("/v1/chat/completions", chatBody(system_, question), key);
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return -1;
    return r.parsed()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  // The request's ledger entry, once committed (commits are asynchronous).
  billing::LedgerEntry entryOf(const std::string& request_id) {
    std::optional<billing::LedgerEntry> e = harness_->ledgerEntry(request_id);
    if (!e) ADD_FAILURE() << "no ledger entry for " << request_id;
    return e.value_or(billing::LedgerEntry{});
  }
  std::string sessionFor(const std::string& key) const {
    const Reply r = curl("POST", "/dashboard/session",
                         {"-H", "content-type: application/json", "--data-binary", json{{"key", key}}.dump()});
    EXPECT_EQ(r.status, 200) << r.body;
    const std::string cookie = r.header("set-cookie").value_or("");
    const std::string prefix = "lg_dashboard=";
    if (cookie.rfind(prefix, 0) != 0) return "";
    return cookie.substr(prefix.size(), cookie.find(';') - prefix.size());
  }
  Reply overview(const std::string& token) const {
    return curl("GET", "/dashboard/api/overview", {"-H", "Cookie: lg_dashboard=" + token});
  }
  static void expectError(const Reply& r, int status, const std::string& code, const std::string& param) {
    EXPECT_EQ(r.status, status) << r.body;
    const json e = r.parsed()["error"];
    ASSERT_TRUE(e.is_object()) << r.body;
    EXPECT_EQ(e["code"], code) << r.body;
    EXPECT_EQ(e["param"], param) << r.body;
    EXPECT_TRUE(e["message"].is_string()) << r.body;
    EXPECT_TRUE(e["type"].is_string()) << r.body;
  }

  std::unique_ptr<test::Harness> harness_;
  std::string admin_;
  std::string system_;
};

// The report: a new key made for a team id used before hit 1,472
// cached tokens of the earlier owner's prompt and saw its ledger history.
TEST_F(TenancyTest, ADeletedTeamLeavesNothingBehindAndItsIdIsNotSilentlyReused) {
  const Reply made = createKey({{"team", "acme"}, {"name", "first owner"}});
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string old_key = made.parsed()["key"];
  const std::string old_key_id = made.parsed()["id"];

  // The first owner's prompt is cached (the second request hits it) and one
  // response is stored.
  EXPECT_EQ(cachedTokens(old_key, "Where is my order?"), 0);
  const int64_t hit = cachedTokens(old_key, "Where is my parcel?");
  EXPECT_GE(hit, 4 * 16) << "the first owner's prompt should be cached";
  const Reply stored = post("/v1/responses",
                            {{"model", "demo"}, {"input", "Remember my address"}, {"store", true},
                             {"max_output_tokens", 2}},
                            old_key);
  ASSERT_EQ(stored.status, 200) << stored.body;
  const std::string session = sessionFor(old_key);
  ASSERT_FALSE(session.empty());
  ASSERT_EQ(overview(session).status, 200);
  const Reply other_made = createKey({{"team", "bystander"}, {"name", "other team"}});
  ASSERT_EQ(other_made.status, 200);
  const std::string bystander = other_made.parsed()["key"];
  EXPECT_EQ(cachedTokens(bystander, "Where is my order?"), 0);  // its own namespace, cached too

  // Only the admin deletes a team.
  EXPECT_EQ(curl("DELETE", "/admin/teams/acme", {"-H", "Authorization: Bearer " + old_key}).status, 401);
  const Reply deleted = curl("DELETE", "/admin/teams/acme", {"-H", "Authorization: Bearer " + admin_});
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  const json d = deleted.parsed();
  EXPECT_EQ(d["object"], "team");
  EXPECT_EQ(d["id"], "acme");
  EXPECT_EQ(d["deleted"], true);
  EXPECT_EQ(d["revoked_keys"], 1);
  EXPECT_GE(d["purged"]["cache_blocks_memory"].get<int64_t>(), hit / 16) << d.dump();
  EXPECT_EQ(d["purged"]["stored_responses"], 1) << d.dump();
  EXPECT_EQ(d["purged"]["dashboard_sessions"], 1) << d.dump();
  expectError(curl("DELETE", "/admin/teams/nobody", {"-H", "Authorization: Bearer " + admin_}), 404, "team_not_found",
              "team");

  // Its keys and sessions are gone; another team's cache is untouched.
  EXPECT_EQ(post("/v1/chat/completions", chatBody(system_, "Hello?"), old_key).status, 401);
  EXPECT_EQ(overview(session).status, 401);
  EXPECT_GT(cachedTokens(bystander, "Where is my parcel?"), 0);
  // Deleting again purges again (nothing is left) and still answers 200.
  const Reply again = curl("DELETE", "/admin/teams/acme", {"-H", "Authorization: Bearer " + admin_});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.parsed()["revoked_keys"], 0);
  EXPECT_EQ(again.parsed()["purged"]["cache_blocks_memory"], 0);
  EXPECT_EQ(again.parsed()["purged"]["stored_responses"], 0);

  // The id is not silently reused...
  expectError(createKey({{"team", "acme"}, {"name", "new owner"}}), 409, "team_deleted", "team");
  expectError(createKey({{"team", "acme"}, {"name", "new owner"}, {"reuse_deleted_team", "yes"}}), 400, "invalid_type",
              "reuse_deleted_team");
  // ...only on purpose, as a new team that shares nothing with the old one.
  const Reply reused = createKey({{"team", "acme"}, {"name", "new owner"}, {"reuse_deleted_team", true}});
  ASSERT_EQ(reused.status, 200) << reused.body;
  const std::string new_key = reused.parsed()["key"];
  const std::string new_key_id = reused.parsed()["id"];
  EXPECT_EQ(cachedTokens(new_key, "Where is my parcel?"), 0) << "the new owner hit the earlier owner's prompt";
  EXPECT_GT(cachedTokens(new_key, "Where is my order?"), 0) << "the new team caches its own prompts";

  // The new owner's dashboard shows nothing of the earlier owner's.
  const Reply view = overview(sessionFor(new_key));
  ASSERT_EQ(view.status, 200) << view.body;
  EXPECT_EQ(view.body.find(old_key_id), std::string::npos) << view.body;
  const json shown = view.parsed();  // a named value: a range-for over a temporary's member dangles
  ASSERT_TRUE(shown["recent"].is_array()) << view.body;
  for (const json& e : shown["recent"]) EXPECT_EQ(e["key_id"], new_key_id) << e.dump();

  // The admin still has every entry, the earlier owner's marked deleted.
  const Reply ledger = get("/admin/ledger?team=acme&limit=100", admin_);
  ASSERT_EQ(ledger.status, 200) << ledger.body;
  int old_entries = 0, new_entries = 0;
  const json entries = ledger.parsed();
  for (const json& e : entries["data"]) {
    const bool old_owner = e["key_id"] == old_key_id;
    (old_owner ? old_entries : new_entries) += 1;
    EXPECT_EQ(e["team_deleted"], old_owner) << e.dump();
  }
  EXPECT_GE(old_entries, 3);
  EXPECT_GE(new_entries, 2);
  const Reply teams = get("/admin/teams", admin_);
  ASSERT_EQ(teams.status, 200) << teams.body;
  bool listed = false;
  const json team_list = teams.parsed();
  for (const json& t : team_list["data"]) {
    if (t["id"] != "acme") continue;
    listed = true;
    EXPECT_EQ(t["generation"], 1);
    EXPECT_EQ(t["deleted"], false);
    EXPECT_EQ(t["keys"], 1);
  }
  EXPECT_TRUE(listed) << teams.body;
}

// Issue 21, item 11: the fingerprint of one system prompt used to be the same
// in every team, so a tenant could fingerprint a guessed prompt through its
// own key and look for it among another team's.
TEST_F(TenancyTest, TheSameSystemPromptHasUnrelatedFingerprintsInTwoTeams) {
  const std::string a = harness_->newKey("team-a");
  const std::string b = harness_->newKey("team-b");
  auto fingerprintOf = [&](const std::string& key, const std::string& question) {
    const Reply r = post("/v1/chat/completions", chatBody(system_, question), key);
    EXPECT_EQ(r.status, 200) << r.body;
    return entryOf(r.header("x-request-id").value_or("")).system_prompt;
  };
  const std::string a1 = fingerprintOf(a, "one");
  const std::string a2 = fingerprintOf(a, "two");
  const std::string b1 = fingerprintOf(b, "one");
  EXPECT_EQ(a1.size(), 32u);
  EXPECT_EQ(a1, a2) << "a team's prompt keeps its fingerprint";
  EXPECT_NE(a1, b1) << "two teams share a fingerprint";
  EXPECT_EQ(a1, server().metering().systemPromptFingerprint("team-a", {{"system", system_}}));
}

// Issue 21, item 12: `to=9223372036854775807` overflowed a signed integer
// (hour rounding, seconds to microseconds) on the usage routes.
TEST_F(TenancyTest, TimeParametersOutOfRangeAnswer400) {
  const std::string key = harness_->newKey("team-a");
  const std::string session = sessionFor(admin_);
  for (const std::string bad : {"to=9223372036854775807", "from=-9223372036854775808", "to=253402300800",
                                "from=-1"}) {
    SCOPED_TRACE(bad);
    const std::string param = bad.substr(0, bad.find('='));
    expectError(get("/admin/usage?" + bad, admin_), 400, "invalid_value", param);
    expectError(get("/admin/usage.csv?" + bad, admin_), 400, "invalid_value", param);
    expectError(get("/admin/ledger?" + bad, admin_), 400, "invalid_value", param);
    expectError(get("/v1/usage?" + bad, key), 400, "invalid_value", param);
    expectError(curl("GET", "/dashboard/api/overview?" + bad, {"-H", "Cookie: lg_dashboard=" + session}), 400,
                "invalid_value", param);
  }
  // The bounds themselves are accepted.
  EXPECT_EQ(get("/admin/usage?from=0&to=253402300799", admin_).status, 200);
  EXPECT_EQ(curl("GET", "/dashboard/api/overview?from=0&to=253402300799", {"-H", "Cookie: lg_dashboard=" + session})
                .status,
            200);
}

}  // namespace
}  // namespace lg::proxy

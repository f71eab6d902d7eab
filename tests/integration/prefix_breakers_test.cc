// Prefix breakers through the real server (proxy/gateway/prefix_breakers.h,
// docs/cache.md "Prefix breakers"): an agent whose system prompt starts with
// a timestamp is flagged, in GET /admin/cache/prefix-breakers and the
// dashboard, at message 0 and the very token where the seconds differ (found
// here from the render route's ids, not from the detector); an agent whose
// prompt only grows at its end (new turns, notes appended to its system
// prompt) is not. Snippets appear only once the admin records the team's
// consent, and go when it is withdrawn.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "tests/integration/harness.h"

namespace lg {
namespace {

using nlohmann::json;

constexpr const char* kModel = "demo";

std::string rules(int n, const std::string& topic) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "Rule " + std::to_string(i) + " about " + topic + ": check item " + std::to_string(i * 7) + " twice.\n";
  }
  return out;
}

std::string stamped(int second) {
  char line[64];
  std::snprintf(line, sizeof line, "Current time: 2026-12-03T07:41:%02dZ\n", second);
  return line + rules(14, "operations");
}

json chat(const json& messages) {
  return json{{"model", kModel}, {"messages", messages}, {"max_tokens", 1}, {"temperature", 0}};
}

json timestampMessages(int second) {
  return json::array({{{"role", "system"}, {"content", stamped(second)}},
                      {{"role", "user"}, {"content", "Summarize the incident:\n" + rules(6, "the incident")}}});
}

class PrefixBreakersServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::HarnessOptions o;
    o.config.cache.prefix_breakers_min_common_tokens = 64;  // the harness's context is 512 tokens
    auto started = test::Harness::start(std::move(o));
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    h_ = std::move(started).value();
    stamped_key_ = h_->newKey("team-a", "stamped-agent");
    growing_key_ = h_->newKey("team-a", "growing-agent");
  }

  void send(const std::string& key, const json& messages) {
    const auto r = h_->call("POST", "/v1/chat/completions", key, chat(messages));
    ASSERT_EQ(r.status, 200) << r.body;
  }

  json report(const std::string& query = "?team=team-a") {
    const auto r = h_->call("GET", "/admin/cache/prefix-breakers" + query, h_->adminKey());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  }

  std::vector<int32_t> renderIds(const json& messages) {
    const auto r = h_->call("POST", "/v1/chat/completions/render", stamped_key_, chat(messages));
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["token_ids"].get<std::vector<int32_t>>();
  }

  uint64_t metric(const std::string& name) {
    const auto r = h_->call("GET", "/metrics", h_->adminKey());
    EXPECT_EQ(r.status, 200);
    const size_t at = r.body.find("\n" + name + " ");
    if (at == std::string::npos) return UINT64_MAX;
    return std::stoull(r.body.substr(at + name.size() + 2));
  }

  std::unique_ptr<test::Harness> h_;
  std::string stamped_key_, growing_key_;
};

TEST_F(PrefixBreakersServerTest, ATimestampInTheFirstLineIsFlaggedThereAndAPromptGrowingAtItsEndIsNot) {
  // The growing agent: a conversation that gains turns, and a system prompt
  // that gains a note at its end, the rest unchanged.
  json growing = json::array({{{"role", "system"}, {"content", rules(10, "deployments")}},
                              {{"role", "user"}, {"content", "Deploy the service:\n" + rules(9, "the service")}}});
  send(growing_key_, growing);
  growing.push_back({{"role", "assistant"}, {"content", "Deployed."}});
  growing.push_back({{"role", "user"}, {"content", "Now check the logs."}});
  send(growing_key_, growing);
  growing[0]["content"] = growing[0]["content"].get<std::string>() + "Note: deployments freeze on Fridays.\n";
  send(growing_key_, growing);

  // The stamped agent: three requests, a second apart in their first line.
  for (int second = 5; second <= 7; ++second) send(stamped_key_, timestampMessages(second));

  const std::vector<int32_t> before = renderIds(timestampMessages(6));
  const std::vector<int32_t> after = renderIds(timestampMessages(7));
  size_t differs = 0;
  while (differs < before.size() && before[differs] == after[differs]) ++differs;
  ASSERT_LT(differs, 20u) << "the first line is about a dozen tokens";

  const json r = report();
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["enabled"], true);
  ASSERT_EQ(r["data"].size(), 1u) << r.dump(2) << "\nonly the stamped agent is flagged";
  const json& row = r["data"][0];
  EXPECT_EQ(row["key_name"], "stamped-agent");
  EXPECT_EQ(row["team"], "team-a");
  EXPECT_EQ(row["flagged_requests"], 2);
  EXPECT_EQ(row["divergence"]["message"], 0);
  EXPECT_EQ(row["divergence"]["part"], "system");
  EXPECT_EQ(row["divergence"]["message_token"], static_cast<int64_t>(differs));
  EXPECT_EQ(row["divergence"]["token"], static_cast<int64_t>(differs));
  EXPECT_GT(row["common_tokens"].get<int64_t>(), static_cast<int64_t>(after.size() - differs) - 16);
  EXPECT_NE(row["saving_per_day"], "0");
  EXPECT_NE(row["advice"].get<std::string>().find("diverge at message 0, token " + std::to_string(differs) +
                                                  " (system prompt)"),
            std::string::npos)
      << row["advice"];
  // Three requests within a second, at the demo's prices: 2 x common x 252 pico-dollars
  // a token, taken over an hour (the shortest span a daily rate is made of), rounded down.
  const int64_t per_day = 2 * row["common_tokens"].get<int64_t>() * 252'000 * 24;
  ASSERT_LT(per_day, int64_t{1'000'000'000'000}) << "under a dollar";
  char digits[16];
  std::snprintf(digits, sizeof digits, "%012lld", static_cast<long long>(per_day));
  std::string exact = "0." + std::string(digits);
  exact.erase(exact.find_last_not_of('0') + 1);
  EXPECT_EQ(row["saving_per_day"], exact);
  const std::string rough = exact.substr(0, exact.find_first_not_of("0.") + 3);
  EXPECT_NE(row["advice"].get<std::string>().find("it would save about $" + rough + "/day"), std::string::npos)
      << row["advice"] << " " << rough;
  EXPECT_FALSE(row.contains("snippet")) << "no consent, no text";
  EXPECT_TRUE(report("?team=team-b")["data"].empty());
  EXPECT_EQ(metric("latentgate_prefix_breakers_flagged_total"), 2u);
  EXPECT_EQ(metric("latentgate_prefix_breakers_observed_total"), 6u);
  EXPECT_EQ(metric("latentgate_prefix_breakers_keys"), 2u);

  // A team key's dashboard shows its team's row, and another team's nothing of it.
  const auto dashboardBreakers = [&](const std::string& key) {
    const auto signed_in = h_->call("POST", "/dashboard/session", "", json{{"key", key}});
    EXPECT_EQ(signed_in.status, 200) << signed_in.body;
    const std::string cookie = signed_in.header("set-cookie").value_or("");
    const std::string token = cookie.substr(13, cookie.find(';') - 13);
    const auto overview =
        h_->call("GET", "/dashboard/api/overview?range=24h", "", nullptr, {"-H", "Cookie: lg_dashboard=" + token});
    EXPECT_EQ(overview.status, 200) << overview.body;
    return json::parse(overview.body, nullptr, false)["prefix_breakers"];
  };
  const json breakers = dashboardBreakers(stamped_key_);
  ASSERT_EQ(breakers.size(), 1u) << breakers.dump();
  EXPECT_EQ(breakers[0]["advice"], row["advice"]);
  const json other = dashboardBreakers(h_->newKey("team-b", "other-team"));
  EXPECT_TRUE(other.is_array() && other.empty()) << other.dump();

  // A revoked key's hashes and rows go with it.
  const std::string key_id = row["key_id"].get<std::string>();
  ASSERT_EQ(h_->call("DELETE", "/admin/keys/" + key_id, h_->adminKey()).status, 200);
  EXPECT_TRUE(report()["data"].empty());
  EXPECT_EQ(metric("latentgate_prefix_breakers_keys"), 1u) << "the growing agent's";
}

TEST_F(PrefixBreakersServerTest, SnippetsOnlyWhileTheTeamsConsentIsRecorded) {
  const std::string path = "/admin/prefix-snippets/team-a";
  EXPECT_EQ(h_->call("GET", path, h_->adminKey()).status, 404);
  EXPECT_EQ(h_->call("PUT", path, stamped_key_, json{{"consent_by", "x"}, {"retention_seconds", 60}}).status, 401)
      << "the admin's alone";
  EXPECT_EQ(h_->call("PUT", path, h_->adminKey(), json{{"retention_seconds", 60}}).status, 400) << "who consented";
  EXPECT_EQ(h_->call("PUT", "/admin/prefix-snippets/team-zz", h_->adminKey(),
                     json{{"consent_by", "x"}, {"retention_seconds", 60}})
                .status,
            404)
      << "no such team";

  send(stamped_key_, timestampMessages(5));
  send(stamped_key_, timestampMessages(6));
  ASSERT_EQ(report()["data"].size(), 1u);
  EXPECT_FALSE(report()["data"][0].contains("snippet"));

  const auto granted = h_->call("PUT", path, h_->adminKey(),
                                json{{"consent_by", "Ada Lovelace, team lead (ticket OPS-42)"}, {"retention_seconds", 3600}});
  ASSERT_EQ(granted.status, 200) << granted.body;
  const json g = json::parse(granted.body);
  EXPECT_EQ(g["enabled"], true);
  EXPECT_EQ(g["consent_by"], "Ada Lovelace, team lead (ticket OPS-42)");
  EXPECT_EQ(g["retention_seconds"], 3600);
  EXPECT_GT(g["granted_at"].get<int64_t>(), 0);
  EXPECT_EQ(json::parse(h_->call("GET", "/admin/prefix-snippets", h_->adminKey()).body)["data"].size(), 1u);

  send(stamped_key_, timestampMessages(7));
  json row = report()["data"][0];
  ASSERT_TRUE(row.contains("snippet")) << row.dump(2);
  EXPECT_NE(row["snippet"].get<std::string>().find("07:41:"), std::string::npos) << row["snippet"];
  EXPECT_EQ(metric("latentgate_prefix_breakers_snippets"), 1u);

  ASSERT_EQ(h_->call("DELETE", path, h_->adminKey()).status, 200);
  EXPECT_FALSE(report()["data"][0].contains("snippet")) << "withdrawn: the kept snippet goes at once";
  EXPECT_EQ(metric("latentgate_prefix_breakers_snippets"), 0u);
  send(stamped_key_, timestampMessages(8));
  EXPECT_FALSE(report()["data"][0].contains("snippet"));
  EXPECT_EQ(report()["data"][0]["flagged_requests"], 3);
}

// A deleted team's consent goes with it: the record names a person, and a
// new owner of the id (its next generation) starts without one anyway.
TEST_F(PrefixBreakersServerTest, DeletingATeamWithdrawsItsSnippetConsent) {
  const std::string path = "/admin/prefix-snippets/team-a";
  ASSERT_EQ(h_->call("PUT", path, h_->adminKey(), json{{"consent_by", "Ada"}, {"retention_seconds", 60}}).status, 200);
  ASSERT_EQ(h_->call("GET", path, h_->adminKey()).status, 200);
  const auto deleted = h_->call("DELETE", "/admin/teams/team-a", h_->adminKey());
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(json::parse(deleted.body)["purged"]["snippet_consent"], 1) << deleted.body;
  EXPECT_EQ(h_->call("GET", path, h_->adminKey()).status, 404);
  EXPECT_TRUE(json::parse(h_->call("GET", "/admin/prefix-snippets", h_->adminKey()).body)["data"].empty());
}

}  // namespace
}  // namespace lg

// `serve` with billing.postgres_url, through the whole server over TLS (the
// integration harness) and a real, private PostgreSQL
// (tests/support/postgres_server.h): two replicas drain their ledgers into
// one PostgreSQL and show the same numbers.
//   - what the clients were told (usage.cost in each response) is what
//     /admin/usage, its CSV, /v1/usage, the dashboard's overview and
//     PostgreSQL's own rows say, on either replica; entries committed on one
//     replica are found and listed on the other; verify reads PostgreSQL;
//   - /metrics has the drain's families and /readyz its state;
//   - PostgreSQL stopped: the reads answer 503 in OpenAI's error format,
//     serving goes on, the outbox holds the new entries; PostgreSQL back: it
//     drains them and the numbers match again;
//   - a stopped server leaves PostgreSQL every entry it committed, a stream
//     cut by the shutdown included (the ledger is flushed before the drain's
//     final attempt).
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <gtest/gtest.h>

#include "tests/integration/curl_client.h"
#include "tests/integration/harness.h"
#include "tests/proxy/http/test_client.h"
#include "tests/support/postgres_server.h"
#include "tests/support/prometheus_text.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::CurlReply;

constexpr int64_t kDollar = 1'000'000'000'000;  // pico-dollars
// Every entry of the test lies in this range (from and to in Unix seconds).
const std::string kAllTime = "from=0&to=4102444800";

test::PostgresServer* g_postgres = nullptr;

class PostgresEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string error;
    server_ = test::PostgresServer::create(&error);
    ASSERT_NE(server_, nullptr) << error;
    g_postgres = server_.get();
  }
  void TearDown() override {
    g_postgres = nullptr;
    server_.reset();
  }

 private:
  std::unique_ptr<test::PostgresServer> server_;
};

[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

int64_t picoOf(const std::string& usd) {  // "0.00000112" -> pico-dollars
  const size_t dot = usd.find('.');
  int64_t whole = std::stoll(usd.substr(0, dot)) * kDollar;
  if (dot == std::string::npos) return whole;
  std::string frac = usd.substr(dot + 1);
  frac.resize(12, '0');
  return whole + std::stoll(frac);
}

// The last usage object of an SSE body (the one with usage.cost).
json lastUsage(const std::string& sse) {
  json usage;
  size_t at = 0;
  while ((at = sse.find("data: {", at)) != std::string::npos) {
    const size_t end = sse.find('\n', at);
    const json chunk = json::parse(sse.substr(at + 6, end - at - 6), nullptr, false);
    if (chunk.is_object() && chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    at = end;
  }
  return usage;
}

bool waitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 15s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

struct Key {
  std::string id;
  std::string secret;
};

// What the clients were told, per key id.
struct Told {
  std::map<std::string, int64_t> cost;      // pico-dollars
  std::map<std::string, int64_t> requests;
  std::vector<std::string> request_ids;
  int64_t total() const {
    int64_t t = 0;
    for (const auto& [_, c] : cost) t += c;
    return t;
  }
  int64_t count() const { return static_cast<int64_t>(request_ids.size()); }
};

class PostgresServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_postgres, nullptr);
    static int n = 0;
    const std::string db = "serve" + std::to_string(++n);
    std::string error;
    ASSERT_TRUE(g_postgres->createDatabase(db, &error)) << error;
    url_ = g_postgres->url(db);
  }

  std::unique_ptr<test::Harness> startReplica() {
    test::HarnessOptions options;
    options.config.billing.postgres_url = url_;
    // Long enough that entries committed just before a stop are still in the
    // outbox (the final drain takes them); retries quick after an outage.
    options.config.billing.postgres_drain_interval_ms = 500;
    options.config.billing.postgres_retry_min_ms = 50;
    options.config.billing.postgres_retry_max_ms = 200;
    options.config.billing.postgres_shutdown_drain_ms = 10'000;
    auto started = test::Harness::start(std::move(options));
    EXPECT_TRUE(started.isOk()) << started.status().toString();
    return started.isOk() ? std::move(started).value() : nullptr;
  }

  static Key newKey(test::Harness& h, const std::string& team) {
    auto created = h.server().keys().create(team, "postgres serve test");
    EXPECT_TRUE(created.isOk());
    return created.isOk() ? Key{created->first.id, created->second} : Key{};
  }

  static CurlReply get(test::Harness& h, const std::string& path, const std::string& key) {
    return h.call("GET", path, key);
  }
  static json getJson(test::Harness& h, const std::string& path, const std::string& key) {
    const CurlReply r = get(h, path, key);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }

  // One generation request of each kind the test uses; records what the client was told.
  void request(test::Harness& h, const Key& key, int kind, Told& told) {
    const int i = static_cast<int>(told.request_ids.size());
    const std::string text = "Replica request " + std::to_string(i) + ": count the ledgers.";
    json usage;
    CurlReply r;
    if (kind == 0) {
      r = h.call("POST", "/v1/chat/completions", key.secret,
                 {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 3}});
      ASSERT_EQ(r.status, 200) << r.body;
      usage = json::parse(r.body)["usage"];
    } else if (kind == 1) {
      r = h.call("POST", "/v1/chat/completions", key.secret,
                 {{"model", "deepseek-chat"}, {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                                             {{"role", "user"}, {"content", text}}}},
                  {"max_tokens", 4}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                 {"-N"});
      ASSERT_EQ(r.status, 200) << r.body;
      usage = lastUsage(r.body);
    } else {
      r = h.call("POST", "/v1/completions", key.secret, {{"model", "demo"}, {"prompt", text}, {"max_tokens", 2}});
      ASSERT_EQ(r.status, 200) << r.body;
      usage = json::parse(r.body)["usage"];
    }
    ASSERT_TRUE(usage.contains("cost")) << r.body;
    told.cost[key.id] += picoOf(usage["cost"]["total"].get<std::string>());
    ++told.requests[key.id];
    told.request_ids.push_back(r.header("x-request-id").value_or(""));
  }

  static bool drained(test::Harness& h) {
    return waitFor([&] { return h.server().ledger().outboxDepth() == 0; });
  }

  // PostgreSQL's own rows, read with plain SQL: entries and cost per key.
  std::map<std::string, std::pair<int64_t, int64_t>> postgresByKey() const {
    std::map<std::string, std::pair<int64_t, int64_t>> out;
    pqxx::connection c(url_);
    pqxx::read_transaction tx(c);
    for (const pqxx::row& row : tx.exec("SELECT key_id, count(*), sum(cost_hit + cost_miss + cost_output)::bigint"
                                        " FROM ledger_entries GROUP BY key_id")) {
      out[row[0].as<std::string>()] = {row[1].as<int64_t>(), row[2].as<int64_t>()};
    }
    return out;
  }
  int64_t postgresHas(const std::vector<std::string>& ids) const {
    pqxx::connection c(url_);
    pqxx::read_transaction tx(c);
    int64_t n = 0;
    for (const std::string& id : ids) {
      n += tx.exec_params("SELECT count(*) FROM ledger_entries WHERE request_id = $1", id)[0][0].as<int64_t>();
    }
    return n;
  }

  // /admin/usage?group_by=key on `h`: cost and requests per key, and the totals, equal what the clients were told.
  void expectUsageIsWhatClientsWereTold(test::Harness& h, const Told& told, const std::string& who) {
    const json usage = getJson(h, "/admin/usage?group_by=key&" + kAllTime, h.adminKey());
    std::map<std::string, int64_t> cost, requests;
    for (const json& row : usage["data"]) {
      cost[row["key_id"].get<std::string>()] += picoOf(row["cost_total"].get<std::string>());
      requests[row["key_id"].get<std::string>()] += row["requests"].get<int64_t>();
    }
    EXPECT_EQ(cost, told.cost) << who;
    EXPECT_EQ(requests, told.requests) << who;
    EXPECT_EQ(picoOf(usage["totals"]["cost_total"].get<std::string>()), told.total()) << who;
    EXPECT_EQ(usage["totals"]["requests"].get<int64_t>(), told.count()) << who;
  }

  std::string url_;
};

void expectLedgerUnavailable(const CurlReply& r, const std::string& what) {
  EXPECT_EQ(r.status, 503) << what << ": " << r.body;
  const json body = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << what << ": " << r.body;
  EXPECT_EQ(body["error"]["type"], "server_error") << what;
  EXPECT_EQ(body["error"]["code"], "ledger_unavailable") << what;
  EXPECT_TRUE(body["error"]["message"].get<std::string>().find("PostgreSQL") != std::string::npos) << what;
  EXPECT_TRUE(r.header("retry-after").has_value()) << what;
}

TEST_F(PostgresServeTest, ReplicasShowPostgresNumbersThroughAnOutageAndLoseNothingAtShutdown) {
  auto a = startReplica();
  auto b = startReplica();
  ASSERT_TRUE(a && b);
  const Key a1 = newKey(*a, "team-a"), a2 = newKey(*a, "team-b"), b1 = newKey(*b, "team-a");

  // ---- requests through both replicas
  Told told;
  for (int i = 0; i < 3; ++i) request(*a, a1, i, told);
  request(*a, a2, 1, told);
  request(*a, a2, 0, told);
  for (int i = 0; i < 3; ++i) request(*b, b1, i, told);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_TRUE(drained(*a) && drained(*b));

  // /metrics: the drain's families; /readyz: its state.
  const test::PromText prom = test::parsePrometheusText(get(*a, "/metrics", a->adminKey()).body);
  EXPECT_TRUE(prom.errors.empty()) << prom.errors.front();
  EXPECT_EQ(prom.find("latentgate_ledger_outbox_entries"), 0.0);
  EXPECT_EQ(prom.value("latentgate_ledger_drained_total"), 5.0);
  EXPECT_EQ(prom.value("latentgate_ledger_drain_failures_total"), 0.0);
  EXPECT_GT(prom.value("latentgate_ledger_drain_last_success_timestamp_seconds"), 0.0);
  EXPECT_EQ(prom.find("latentgate_ledger_drain_state", {{"state", "draining"}}), 1.0);
  const CurlReply ready = get(*a, "/readyz", "");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(json::parse(ready.body),
            (json{{"status", "ready"},
                  {"model_files", "unchanged"},
                  {"cache_disk", "none"},
                  {"ledger_drain", "draining"},
                  {"control_sync", "synced"}}));

  // ---- every replica shows the same numbers: what the clients were told and what PostgreSQL holds
  expectUsageIsWhatClientsWereTold(*a, told, "replica a");
  expectUsageIsWhatClientsWereTold(*b, told, "replica b");
  const auto rows = postgresByKey();
  ASSERT_EQ(rows.size(), told.cost.size());
  for (const auto& [key_id, c] : told.cost) {
    EXPECT_EQ(rows.at(key_id).first, told.requests.at(key_id)) << key_id;
    EXPECT_EQ(rows.at(key_id).second, c) << key_id;
  }
  for (const std::string q : {"/admin/usage?group_by=team&granularity=hour&", "/admin/usage.csv?group_by=team&",
                               "/admin/usage?group_by=system_prompt&", "/admin/usage?group_by=model&",
                               "/admin/usage?group_by=miss_cause&granularity=day&"}) {
    const CurlReply on_a = get(*a, q + kAllTime, a->adminKey());
    EXPECT_EQ(on_a.status, 200) << on_a.body;
    EXPECT_EQ(on_a.body, get(*b, q + kAllTime, b->adminKey()).body) << q;
  }
  const std::string csv = get(*a, "/admin/usage.csv?" + kAllTime, a->adminKey()).body;
  const std::string total_usd = getJson(*a, "/admin/usage?" + kAllTime, a->adminKey())["totals"]["cost_total"];
  EXPECT_NE(csv.find("," + total_usd + ","), std::string::npos) << csv;

  // A key's own usage, on its replica.
  const json own = getJson(*b, "/v1/usage?" + kAllTime, b1.secret);
  EXPECT_EQ(picoOf(own["totals"]["cost_total"].get<std::string>()), told.cost.at(b1.id));

  // The dashboard's usage and recent requests: the same on both, and the usage API's totals.
  const json dash_a = getJson(*a, "/dashboard/api/overview?range=24h", a->adminKey());
  const json dash_b = getJson(*b, "/dashboard/api/overview?range=24h", b->adminKey());
  EXPECT_EQ(picoOf(dash_a["totals"]["cost_total"].get<std::string>()), told.total());
  EXPECT_EQ(dash_a["totals"], dash_b["totals"]);
  EXPECT_EQ(dash_a["series"], dash_b["series"]);
  // Team rows, but for how many keys each replica's own key store has.
  const auto teamsOf = [](json teams) {
    for (json& t : teams) t.erase("keys");
    return teams;
  };
  EXPECT_EQ(teamsOf(dash_a["teams"]), teamsOf(dash_b["teams"]));
  ASSERT_EQ(dash_a["recent"].size(), told.request_ids.size());
  std::set<std::string> recent_ids;
  for (size_t i = 0; i < dash_a["recent"].size(); ++i) {
    recent_ids.insert(dash_a["recent"][i]["request_id"].get<std::string>());
    EXPECT_EQ(dash_a["recent"][i]["request_id"], dash_b["recent"][i]["request_id"]) << i;
    EXPECT_EQ(dash_a["recent"][i]["cost_total"], dash_b["recent"][i]["cost_total"]) << i;
  }
  EXPECT_EQ(recent_ids, std::set<std::string>(told.request_ids.begin(), told.request_ids.end()));

  // Entries: one committed on b, looked up on a; the list by time, paged, the same on both.
  const json found = getJson(*a, "/admin/ledger?request_id=" + told.request_ids.back(), a->adminKey());
  ASSERT_EQ(found["data"].size(), 1u);
  EXPECT_EQ(found["data"][0]["key_id"], b1.id);
  const auto listAll = [&](test::Harness& h) {
    std::vector<std::string> ids;
    std::string after;
    for (int page = 0; page < 10; ++page) {
      const json list = getJson(h, "/admin/ledger?limit=3&" + kAllTime + (after.empty() ? "" : "&after=" + after), h.adminKey());
      for (const json& e : list["data"]) ids.push_back(e["request_id"]);
      if (!list["has_more"].get<bool>()) break;
      after = list["next"];
    }
    return ids;
  };
  const std::vector<std::string> listed = listAll(*a);
  EXPECT_EQ(listed, listAll(*b));
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()),
            std::set<std::string>(told.request_ids.begin(), told.request_ids.end()));
  const json verified = getJson(*a, "/admin/ledger/verify", a->adminKey());
  EXPECT_EQ(verified["ok"], true) << verified.dump();
  EXPECT_EQ(verified["source"], "postgresql");
  EXPECT_EQ(verified["entries"], told.count());

  // ---- PostgreSQL away: reads answer 503, serving and billing go on, the outbox holds
  g_postgres->stop();
  expectLedgerUnavailable(get(*a, "/admin/usage?group_by=key", a->adminKey()), "/admin/usage");
  expectLedgerUnavailable(get(*a, "/admin/usage.csv", a->adminKey()), "/admin/usage.csv");
  expectLedgerUnavailable(get(*a, "/v1/usage", a1.secret), "/v1/usage");
  expectLedgerUnavailable(get(*a, "/dashboard/api/overview?range=24h", a->adminKey()), "dashboard overview");
  expectLedgerUnavailable(get(*a, "/admin/ledger?request_id=" + told.request_ids[0], a->adminKey()), "entry lookup");
  expectLedgerUnavailable(get(*a, "/admin/ledger?" + kAllTime, a->adminKey()), "entries by time");
  expectLedgerUnavailable(get(*a, "/admin/ledger/verify", a->adminKey()), "verify");
  EXPECT_EQ(get(*a, "/admin/ledger/stats", a->adminKey()).status, 200) << "this replica's own figures";
  request(*a, a1, 0, told);
  request(*a, a2, 1, told);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_TRUE(waitFor([&] { return json::parse(get(*a, "/readyz", "").body)["ledger_drain"] == "retrying"; }));
  EXPECT_EQ(get(*a, "/readyz", "").status, 200) << "ready while PostgreSQL is away";
  EXPECT_EQ(a->server().ledger().outboxDepth(), 2u);
  EXPECT_EQ(getJson(*a, "/admin/ledger/stats", a->adminKey())["outbox_entries"], 2);
  const test::PromText away = test::parsePrometheusText(get(*a, "/metrics", a->adminKey()).body);
  EXPECT_EQ(away.find("latentgate_ledger_outbox_entries"), 2.0);
  EXPECT_GT(away.value("latentgate_ledger_drain_failures_total"), 0.0);

  // ---- PostgreSQL back: the outbox drains and every replica shows the new numbers
  std::string error;
  ASSERT_TRUE(g_postgres->start(&error)) << error;
  ASSERT_TRUE(drained(*a));
  expectUsageIsWhatClientsWereTold(*a, told, "replica a after the outage");
  expectUsageIsWhatClientsWereTold(*b, told, "replica b after the outage");
  EXPECT_EQ(getJson(*b, "/admin/ledger/verify", b->adminKey())["ok"], true);

  // ---- shutdown: a's last requests, and a stream the stop cuts, all reach PostgreSQL
  request(*a, a1, 2, told);
  request(*a, a2, 0, told);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  // A stream running when the server stops (a raw connection: the stop may
  // close it before its end).
  auto cut = testing::RawClient::connect(a->port());
  ASSERT_TRUE(cut && cut->startTls(a->caFile()));
  const std::string long_story =
      json{{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", "A long story, please."}}}},
           {"max_tokens", 400}, {"stream", true}}.dump();
  ASSERT_TRUE(cut->send("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + a1.secret +
                        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(long_story.size()) +
                        "\r\n\r\n" + long_story));
  EXPECT_NE(cut->readUntil("\"role\":\"assistant\"", 30s).find("HTTP/1.1 200"), std::string::npos);
  a->stop(0ms);
  EXPECT_EQ(a->server().ledger().outboxDepth(), 0u) << "the final drain left entries behind";
  // Every entry a committed is in PostgreSQL, with the same cost per key.
  std::vector<std::string> a_entries;
  std::map<std::string, std::pair<int64_t, int64_t>> a_by_key;
  ASSERT_TRUE(a->server().ledger().scanEntries(0, INT64_MAX, [&](const billing::LedgerEntry& e) {
    a_entries.push_back(e.request_id);
    ++a_by_key[e.key_id].first;
    a_by_key[e.key_id].second += e.cost.total();
    return true;
  }).isOk());
  EXPECT_EQ(a_entries.size(), 10u) << "9 requests and the cut stream";
  EXPECT_EQ(postgresHas(a_entries), static_cast<int64_t>(a_entries.size()));
  EXPECT_EQ(postgresHas(told.request_ids), told.count());
  const auto final_rows = postgresByKey();
  EXPECT_EQ(final_rows.at(a1.id), a_by_key.at(a1.id));
  EXPECT_EQ(final_rows.at(a2.id), a_by_key.at(a2.id));
  EXPECT_EQ(final_rows.at(a2.id).second, told.cost.at(a2.id));
  EXPECT_EQ(final_rows.at(b1.id).second, told.cost.at(b1.id));
  // b, still serving, shows a's last entries.
  const json b_usage = getJson(*b, "/admin/usage?group_by=key&" + kAllTime, b->adminKey());
  EXPECT_EQ(b_usage["totals"]["requests"], told.count() + 1);
  EXPECT_EQ(getJson(*b, "/admin/ledger/verify", b->adminKey())["ok"], true);
  b->stop(0ms);
  EXPECT_EQ(b->server().ledger().outboxDepth(), 0u);
}

}  // namespace
}  // namespace lg::proxy

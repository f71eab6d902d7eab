// Three LatentGate replicas on one machine, as docs/deploy.md runs them: a
// real PostgreSQL (the ledger of record and the control plane), a real
// redis-server (budgets and per-minute limits), three `latentgate serve`
// processes on the demo model, and nginx in front with consistent hashing on
// the API key (issue 23, "Tests on one machine"). Every process is private
// to this test (its own directories and ports) and stopped by its pid.
//
// The cases run in order on one cluster (one process, one ctest entry), each
// with its own team so that their budgets do not meet:
//   - a key made on one replica works on the others; revoked on one, it is
//     refused by all within the control plane's bound;
//   - clients of one team spread over the replicas never spend past the
//     team's budget by more than one request's reservation;
//   - kill -9 of a replica mid-stream: its reservation expires, nothing is
//     billed twice, and what clients saw complete is in PostgreSQL;
//   - PostgreSQL down for a while: serving goes on, the outboxes hold and
//     drain when it returns, nothing lost or duplicated;
//   - Redis flushed: the counters are rebuilt, no budget is bypassed;
//   - every replica's /admin/usage shows the same totals, equal to what
//     the clients were told;
// and at the end, with the replicas stopped, every replica's own ledger
// (its outbox history, read from its RocksDB) equals PostgreSQL's rows.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "billing/billing_db.h"
#include "billing/ledger.h"
#include "tests/integration/curl_client.h"
#include "tests/support/nginx_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/redis_server.h"
#include "tests/support/server_process.h"

namespace lg::test {
namespace {

using json = nlohmann::json;
using proxy::testing::CurlReply;
using proxy::testing::curlOverTls;
using Clock = std::chrono::steady_clock;

constexpr int kReplicas = 3;
constexpr const char* kAdminKey = "cluster-test-admin-4fQ9xT2mB7kL1pZ8vR3nW6yH0sD5cJ";
// How long a key revoked on one replica may still work on another: the
// control plane's sync interval (set below) plus a poll and this machine's
// noise. docs/deploy.md states the bound for the defaults.
constexpr int kSyncIntervalMs = 200;
constexpr auto kSyncBound = std::chrono::milliseconds(3000);
// A reservation of a replica that died expires after this: the least the
// configuration accepts (at least a minute and server.request_timeout_ms).
constexpr int kReservationTtlS = 60;
// Known rates (USD per 1M tokens), so the test can compute reservations.
constexpr int64_t kPicoPerTokenMiss = 280'000;    // 0.28
constexpr int64_t kPicoPerTokenOutput = 420'000;  // 0.42

std::string latentgate() { return std::string(LG_BINARY_DIR) + "/cli/latentgate"; }

int64_t pico(const std::string& dollars) {
  const size_t dot = dollars.find('.');
  const std::string whole = dollars.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : dollars.substr(dot + 1);
  frac.resize(12, '0');
  return std::stoll(whole) * 1'000'000'000'000 + std::stoll(frac);
}

// Whether a JSON body holds a "limit" of `amount` pico-dollars anywhere.
bool holdsLimit(const std::string& body, int64_t amount) {
  const json j = json::parse(body, nullptr, false);
  std::function<bool(const json&)> walk = [&](const json& v) {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (it.key() == "limit" && it->is_string() && pico(it->get<std::string>()) == amount) return true;
        if (walk(*it)) return true;
      }
    } else if (v.is_array()) {
      for (const json& e : v) {
        if (walk(e)) return true;
      }
    }
    return false;
  };
  return walk(j);
}

struct Replica {
  int index = 0;
  std::string dir;  // private: data, config and log
  int port = -1;
  pid_t pid = -1;
  std::string log() const { return dir + "/serve.log"; }
  std::string dataDir() const { return dir + "/data"; }
};

class Cluster {
 public:
  std::unique_ptr<PostgresServer> pg;
  std::unique_ptr<RedisServer> redis;
  std::vector<Replica> replicas;
  std::unique_ptr<NginxServer> nginx;
  std::string ca;  // the CA every replica's certificate (and nginx's) chains to

  bool start(std::string* error) {
    pg = PostgresServer::create(error);
    if (!pg || !pg->createDatabase("latentgate", error)) return false;
    redis = RedisServer::create(error);
    if (!redis) return false;
    replicas.resize(kReplicas);
    for (int i = 0; i < kReplicas; ++i) {
      Replica& r = replicas[static_cast<size_t>(i)];
      r.index = i;
      r.dir = makePrivateDir("lg_replica" + std::to_string(i));
      if (r.dir.empty()) {
        *error = "mkdtemp failed";
        return false;
      }
      // The first replica makes the local CA and the server certificate
      // (for localhost and 127.0.0.1); the others and nginx present it too.
      if (!startReplica(r, error)) return false;
      if (i == 0) ca = r.dataDir() + "/tls/ca.crt";
    }
    NginxOptions n;
    for (const Replica& r : replicas) n.upstream_ports.push_back(r.port);
    n.tls_cert = replicas[0].dataDir() + "/tls/server.crt";
    n.tls_key = replicas[0].dataDir() + "/tls/server.key";
    n.upstream_ca = ca;
    nginx = NginxServer::create(n, error);
    return nginx != nullptr;
  }

  void stopAll() {
    nginx.reset();
    for (Replica& r : replicas) stopReplica(r, SIGTERM);
    redis.reset();
    pg.reset();
    for (const Replica& r : replicas) {
      std::error_code ec;
      if (!r.dir.empty() && std::getenv("LG_KEEP_CLUSTER") == nullptr) std::filesystem::remove_all(r.dir, ec);
    }
  }

  std::string configOf(const Replica& r) const {
    json c;
    c["data_dir"] = r.dataDir();
    c["admin_key"] = kAdminKey;
    c["log"]["level"] = "info";
    c["engine"]["threads"] = 1;
    c["server"]["listen"] = "127.0.0.1:" + std::to_string(r.port);
    c["server"]["io_threads"] = 1;
    c["server"]["max_connections_per_address"] = 0;  // nginx and the test are one address
    c["server"]["request_timeout_ms"] = kReservationTtlS * 1000;
    if (r.index > 0) {
      c["server"]["tls_cert"] = replicas[0].dataDir() + "/tls/server.crt";
      c["server"]["tls_key"] = replicas[0].dataDir() + "/tls/server.key";
    }
    c["billing"]["postgres_url"] = pg->url("latentgate");
    c["billing"]["postgres_drain_interval_ms"] = 50;
    c["billing"]["postgres_retry_min_ms"] = 100;
    c["billing"]["postgres_retry_max_ms"] = 500;
    c["billing"]["control_sync_interval_ms"] = kSyncIntervalMs;
    c["billing"]["prices"] = json::parse(R"({"*": {"input_cache_hit": "0.028", "input_cache_miss": "0.28",
                                                  "output": "0.42"}})");
    c["limits"]["redis_url"] = redis->url();
    c["limits"]["redis_reservation_ttl_s"] = kReservationTtlS;
    return c.dump(2);
  }

  bool startReplica(Replica& r, std::string* error) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (r.port <= 0 || attempt > 0) r.port = freeLoopbackPort();
      {
        std::ofstream out(r.dir + "/config.json", std::ios::trunc);
        out << configOf(r);
      }
      // The log is appended to across restarts: only what this start writes counts.
      std::error_code ec;
      const auto log_start = std::filesystem::exists(r.log()) ? std::filesystem::file_size(r.log(), ec) : 0;
      r.pid = spawnLogged({latentgate(), "serve", "--config", r.dir + "/config.json"}, r.log(), std::nullopt, error);
      if (r.pid < 0) return false;
      const auto deadline = Clock::now() + std::chrono::seconds(120);
      int status = 0;
      while (Clock::now() < deadline) {
        const auto size = std::filesystem::file_size(r.log(), ec);
        if (!ec && size > log_start &&
            fileTail(r.log(), static_cast<size_t>(size - log_start)).find("LatentGate is serving") != std::string::npos) {
          return true;
        }
        if (exited(r.pid, &status)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!exited(r.pid, &status)) stopChild(r.pid, SIGKILL, 1000);
      r.pid = -1;
      *error = "replica " + std::to_string(r.index) + " did not start: " + fileTail(r.log());
    }
    return false;
  }

  void stopReplica(Replica& r, int signal) {
    if (r.pid > 0) stopChild(r.pid, signal, 20'000);
    r.pid = -1;
  }

  CurlReply call(int port, const std::string& method, const std::string& path, const std::string& bearer,
                 const std::string& body = {}, int max_time_s = 120) const {
    std::vector<std::string> extra = {"-H", "authorization: Bearer " + bearer};
    if (!body.empty()) {
      extra.insert(extra.end(), {"-H", "content-type: application/json", "--data-binary", body});
    }
    return curlOverTls(ca, static_cast<uint16_t>(port), method, path, extra, max_time_s);
  }
  CurlReply admin(int replica, const std::string& method, const std::string& path, const std::string& body = {}) const {
    return call(replicas[static_cast<size_t>(replica)].port, method, path, kAdminKey, body);
  }

  // A new key of `team` made through replica `on`: {id, key}.
  std::pair<std::string, std::string> makeKey(int on, const std::string& team, const std::string& name) const {
    const CurlReply r = admin(on, "POST", "/admin/keys", json{{"team", team}, {"name", name}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    if (!j.is_object()) return {};
    return {j.value("id", ""), j.value("key", "")};
  }

  // One psql query's rows, fields separated by '|'.
  std::string sql(const std::string& query) const {
    const std::string out = pg->dir() + "/query.out";
    std::string error;
    const int rc = runLogged({"/usr/bin/psql", pg->url("latentgate"), "-XAtq", "-c", query}, out, std::nullopt, &error);
    std::string text = fileTail(out, 1 << 20);
    std::filesystem::remove(out);
    EXPECT_EQ(rc, 0) << query << ": " << error << text;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
};

Cluster* cluster = nullptr;

// What one chat request came back with.
struct Reply {
  int status = 0;
  std::string request_id;
  std::string code;  // the error's code when it failed
  int64_t cost = 0;  // usage.cost.total in pico-dollars
};

std::string chatBody(const std::string& text, int max_tokens, bool stream = false) {
  json body = {{"model", "demo"},
               {"messages", json::array({{{"role", "user"}, {"content", text}}})},
               {"max_tokens", max_tokens},
               {"temperature", 0}};
  if (stream) body["stream"] = true;
  return body.dump();
}

Reply chat(int port, const std::string& key, const std::string& text, int max_tokens) {
  const CurlReply r = cluster->call(port, "POST", "/v1/chat/completions", key, chatBody(text, max_tokens));
  Reply out;
  out.status = r.status;
  out.request_id = r.header("x-request-id").value_or("");
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object()) return out;
  if (r.status == 200) {
    out.cost = pico(j["usage"]["cost"]["total"].get<std::string>());
  } else if (j.contains("error")) {
    out.code = j["error"].value("code", j["error"].value("type", ""));
  }
  return out;
}

// The most a chat request of `prompt_tokens` with `max_tokens` reserves at the
// test's rates (billing/metering.h: every prompt token at the miss rate).
int64_t reservationOf(int64_t prompt_tokens, int64_t max_tokens) {
  return prompt_tokens * kPicoPerTokenMiss + max_tokens * kPicoPerTokenOutput;
}

// Polls `done` until it holds or `bound` passed; how long it took.
template <typename F>
std::optional<std::chrono::milliseconds> within(std::chrono::milliseconds bound, F done) {
  const auto start = Clock::now();
  while (true) {
    if (done()) return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (Clock::now() - start > bound) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

// Waits until PostgreSQL holds every entry the replicas committed: each
// replica's drain reports an empty outbox in /metrics.
bool drained(std::chrono::seconds bound) {
  return within(bound, [] {
           for (int i = 0; i < kReplicas; ++i) {
             if (cluster->replicas[static_cast<size_t>(i)].pid <= 0) continue;
             const CurlReply m = cluster->admin(i, "GET", "/metrics");
             if (m.status != 200 || m.body.find("\nlatentgate_ledger_outbox_entries 0\n") == std::string::npos) {
               return false;
             }
           }
           return true;
         })
      .has_value();
}

// Every request id the clients were told complete, across the cases.
std::mutex told_mu;
std::map<std::string, int64_t> told_complete;  // request id -> cost
std::map<std::string, int64_t> told_by_team;   // team -> cost

void recordComplete(const std::string& team, const Reply& r) {
  std::lock_guard lock(told_mu);
  told_complete[r.request_id] = r.cost;
  told_by_team[team] += r.cost;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster = new Cluster();
    std::string error;
    if (!cluster->start(&error)) {
      setup_error_ = error;
    }
  }
  static void TearDownTestSuite() {
    if (cluster != nullptr) cluster->stopAll();
    delete cluster;
    cluster = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }
  static inline std::string setup_error_;
};

TEST_F(ClusterTest, KeyMadeOnOneReplicaWorksOnAllAndRevocationReachesAll) {
  const auto [id, key] = cluster->makeKey(0, "team-keys", "roaming");
  ASSERT_FALSE(key.empty());
  for (int i = 1; i < kReplicas; ++i) {
    const auto took = within(kSyncBound, [&] {
      return cluster->call(cluster->replicas[static_cast<size_t>(i)].port, "GET", "/v1/models", key).status == 200;
    });
    ASSERT_TRUE(took) << "replica " << i << " never accepted a key made on replica 0";
  }
  // Through nginx too, which sends it to whichever replica its hash names.
  const Reply first = chat(cluster->nginx->port(), key, "Hello from a roaming key.", 8);
  ASSERT_EQ(first.status, 200);
  recordComplete("team-keys", first);

  // Revoked on the last replica: refused by every replica within the bound.
  ASSERT_EQ(cluster->admin(kReplicas - 1, "DELETE", "/admin/keys/" + id).status, 200);
  for (int i = 0; i < kReplicas; ++i) {
    const auto took = within(kSyncBound, [&] {
      return cluster->call(cluster->replicas[static_cast<size_t>(i)].port, "GET", "/v1/models", key).status == 401;
    });
    ASSERT_TRUE(took) << "replica " << i << " still accepts a key revoked on replica " << kReplicas - 1;
    std::cout << "revocation seen by replica " << i << " after " << took->count() << " ms\n";
  }
}

TEST_F(ClusterTest, ConcurrentClientsOfOneTeamNeverOverspendItsBudget) {
  const std::string team = "team-budget";
  constexpr int kMaxTokens = 16;
  // Keys of the team spread over the replicas (nginx hashes each key).
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) keys.push_back(cluster->makeKey(i % kReplicas, team, "client" + std::to_string(i)).second);
  // The team's budget, set on one replica: about 20 requests' reservations.
  // The prompt is ~30 tokens; its exact count is in each reply's usage.
  const int64_t one = reservationOf(40, kMaxTokens);
  const int64_t budget = 20 * one;
  const std::string limit = std::to_string(budget / 1'000'000'000'000) + "." + [&] {
    std::string f = std::to_string(budget % 1'000'000'000'000);
    return std::string(12 - f.size(), '0') + f;
  }();
  ASSERT_EQ(cluster->admin(1, "PUT", "/admin/budgets/teams/" + team, json{{"limit", limit}, {"period", "total"}}.dump())
                .status,
            200);
  // Let every replica see the budget (the control plane's bound).
  for (int i = 0; i < kReplicas; ++i) {
    ASSERT_TRUE(within(kSyncBound, [&] {
      const CurlReply r = cluster->admin(i, "GET", "/admin/budgets/teams/" + team);
      return r.status == 200 && holdsLimit(r.body, budget);
    })) << "replica " << i << " never saw the team's budget";
  }

  // 9 clients, each through nginx and straight to a replica in turn, until
  // the budget refuses them.
  std::atomic<int64_t> spent_told{0};
  std::atomic<int> completed{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 9; ++c) {
    clients.emplace_back([&, c] {
      int refusals = 0;
      for (int i = 0; refusals < 2 && i < 40; ++i) {
        const int port = i % 2 == 0 ? cluster->nginx->port() : cluster->replicas[static_cast<size_t>((c + i) % kReplicas)].port;
        const Reply r = chat(port, keys[static_cast<size_t>(c) % keys.size()],
                             "Budget client " + std::to_string(c) + " asks about " + std::to_string(i % 5) + ".",
                             kMaxTokens);
        if (r.status == 200) {
          spent_told += r.cost;
          ++completed;
          recordComplete(team, r);
        } else if (r.status == 429 && r.code == "insufficient_quota") {
          ++refusals;
          ++refused;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(completed.load(), 5);
  EXPECT_GT(refused.load(), 0);
  std::cout << completed.load() << " completed, " << refused.load() << " refused, spent " << spent_told.load()
            << " of " << budget << " pico-dollars\n";
  EXPECT_LE(spent_told.load(), budget + one) << "the team spent past its budget by more than one reservation";

  ASSERT_TRUE(drained(std::chrono::seconds(30)));
  const int64_t in_pg = std::stoll(cluster->sql("SELECT coalesce(sum(cost_hit + cost_miss + cost_output), 0) "
                                                "FROM ledger_entries WHERE team = '" + team + "'"));
  EXPECT_EQ(in_pg, spent_told.load());
}

TEST_F(ClusterTest, KillNineMidStreamExpiresItsReservationAndBillsNothingTwice) {
  const std::string team = "team-crash";
  const auto [id, key] = cluster->makeKey(0, team, "streamer");
  ASSERT_FALSE(key.empty());
  Replica& victim = cluster->replicas[1];
  ASSERT_TRUE(within(kSyncBound, [&] { return cluster->call(victim.port, "GET", "/v1/models", key).status == 200; }));
  // Complete requests on the victim first: the client saw them complete.
  int64_t spent_before = 0;
  for (int i = 0; i < 3; ++i) {
    const Reply r = chat(victim.port, key, "Before the crash " + std::to_string(i), 8);
    ASSERT_EQ(r.status, 200);
    recordComplete(team, r);
    spent_before += r.cost;
  }
  // A budget that holds, beyond what was spent, the long stream's
  // reservation (its prompt is well under 40 tokens) and half of a 64-token
  // request's: while the stream's reservation lives, no 64-token request
  // fits; once it expired, an 8-token one does.
  constexpr int kLong = 1500;
  const int64_t budget = spent_before + reservationOf(40, kLong) + reservationOf(40, 64) / 2;
  const std::string limit = "0." + [&] {
    std::string f = std::to_string(budget);
    return std::string(12 - f.size(), '0') + f;
  }();
  ASSERT_LT(budget, 1'000'000'000'000);
  ASSERT_EQ(cluster->admin(0, "PUT", "/admin/budgets/keys/" + id, json{{"limit", limit}, {"period", "total"}}.dump())
                .status,
            200);
  ASSERT_TRUE(within(kSyncBound, [&] {
    const CurlReply r = cluster->admin(1, "GET", "/admin/budgets/keys/" + id);
    return r.status == 200 && holdsLimit(r.body, budget);
  }));

  // The stream, read by curl into a file; killed once its first tokens came.
  const std::string out = victim.dir + "/stream.out";
  std::string error;
  const pid_t curl = spawnLogged(
      {"/usr/bin/curl", "-sN", "--cacert", cluster->ca, "-H", "authorization: Bearer " + key, "-H",
       "content-type: application/json", "--data-binary", chatBody("Tell a long story about the sea.", kLong, true),
       "https://127.0.0.1:" + std::to_string(victim.port) + "/v1/chat/completions"},
      out, std::nullopt, &error);
  ASSERT_GT(curl, 0) << error;
  ASSERT_TRUE(within(std::chrono::milliseconds(30'000), [&] {
    return fileTail(out, 1 << 20).find("\"content\"") != std::string::npos;
  })) << fileTail(out);
  kill(victim.pid, SIGKILL);
  stopChild(victim.pid, SIGKILL, 5000);
  victim.pid = -1;
  stopChild(curl, SIGTERM, 5000);
  const std::string seen = fileTail(out, 1 << 20);
  EXPECT_EQ(seen.find("[DONE]"), std::string::npos) << "the stream ended before the kill; the case proves less";

  // While its reservation lives, the key cannot afford another request.
  const int other = cluster->replicas[0].port;
  const Reply during = chat(other, key, "While the reservation lives", 64);
  EXPECT_EQ(during.status, 429);
  EXPECT_EQ(during.code, "insufficient_quota");
  // After the TTL it expired: the same request fits.
  const auto freed = within(std::chrono::seconds(kReservationTtlS + 15), [&] {
    const Reply r = chat(other, key, "After the reservation expired", 64);
    if (r.status == 200) recordComplete(team, r);
    if (r.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return r.status == 200;
  });
  EXPECT_TRUE(freed) << "the dead replica's reservation never expired";

  // The victim comes back on its data: its outbox drains; nothing twice.
  ASSERT_TRUE(cluster->startReplica(victim, &error)) << error;
  ASSERT_TRUE(drained(std::chrono::seconds(30)));
  EXPECT_EQ(cluster->sql("SELECT count(*) - count(DISTINCT request_id) FROM ledger_entries"), "0");
  std::lock_guard lock(told_mu);
  for (const auto& [rid, cost] : told_complete) {
    EXPECT_EQ(cluster->sql("SELECT cost_hit + cost_miss + cost_output FROM ledger_entries WHERE request_id = '" + rid +
                           "' AND status = 'completed'"),
              std::to_string(cost))
        << rid << " was seen complete by its client";
  }
}

TEST_F(ClusterTest, PostgresDownOutboxesHoldAndDrainWhenItReturns) {
  const std::string team = "team-pgdown";
  const auto [id, key] = cluster->makeKey(2, team, "steady");
  ASSERT_FALSE(key.empty());
  for (int i = 0; i < kReplicas; ++i) {
    ASSERT_TRUE(within(kSyncBound, [&] {
      return cluster->call(cluster->replicas[static_cast<size_t>(i)].port, "GET", "/v1/models", key).status == 200;
    }));
  }
  cluster->pg->stop();
  std::vector<Reply> served;
  for (int i = 0; i < 6; ++i) {
    const Reply r = chat(cluster->replicas[static_cast<size_t>(i % kReplicas)].port, key,
                         "While PostgreSQL is away " + std::to_string(i), 8);
    ASSERT_EQ(r.status, 200) << "serving must not need PostgreSQL";
    served.push_back(r);
    recordComplete(team, r);
  }
  // Each replica's readiness says its drain is retrying, and it stays ready.
  const CurlReply ready = cluster->call(cluster->replicas[0].port, "GET", "/readyz", kAdminKey);
  EXPECT_EQ(ready.status, 200) << ready.body;
  std::string error;
  ASSERT_TRUE(cluster->pg->start(&error)) << error;
  ASSERT_TRUE(drained(std::chrono::seconds(60)));
  for (const Reply& r : served) {
    EXPECT_EQ(cluster->sql("SELECT count(*) FROM ledger_entries WHERE request_id = '" + r.request_id + "'"), "1");
  }
  const CurlReply verify = cluster->admin(0, "GET", "/admin/ledger/verify");
  ASSERT_EQ(verify.status, 200) << verify.body;
  EXPECT_TRUE(json::parse(verify.body).value("ok", false)) << verify.body;
}

TEST_F(ClusterTest, RedisFlushedRebuildsCountersWithoutBypassingABudget) {
  // team-budget spent its budget above; its counters vanish with Redis's data.
  const std::string team = "team-budget";
  const auto [id, key] = cluster->makeKey(0, team, "after-flush");
  // Every replica must know the key (the control plane's bound), since the
  // case below calls each of them directly, not only nginx's choice.
  ASSERT_TRUE(within(kSyncBound, [&] {
    for (const Replica& r : cluster->replicas) {
      if (cluster->call(r.port, "GET", "/v1/models", key).status != 200) return false;
    }
    return true;
  }));
  const Reply before = chat(cluster->nginx->port(), key, "Before the flush", 64);
  ASSERT_EQ(before.status, 429) << "the case needs a team that cannot afford the request";
  std::cout << "team-budget in PostgreSQL before the flush: "
            << cluster->sql("SELECT coalesce(sum(cost_hit + cost_miss + cost_output), 0) FROM ledger_entries "
                            "WHERE team = 'team-budget'")
            << " pico-dollars\n";
  std::string error;
  ASSERT_EQ(runLogged({"/usr/bin/redis-cli", "-p", std::to_string(cluster->redis->port()), "FLUSHALL"},
                      cluster->redis->dir() + "/cli.out", std::nullopt, &error),
            0)
      << error;
  // A request whose reservation (64 output tokens) is more than what the
  // concurrent clients left of the budget (less than one 16-token request's
  // reservation): refused by every replica before the flush and after it.
  for (int i = 0; i < kReplicas; ++i) {
    const Reply r = chat(cluster->replicas[static_cast<size_t>(i)].port, key, "After the flush", 64);
    if (r.status == 200) recordComplete(team, r);
    EXPECT_EQ(r.status, 429) << "replica " << i << " let a spent team through after Redis lost its counters";
    EXPECT_EQ(r.code, "insufficient_quota");
  }
}

TEST_F(ClusterTest, EveryReplicaShowsTheSameTotalsAsTheClientsWereTold) {
  ASSERT_TRUE(drained(std::chrono::seconds(30)));
  std::map<std::string, int64_t> expected;
  {
    std::lock_guard lock(told_mu);
    expected = told_by_team;
  }
  std::string first_body;
  for (int i = 0; i < kReplicas; ++i) {
    const CurlReply r = cluster->admin(i, "GET", "/admin/usage?group_by=team&from=2020-01-01");
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    std::map<std::string, int64_t> completed_cost;
    for (const json& row : j["data"]) {
      completed_cost[row["team"].get<std::string>()] += pico(row["cost_total"].get<std::string>());
    }
    for (const auto& [team, cost] : expected) {
      // A team's usage holds its completed requests and what the killed
      // stream and refusals cost; the clients were told the completed ones.
      EXPECT_GE(completed_cost[team], cost) << "replica " << i << ", " << team;
    }
    EXPECT_EQ(completed_cost["team-budget"], expected["team-budget"]) << "replica " << i;
    const std::string body = j["data"].dump();
    if (i == 0) first_body = body;
    EXPECT_EQ(body, first_body) << "replica " << i << " shows other numbers than replica 0";
  }
}

TEST_F(ClusterTest, EveryReplicasOwnLedgerEqualsPostgres) {
  ASSERT_TRUE(drained(std::chrono::seconds(30)));
  // Graceful stops: each replica's final drain runs; its RocksDB is then free.
  for (Replica& r : cluster->replicas) cluster->stopReplica(r, SIGTERM);
  std::map<std::string, int64_t> local;  // request id -> cost, over every replica's ledger
  for (const Replica& r : cluster->replicas) {
    auto db = billing::BillingDb::open(r.dataDir() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().message();
    auto ledger = billing::Ledger::open(**db);
    ASSERT_TRUE(ledger.isOk()) << ledger.status().message();
    ASSERT_TRUE((*ledger)
                    ->scanEntries(0, INT64_MAX,
                                  [&](const billing::LedgerEntry& e) {
                                    EXPECT_TRUE(local.emplace(e.request_id, e.cost.total()).second)
                                        << e.request_id << " is in two replicas' ledgers";
                                    return true;
                                  })
                    .isOk());
  }
  const std::string rows = cluster->sql(
      "SELECT request_id || '|' || (cost_hit + cost_miss + cost_output) FROM ledger_entries ORDER BY request_id");
  std::map<std::string, int64_t> in_pg;
  std::istringstream lines(rows);
  for (std::string line; std::getline(lines, line);) {
    const size_t bar = line.find('|');
    in_pg[line.substr(0, bar)] = std::stoll(line.substr(bar + 1));
  }
  EXPECT_EQ(in_pg.size(), local.size());
  EXPECT_TRUE(in_pg == local) << "PostgreSQL's rows differ from the replicas' ledgers";
}

}  // namespace
}  // namespace lg::test

#include "config/config.h"

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace lg {
namespace {

TEST(ConfigTest, DefaultsAreTheEmbeddedMode) {
  auto c = loadConfig({});
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->data_dir, "./data");
  EXPECT_EQ(c->log.level, "info");
  EXPECT_EQ(c->log.format, LogFormat::kText);
  EXPECT_EQ(c->cache.block_tokens, 64);
  EXPECT_EQ(c->server.listen, "127.0.0.1:8443");
}

TEST(ConfigTest, FileWithCommentsThenEnvThenFlags) {
  Config c;
  ASSERT_TRUE(applyConfigText(R"({
      // comments are allowed
      "data_dir": "/srv/lg", /* block comment */
      "log": {"level": "debug", "format": "json"},
      "engine": {"threads": 3}
    })", "test", c).isOk());
  EXPECT_EQ(c.data_dir, "/srv/lg");
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.log.format, LogFormat::kJson);
  EXPECT_EQ(c.engine.threads, 3);

  ConfigSources sources;
  sources.environment = {{"LATENTGATE_ENGINE_THREADS", "5"}, {"LATENTGATE_DATA", "/env/data"},
                         {"UNRELATED", "x"}};
  sources.flags = {{"engine.threads", "7"}};
  auto loaded = loadConfig(sources);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->engine.threads, 7);  // flag beats environment
  EXPECT_EQ(loaded->data_dir, "/env/data");
}

TEST(ConfigTest, ErrorsNameFieldAndValue) {
  Config c;
  Status s = applyConfigText(R"({"log": {"levle": "info"}})", "f.json", c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("log.levle"), std::string::npos) << s.message();

  s = applyConfigText(R"({"engine": {"threads": "four"}})", "f.json", c);
  EXPECT_NE(s.message().find("engine.threads"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("four"), std::string::npos) << s.message();

  s = applyConfigText(R"({"engine": )", "f.json", c);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("f.json"), std::string::npos);

  s = applyConfigText("[1,2]", "f.json", c);
  EXPECT_FALSE(s.isOk());

  ConfigSources sources;
  sources.environment = {{"LATENTGATE_LOG_LEVEL", "verbose"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("log.level"), std::string::npos);
  EXPECT_NE(bad.status().message().find("verbose"), std::string::npos);

  sources.environment = {{"LATENTGATE_CACHE_BLOCK_TOKENS", "8"}};  // below 16: hit counts would reveal tokens
  bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("cache.block_tokens"), std::string::npos);

  sources.environment = {{"LATENTGATE_SERVER_LISTEN", "localhost:99999"}};
  bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("99999"), std::string::npos);

  sources = {};
  sources.flags = {{"no.such", "1"}};
  EXPECT_FALSE(loadConfig(sources).isOk());
  sources.file = "/nonexistent/lg.json";
  bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

TEST(ConfigTest, CacheSizesTakeBinarySuffixesAndBadValuesAreRejected) {
  Config c;
  ASSERT_TRUE(applyConfigText(R"({"cache": {"tier0_budget_bytes": "512MiB", "disk_max_bytes": 8589934592,
                                            "stored_dtype": "bf16", "restore_policy": "never",
                                            "disk_verify_checksums": true}})",
                              "f.json", c)
                  .isOk());
  EXPECT_EQ(c.cache.tier0_budget_bytes, int64_t{512} << 20);
  EXPECT_EQ(c.cache.disk_max_bytes, int64_t{8} << 30);
  EXPECT_EQ(c.cache.stored_dtype, StoredDTypeSetting::kBF16);
  EXPECT_EQ(c.cache.restore_policy, RestorePolicySetting::kNever);
  EXPECT_TRUE(c.cache.disk_verify_checksums);
  EXPECT_FALSE(applyConfigText(R"({"cache": {"disk_verify_checksums": "yes"}})", "f.json", c).isOk());
  ConfigSources sources;
  sources.environment = {{"LATENTGATE_CACHE_DISK_MAX_BYTES", "2GiB"}};
  auto loaded = loadConfig(sources);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->cache.disk_max_bytes, int64_t{2} << 30);

  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"LATENTGATE_CACHE_DISK_MAX_BYTES", "12XB"},
           {"LATENTGATE_CACHE_DISK_MAX_BYTES", "99999999999TiB"},
           {"LATENTGATE_CACHE_DISK_MAX_BYTES", "1KiB"},  // below the 1 MiB floor
           {"LATENTGATE_CACHE_TIER0_BUDGET_BYTES", "-1"},
           {"LATENTGATE_CACHE_STORED_DTYPE", "fp4"},
           {"LATENTGATE_CACHE_RESTORE_POLICY", "sometimes"},
           {"LATENTGATE_CACHE_WRITE_BACK_QUEUE_BLOCKS", "0"},
           {"LATENTGATE_CACHE_DISK_VERIFY_CHECKSUMS", "yes"},
           {"LATENTGATE_CACHE_IO_THREADS", "65"}}) {
    sources.environment = {{name, value}};
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find("cache."), std::string::npos) << bad.status().message();
  }
}

TEST(ConfigTest, KvEventsAreOffByDefaultAndTheirEndpointsAndBoundsAreChecked) {
  Config c;
  EXPECT_TRUE(c.cache.kv_events.endpoint.empty());  // no events unless asked for
  ASSERT_TRUE(applyConfigText(R"({"cache": {"kv_events": {"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558",
                                            "topic": "kv@10.0.0.5:8443@demo", "encoding": "map",
                                            "reannounce_interval_ms": 0}}})",
                              "f.json", c)
                  .isOk());
  EXPECT_EQ(c.cache.kv_events.endpoint, "tcp://*:5557");
  EXPECT_EQ(c.cache.kv_events.encoding, KvEventsEncodingSetting::kMap);
  EXPECT_EQ(c.cache.kv_events.reannounce_interval_ms, 0);
  EXPECT_TRUE(validateConfig(c).isOk());
  ConfigSources sources;
  for (const auto& env : std::vector<std::map<std::string, std::string>>{
           {{"LATENTGATE_CACHE_KV_EVENTS_ENDPOINT", "localhost:5557"}},  // no transport
           {{"LATENTGATE_CACHE_KV_EVENTS_REPLAY_ENDPOINT", "tcp://*:5558"}},  // replay without events
           {{"LATENTGATE_CACHE_KV_EVENTS_ENDPOINT", "tcp://*:5557"}, {"LATENTGATE_CACHE_KV_EVENTS_REPLAY_ENDPOINT", "tcp://*:5557"}},
           {{"LATENTGATE_CACHE_KV_EVENTS_ENDPOINT", "tcp://*:5557"}, {"LATENTGATE_CACHE_KV_EVENTS_ENCODING", "json"}},
           {{"LATENTGATE_CACHE_KV_EVENTS_ENDPOINT", "tcp://*:5557"}, {"LATENTGATE_CACHE_KV_EVENTS_MAX_QUEUE_EVENTS", "0"}},
           {{"LATENTGATE_CACHE_KV_EVENTS_ENDPOINT", "tcp://*:5557"}, {"LATENTGATE_CACHE_KV_EVENTS_REANNOUNCE_INTERVAL_MS", "5"}}}) {
    sources.environment = env;
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << env.begin()->first;
    EXPECT_NE(bad.status().message().find("cache.kv_events."), std::string::npos) << bad.status().message();
  }
}

TEST(ConfigTest, MissRatioCurvesSamplePerTierByDefaultAndTheirBoundsAreChecked) {
  Config c;
  EXPECT_EQ(c.cache.mrc_sampling_ppm, 0);  // per tier
  EXPECT_EQ(c.cache.mrc_max_samples, 16384);
  EXPECT_EQ(c.cache.evicted_blocks_tracked, 262144);
  ASSERT_TRUE(applyConfigText(R"({"cache": {"mrc_sampling_ppm": 10000, "mrc_max_samples": 0}})", "f.json", c).isOk());
  EXPECT_EQ(c.cache.mrc_sampling_ppm, 10000);
  EXPECT_EQ(c.cache.mrc_max_samples, 0);  // no curves
  EXPECT_TRUE(validateConfig(c).isOk());
  ConfigSources sources;
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"LATENTGATE_CACHE_MRC_SAMPLING_PPM", "-1"},
           {"LATENTGATE_CACHE_MRC_SAMPLING_PPM", "1000001"},
           {"LATENTGATE_CACHE_MRC_MAX_SAMPLES", "-5"},
           {"LATENTGATE_CACHE_MRC_MAX_SAMPLES", "16777217"},
           {"LATENTGATE_CACHE_EVICTED_BLOCKS_TRACKED", "-1"},
           {"LATENTGATE_CACHE_EVICTED_BLOCKS_TRACKED", "67108865"}}) {
    sources.environment = {{name, value}};
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find(name.find("EVICTED") != std::string::npos ? "cache.evicted_blocks_tracked" : "cache.mrc_"),
              std::string::npos)
        << bad.status().message();
  }
}

TEST(ConfigTest, EngineSettingsAreTypedAndValidatedOnce) {
  Config c;
  EXPECT_EQ(c.engine.prefill_attention, PrefillAttentionSetting::kAuto);
  ASSERT_TRUE(applyConfigText(R"({"engine": {"latent_dtype": "bf16", "pool_blocks": 4096,
                                             "max_batch_tokens": 8192, "prefill_attention": "standard"}})",
                              "f.json", c)
                  .isOk());
  EXPECT_EQ(c.engine.latent_dtype, LatentDTypeSetting::kBF16);
  EXPECT_EQ(c.engine.prefill_attention, PrefillAttentionSetting::kStandard);
  EXPECT_EQ(c.engine.pool_blocks, 4096);
  EXPECT_EQ(c.engine.max_batch_tokens, 8192);
  const Status bad_name = applyConfigText(R"({"engine": {"latent_dtype": "fp8"}})", "f.json", c);
  ASSERT_FALSE(bad_name.isOk());
  EXPECT_NE(bad_name.message().find("engine.latent_dtype: expected one of f32, bf16; got \"fp8\""), std::string::npos)
      << bad_name.message();
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"LATENTGATE_ENGINE_POOL_BLOCKS", "-1"},
           {"LATENTGATE_ENGINE_MAX_BATCH_TOKENS", "0"},
           {"LATENTGATE_ENGINE_LATENT_DTYPE", "F32"},
           {"LATENTGATE_ENGINE_PREFILL_ATTENTION", "mha"}}) {
    ConfigSources sources;
    sources.environment = {{name, value}};
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find("engine."), std::string::npos) << bad.status().message();
  }
}

TEST(ConfigTest, ServerSettingsDefaultsAndLimits) {
  auto c = loadConfig({});
  ASSERT_TRUE(c.isOk());
  EXPECT_FALSE(c->server.plain_http);
  EXPECT_EQ(c->server.max_body_bytes, int64_t{32} << 20);
  EXPECT_EQ(c->server.max_connections, 1024);

  ConfigSources sources;
  sources.environment = {{"LATENTGATE_SERVER_MAX_BODY_BYTES", "8MiB"}, {"LATENTGATE_SERVER_PLAIN_HTTP", "true"}};
  sources.flags = {{"server.header_timeout_ms", "2500"}};
  auto set = loadConfig(sources);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->server.max_body_bytes, int64_t{8} << 20);
  EXPECT_TRUE(set->server.plain_http);
  EXPECT_EQ(set->server.header_timeout_ms, 2500);

  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"LATENTGATE_SERVER_MAX_BODY_BYTES", "100"},
                                                        {"LATENTGATE_SERVER_MAX_CONNECTIONS", "0"},
                                                        {"LATENTGATE_SERVER_IDLE_TIMEOUT_MS", "0"},
                                                        {"LATENTGATE_SERVER_PLAIN_HTTP", "maybe"}}) {
    ConfigSources bad_sources;
    bad_sources.environment = {{name, value}};
    auto bad = loadConfig(bad_sources);
    ASSERT_FALSE(bad.isOk()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find("server."), std::string::npos) << bad.status().message();
  }
  // Plain HTTP and a certificate contradict each other.
  ConfigSources both;
  both.flags = {{"server.plain_http", "true"}, {"server.tls_cert", "c.pem"}, {"server.tls_key", "k.pem"}};
  EXPECT_FALSE(loadConfig(both).isOk());
}

// Issue 21 items 4 and 5: the limits of the edge before authentication,
// their defaults, their parsing and a clear error for a bad value.
TEST(ConfigTest, EdgeLimitsBeforeAuthenticationHaveDefaultsAndBounds) {
  auto c = loadConfig({});
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(c->server.max_control_body_bytes, int64_t{64} << 10);
  EXPECT_EQ(c->server.max_inflight_body_bytes, int64_t{256} << 20);
  EXPECT_EQ(c->server.max_connections_per_address, 64);
  EXPECT_EQ(c->server.reserved_connections, 64);
  EXPECT_EQ(c->server.pressure_idle_timeout_ms, 2000);

  ConfigSources sources;
  sources.environment = {{"LATENTGATE_SERVER_MAX_INFLIGHT_BODY_BYTES", "1GiB"},
                         {"LATENTGATE_SERVER_MAX_CONTROL_BODY_BYTES", "16KiB"}};
  sources.flags = {{"server.max_connections_per_address", "0"},
                   {"server.reserved_connections", "8"},
                   {"server.pressure_idle_timeout_ms", "500"},
                   {"server.max_connections", "16"}};  // below the reserve's default: cut at runtime, not an error
  auto set = loadConfig(sources);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->server.max_inflight_body_bytes, int64_t{1} << 30);
  EXPECT_EQ(set->server.max_control_body_bytes, int64_t{16} << 10);
  EXPECT_EQ(set->server.max_connections_per_address, 0);
  EXPECT_EQ(set->server.reserved_connections, 8);
  EXPECT_EQ(set->server.pressure_idle_timeout_ms, 500);

  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"LATENTGATE_SERVER_MAX_INFLIGHT_BODY_BYTES", "1MiB"},
                                                        {"LATENTGATE_SERVER_MAX_CONTROL_BODY_BYTES", "100"},
                                                        {"LATENTGATE_SERVER_MAX_CONNECTIONS_PER_ADDRESS", "-1"},
                                                        {"LATENTGATE_SERVER_RESERVED_CONNECTIONS", "-2"},
                                                        {"LATENTGATE_SERVER_PRESSURE_IDLE_TIMEOUT_MS", "0"}}) {
    ConfigSources bad_sources;
    bad_sources.environment = {{name, value}};
    auto bad = loadConfig(bad_sources);
    ASSERT_FALSE(bad.isOk()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find("server."), std::string::npos) << bad.status().message();
  }
}

TEST(ConfigTest, EffectiveConfigRoundTrips) {
  Config c;
  c.engine.threads = 9;
  c.engine.latent_dtype = LatentDTypeSetting::kBF16;
  c.engine.prefill_attention = PrefillAttentionSetting::kAbsorbed;
  c.cache.stored_dtype = StoredDTypeSetting::kInt8;
  c.cache.restore_policy = RestorePolicySetting::kAlways;
  c.log.format = LogFormat::kJson;
  c.cache.disk_max_bytes = int64_t{3} << 40;
  c.cache.disk_verify_checksums = true;
  Config back;
  ASSERT_TRUE(applyConfigText(configToJson(c), "dump", back).isOk());
  EXPECT_EQ(back.engine.threads, 9);
  EXPECT_EQ(back.log.format, LogFormat::kJson);
  EXPECT_EQ(back.cache.disk_max_bytes, int64_t{3} << 40);
  EXPECT_TRUE(back.cache.disk_verify_checksums);
  EXPECT_EQ(back.engine.latent_dtype, LatentDTypeSetting::kBF16);
  EXPECT_EQ(back.engine.prefill_attention, PrefillAttentionSetting::kAbsorbed);
  EXPECT_EQ(back.cache.stored_dtype, StoredDTypeSetting::kInt8);
  EXPECT_EQ(back.cache.restore_policy, RestorePolicySetting::kAlways);
  EXPECT_NE(configToJson(c).find("\"stored_dtype\": \"int8\""), std::string::npos);
}

}  // namespace
}  // namespace lg

namespace lg {
namespace {

TEST(ConfigTest, ServingAndGatewaySettingsAreValidatedAndTheAdminKeyNeverPrinted) {
  ConfigSources sources;
  sources.environment = {{"LATENTGATE_ADMIN_KEY", "a-very-secret-admin-key"},
                         {"LATENTGATE_SERVING_STEP_TOKENS", "256"},
                         {"LATENTGATE_SERVER_DEFAULT_MAX_TOKENS", "1024"}};
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->admin_key, "a-very-secret-admin-key");
  EXPECT_EQ(c->serving.step_tokens, 256);
  EXPECT_EQ(c->server.default_max_tokens, 1024);
  const std::string shown = configToJson(*c);
  EXPECT_EQ(shown.find("a-very-secret-admin-key"), std::string::npos) << shown;
  EXPECT_NE(shown.find("(set)"), std::string::npos);
  // The step must hold every running sequence's decode token.
  sources.environment = {{"LATENTGATE_SERVING_STEP_TOKENS", "8"}, {"LATENTGATE_SERVING_MAX_RUNNING", "16"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("serving.step_tokens"), std::string::npos) << bad.status().message();
  sources.environment = {{"LATENTGATE_SERVER_DEFAULT_MAX_TOKENS", "0"}};
  bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("server.default_max_tokens"), std::string::npos);
}

TEST(ConfigTest, StoredResponsesExpireAfterThirtyDaysUnlessConfigured) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.stored_response_ttl_s, 30 * 24 * 3600);
  sources.environment = {{"LATENTGATE_SERVER_STORED_RESPONSE_TTL_S", "3600"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.stored_response_ttl_s, 3600);
  EXPECT_NE(configToJson(*c).find("\"stored_response_ttl_s\": 3600"), std::string::npos) << configToJson(*c);
  sources.environment = {{"LATENTGATE_SERVER_STORED_RESPONSE_TTL_S", "0"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("server.stored_response_ttl_s"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace lg

namespace lg {
namespace {

TEST(ConfigTest, SharedNamespacesMapANamespaceToTheTeamsGrantedIt) {
  Config c;
  EXPECT_TRUE(c.cache.shared_namespaces.empty());
  ASSERT_TRUE(applyConfigText(R"({"cache": {"shared_namespaces": {"company": ["team-a", "team-b"], "ops": []}}})", "f",
                              c)
                  .isOk());
  const SharedNamespaceGrants expected = {{"company", {"team-a", "team-b"}}, {"ops", {}}};
  EXPECT_EQ(c.cache.shared_namespaces, expected);
  EXPECT_TRUE(validateConfig(c).isOk());

  // The environment and flags take the same JSON object; the later source replaces it whole.
  ConfigSources sources;
  sources.environment = {{"LATENTGATE_CACHE_SHARED_NAMESPACES", R"({"company": ["team-c"]})"}};
  auto loaded = loadConfig(sources);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->cache.shared_namespaces, (SharedNamespaceGrants{{"company", {"team-c"}}}));
  sources.flags = {{"cache.shared_namespaces", "{}"}};
  loaded = loadConfig(sources);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_TRUE(loaded->cache.shared_namespaces.empty());

  // Printed as the object it was given, and read back.
  const std::string shown = configToJson(c);
  EXPECT_NE(shown.find("\"shared_namespaces\": {"), std::string::npos) << shown;
  Config back;
  ASSERT_TRUE(applyConfigText(shown, "dump", back).isOk());
  EXPECT_EQ(back.cache.shared_namespaces, expected);

  // Wrong shapes and names are errors naming the field and the value.
  for (const char* bad : {R"(["team-a"])", R"({"company": "team-a"})", R"({"company": [7]})"}) {
    Config d;
    Status s = applyConfigText(std::string(R"({"cache": {"shared_namespaces": )") + bad + "}}", "f", d);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("cache.shared_namespaces"), std::string::npos) << s.message();
  }
  sources = {};
  sources.environment = {{"LATENTGATE_CACHE_SHARED_NAMESPACES", "company=team-a"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("company=team-a"), std::string::npos) << bad.status().message();
  for (const SharedNamespaceGrants& grants :
       {SharedNamespaceGrants{{"has space", {"team-a"}}}, SharedNamespaceGrants{{"company", {"team/a"}}},
        SharedNamespaceGrants{{"", {"team-a"}}}, SharedNamespaceGrants{{"company", {std::string(129, 't')}}}}) {
    Config d;
    d.cache.shared_namespaces = grants;
    Status s = validateConfig(d);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("cache.shared_namespaces"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace lg

namespace lg {
namespace {

TEST(ConfigTest, TheMetricsTokenComesFromTheEnvironmentAndIsNeverPrinted) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.metrics_token, "");
  EXPECT_NE(configToJson(*c).find("\"metrics_token\": \"\""), std::string::npos) << configToJson(*c);
  sources.environment = {{"LATENTGATE_SERVER_METRICS_TOKEN", "a-secret-metrics-token-1234"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.metrics_token, "a-secret-metrics-token-1234");
  const std::string shown = configToJson(*c);
  EXPECT_EQ(shown.find("a-secret-metrics-token-1234"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\"metrics_token\": \"(set)\""), std::string::npos) << shown;
  // Too short to be a secret: refused, and the message does not repeat it.
  sources.environment = {{"LATENTGATE_SERVER_METRICS_TOKEN", "short-token"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("server.metrics_token"), std::string::npos) << bad.status().message();
  EXPECT_EQ(bad.status().message().find("short-token"), std::string::npos) << bad.status().message();
}

// Issue 21, item 12: a chosen admin key or metrics token with less than 128
// bits of estimated entropy stops the start, with a message that says why
// and never repeats the secret.
TEST(ConfigTest, AGuessableAdminKeyOrMetricsTokenIsRefusedAtStart) {
  ConfigSources sources;
  sources.environment = {{"LATENTGATE_ADMIN_KEY", "adm-secret123456"}};
  auto weak = loadConfig(sources);
  ASSERT_FALSE(weak.isOk());
  EXPECT_NE(weak.status().message().find("admin_key"), std::string::npos) << weak.status().message();
  EXPECT_NE(weak.status().message().find("too weak"), std::string::npos) << weak.status().message();
  EXPECT_EQ(weak.status().message().find("adm-secret123456"), std::string::npos) << weak.status().message();
  sources.environment = {{"LATENTGATE_SERVER_METRICS_TOKEN", "metrics-token-1234"}};  // 18 characters, ~110 bits
  auto weak_token = loadConfig(sources);
  ASSERT_FALSE(weak_token.isOk());
  EXPECT_NE(weak_token.status().message().find("server.metrics_token"), std::string::npos);
  sources.environment = {{"LATENTGATE_ADMIN_KEY", "4fKp9QzT2mXc7RbN1vLw8HsJ3dGy6AeU"},
                         {"LATENTGATE_SERVER_METRICS_TOKEN", "a-metrics-token-for-the-scraper-0123"}};
  auto strong = loadConfig(sources);
  EXPECT_TRUE(strong.isOk()) << strong.status().toString();
}

TEST(ConfigTest, IdempotencyKeysStaySpentForADayUnlessConfigured) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->billing.idempotency_ttl_s, 24 * 3600);
  sources.environment = {{"LATENTGATE_BILLING_IDEMPOTENCY_TTL_S", "600"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->billing.idempotency_ttl_s, 600);
  sources.environment = {{"LATENTGATE_BILLING_IDEMPOTENCY_TTL_S", "0"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("billing.idempotency_ttl_s"), std::string::npos) << bad.status().message();
}

// Issue 23: the ledger's PostgreSQL, off by default; its drain's settings
// bounded; its password never shown.
TEST(ConfigTest, PostgresUrlIsOptionalValidatedAndItsPasswordNeverShown) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_TRUE(c->billing.postgres_url.empty());
  EXPECT_EQ(c->billing.postgres_drain_batch, 1000);
  EXPECT_EQ(c->billing.postgres_retry_max_ms, 30000);
  EXPECT_EQ(c->billing.control_sync_interval_ms, 1000);
  EXPECT_EQ(configToJson(*c).find("postgres_url\": \"p"), std::string::npos);

  sources.environment = {{"LATENTGATE_BILLING_POSTGRES_URL", "postgresql://lg:hunter2-secret@db:5432/ledger"},
                         {"LATENTGATE_BILLING_POSTGRES_DRAIN_BATCH", "250"},
                         {"LATENTGATE_BILLING_CONTROL_SYNC_INTERVAL_MS", "250"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->billing.postgres_url, "postgresql://lg:hunter2-secret@db:5432/ledger");
  EXPECT_EQ(c->billing.postgres_drain_batch, 250);
  EXPECT_EQ(c->billing.control_sync_interval_ms, 250);
  const std::string shown = configToJson(*c);
  EXPECT_EQ(shown.find("hunter2-secret"), std::string::npos) << shown;
  EXPECT_NE(shown.find("postgresql://lg:***@db:5432/ledger"), std::string::npos) << shown;

  sources.environment = {{"LATENTGATE_BILLING_POSTGRES_URL", "hunter2-secret"}};
  auto bad = loadConfig(sources);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("billing.postgres_url"), std::string::npos) << bad.status().message();
  for (const auto& [name, value] : {std::pair{"LATENTGATE_BILLING_POSTGRES_DRAIN_BATCH", "0"},
                                    std::pair{"LATENTGATE_BILLING_POSTGRES_DRAIN_INTERVAL_MS", "5"},
                                    std::pair{"LATENTGATE_BILLING_POSTGRES_RETRY_MAX_MS", "100"},
                                    std::pair{"LATENTGATE_BILLING_POSTGRES_SHUTDOWN_DRAIN_MS", "-1"},
                                    std::pair{"LATENTGATE_BILLING_CONTROL_SYNC_INTERVAL_MS", "5"},
                                    std::pair{"LATENTGATE_BILLING_CONTROL_SYNC_INTERVAL_MS", "60001"}}) {
    sources.environment = {{name, value}};
    bad = loadConfig(sources);
    EXPECT_FALSE(bad.isOk()) << name;
  }
}

// Issue 23: budgets and rate limits shared through Redis, off by default;
// its timeouts and reservation TTL bounded; its password never shown.
TEST(ConfigTest, RedisUrlIsOptionalValidatedAndItsPasswordNeverShown) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_TRUE(c->limits.redis_url.empty());
  EXPECT_EQ(c->limits.redis_reservation_ttl_s, 900);
  EXPECT_EQ(c->limits.redis_fallback_replicas, 1);

  sources.environment = {{"LATENTGATE_LIMITS_REDIS_URL", "redis://:hunter2-secret@cache:6380/1"},
                         {"LATENTGATE_LIMITS_REDIS_FALLBACK_REPLICAS", "4"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->limits.redis_url, "redis://:hunter2-secret@cache:6380/1");
  EXPECT_EQ(c->limits.redis_fallback_replicas, 4);
  const std::string shown = configToJson(*c);
  EXPECT_EQ(shown.find("hunter2-secret"), std::string::npos) << shown;
  EXPECT_NE(shown.find("redis://:***@cache:6380/1"), std::string::npos) << shown;

  for (const auto& env : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"LATENTGATE_LIMITS_REDIS_URL", "hunter2-secret"}},
           {{"LATENTGATE_LIMITS_REDIS_URL", "rediss://:hunter2-secret@cache"}},
           {{"LATENTGATE_LIMITS_REDIS_COMMAND_TIMEOUT_MS", "0"}},
           {{"LATENTGATE_LIMITS_REDIS_FALLBACK_REPLICAS", "0"}},
           {{"LATENTGATE_LIMITS_REDIS_RESERVATION_TTL_S", "30"}},
           // With Redis, a reservation outlives the longest request.
           {{"LATENTGATE_LIMITS_REDIS_URL", "redis://cache"}, {"LATENTGATE_SERVER_REQUEST_TIMEOUT_MS", "1200000"}}}) {
    sources.environment = {env.begin(), env.end()};
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << env.front().first;
    EXPECT_NE(bad.status().message().find("limits.redis_"), std::string::npos) << bad.status().message();
    EXPECT_EQ(bad.status().message().find("hunter2-secret"), std::string::npos) << bad.status().message();
  }
  // Without Redis the TTL is not tied to the request timeout.
  sources.environment = {{"LATENTGATE_SERVER_REQUEST_TIMEOUT_MS", "1200000"}};
  EXPECT_TRUE(loadConfig(sources).isOk());
}

// Issue 21, items 7-9: the limits' defaults, a size with a suffix, and each
// bad value a clear start error naming its field.
TEST(ConfigTest, StorageBlockingPoolAndSignInLimitsAreValidated) {
  ConfigSources sources;
  auto c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.max_stored_response_bytes, int64_t{4} << 20);
  EXPECT_EQ(c->server.blocking_threads, 2);
  EXPECT_EQ(c->server.blocking_max_queued, 256);
  EXPECT_EQ(c->server.blocking_max_queued_per_team, 32);
  EXPECT_EQ(c->server.dashboard_sessions_per_key, 8);
  EXPECT_EQ(c->server.dashboard_sign_in_failures_per_minute, 20);
  EXPECT_EQ(c->server.dashboard_sign_ins_per_key_per_minute, 10);
  EXPECT_EQ(c->limits.key_usage_queries_per_minute, 60);
  sources.environment = {{"LATENTGATE_SERVER_MAX_STORED_RESPONSE_BYTES", "1MiB"},
                         {"LATENTGATE_LIMITS_KEY_USAGE_QUERIES_PER_MINUTE", "0"}};
  c = loadConfig(sources);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->server.max_stored_response_bytes, int64_t{1} << 20);
  EXPECT_EQ(c->limits.key_usage_queries_per_minute, 0);
  for (const auto& [env, value, field] :
       {std::tuple{"LATENTGATE_SERVER_MAX_STORED_RESPONSE_BYTES", "100", "server.max_stored_response_bytes"},
        std::tuple{"LATENTGATE_SERVER_BLOCKING_THREADS", "0", "server.blocking_threads"},
        std::tuple{"LATENTGATE_SERVER_BLOCKING_MAX_QUEUED", "0", "server.blocking_max_queued"},
        std::tuple{"LATENTGATE_SERVER_BLOCKING_MAX_QUEUED_PER_TEAM", "257", "server.blocking_max_queued_per_team"},
        std::tuple{"LATENTGATE_SERVER_DASHBOARD_SESSIONS_PER_KEY", "0", "server.dashboard_sessions_per_key"},
        std::tuple{"LATENTGATE_SERVER_DASHBOARD_SIGN_IN_FAILURES_PER_MINUTE", "-1",
                   "server.dashboard_sign_in_failures_per_minute"},
        std::tuple{"LATENTGATE_LIMITS_KEY_USAGE_QUERIES_PER_MINUTE", "-1", "limits.key_usage_queries_per_minute"}}) {
    sources.environment = {{env, value}};
    auto bad = loadConfig(sources);
    ASSERT_FALSE(bad.isOk()) << env;
    EXPECT_NE(bad.status().message().find(field), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace lg

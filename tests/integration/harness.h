// Harness: the whole server as `latentgate serve` builds it
// (proxy/server/server.h), for the integration tests: the demo model's
// architecture cut to 2 layers (random weights, the real DeepSeek-V3
// tokenizer of 129,280 ids, so that every chat prompt is servable), loaded
// by the commands' own loader (cli/engine_loader.h), a tier-0 prefix cache,
// and a data directory of its own (billing store, admin key, TLS material)
// removed at the end. The server listens on 127.0.0.1 at a free port, over
// TLS with the CA it made (caFile()).
//
// The defaults keep a test quick on two shared cores: a 512-token context,
// 16-token cache blocks, 256 pool blocks, 8 running sequences, 256 tokens a
// step, and no end-of-sequence id, so that a reply has exactly max_tokens
// tokens. A test changes what it needs in HarnessOptions::config.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cache/prefix_cache.h"
#include "cli/engine_loader.h"
#include "cli/prefix_cache_setup.h"
#include "common/status.h"
#include "config/options.h"
#include "proxy/server/server.h"
#include "tests/integration/curl_client.h"
#include "tests/support/temp_dir.h"

namespace lg::test {

// The model every integration test serves (written once per process).
const std::string& integrationModelDir();

struct HarnessOptions {
  // As `serve` reads it; start() sets data_dir and engine.model_dir.
  Config config = defaultConfig();
  // The scheduler's; nullopt: serving.* with no end-of-sequence id.
  std::optional<serving::SchedulerOptions> scheduler;
  proxy::ServerHooks hooks;
  bool cache = true;  // a tier-0 prefix cache (cache.enabled)
  bool disk = false;  // ... with the disk tier `serve` opens (cache.disk_path, under data_dir)
  // A data directory to use (a restart: another harness's, kept by the
  // test); empty: a private one, removed with the harness.
  std::string data_dir;

  static Config defaultConfig();
};

class Harness {
 public:
  static Result<std::unique_ptr<Harness>> start(HarnessOptions options = {});
  ~Harness();

  proxy::Server& server() { return *server_; }
  cache::PrefixCache* cache() { return cache_.index.get(); }
  engine::Backend& backend() { return *engine_.backend; }
  const text::Tokenizer& tokenizer() const { return *engine_.tokenizer; }
  const text::ChatTemplate& chatTemplate() const { return *engine_.chat_template; }
  const Config& config() const { return config_; }

  // "https://127.0.0.1:PORT" + path.
  std::string url(std::string_view path = "") const;
  uint16_t port() const { return server_->port(); }
  const std::string& caFile() const { return server_->tls().ca_cert_path; }
  const std::string& adminKey() const { return admin_key_; }
  const std::string& dataDir() const { return config_.data_dir; }
  // A new API key of `team`, made in the key store.
  std::string newKey(const std::string& team, const std::string& name = "integration test");
  // curl over TLS to this server, as `key` (Authorization: Bearer; empty:
  // none), with `body` as JSON unless it is null; `extra` curl arguments
  // come first.
  proxy::testing::CurlReply call(const std::string& method, const std::string& path, const std::string& key,
                                 const nlohmann::json& body = nullptr, std::vector<std::string> extra = {}) const;
  // The request's ledger entry once committed (a commit may trail the
  // response's last byte), waiting up to `wait`; nullopt: none came.
  std::optional<billing::LedgerEntry> ledgerEntry(const std::string& request_id,
                                                  std::chrono::milliseconds wait = std::chrono::seconds(30));
  // Stops the server (its streams get `grace`); the harness keeps its data.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0)) { server_->stop(grace); }

 private:
  Harness() = default;

  TempDir data_{"lg_integration"};
  Config config_;
  cli::LoadedEngine engine_;
  cli::OpenedCache cache_;
  std::unique_ptr<proxy::Server> server_;
  std::string admin_key_;
};

// The fixture of the tests that need one server and one key (of team-a).
class OneKeyServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Harness::start(HarnessOptions{});
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    harness_ = std::move(started).value();
    key_ = harness_->newKey("team-a");
  }
  proxy::Server& server() { return harness_->server(); }
  // As the fixture's key unless `key` names another.
  proxy::testing::CurlReply call(const std::string& method, const std::string& path,
                                 const nlohmann::json& body = nullptr, const std::string& key = "",
                                 std::vector<std::string> extra = {}) const {
    return harness_->call(method, path, key.empty() ? key_ : key, body, std::move(extra));
  }
  // The request's ledger entry; the test fails when none is committed in 30 s.
  billing::LedgerEntry entryOf(const std::string& request_id) const {
    std::optional<billing::LedgerEntry> e = harness_->ledgerEntry(request_id);
    if (!e) ADD_FAILURE() << "no ledger entry for " << request_id;
    return e.value_or(billing::LedgerEntry{});
  }

  std::unique_ptr<Harness> harness_;
  std::string key_;
};

}  // namespace lg::test

#include "tests/integration/harness.h"

#include <fstream>
#include <mutex>
#include <thread>

#include "cache/cache_config.h"
#include "engine/model/presets.h"
#include "serving/serving_config.h"

namespace lg::test {

const std::string& integrationModelDir() {
  // Written once per process and removed at its end (a static TempDir).
  static TempDir* dir = new TempDir("lg_integration_model");
  static const std::string path = [] {
    const std::string p = dir->path() + "/demo";
    auto config = engine::presetConfig("demo");
    if (!config.isOk()) return std::string();
    config->num_hidden_layers = 2;  // one dense layer, one MoE layer
    if (!engine::writeRandomCheckpoint(*config, p, {}).isOk()) return std::string();
    return p;
  }();
  static std::once_flag cleanup;
  std::call_once(cleanup, [] { std::atexit([] { delete dir; }); });
  return path;
}

Config HarnessOptions::defaultConfig() {
  Config c;
  c.server.listen = "127.0.0.1:0";
  c.server.io_threads = 2;
  c.server.header_timeout_ms = 5000;
  c.server.idle_timeout_ms = 5000;
  c.server.request_timeout_ms = 60000;
  c.engine.threads = 2;
  c.engine.max_context = 512;
  c.engine.pool_blocks = 256;
  c.cache.block_tokens = 16;
  c.serving.step_tokens = 256;
  c.serving.max_running = 8;
  return c;
}

Result<std::unique_ptr<Harness>> Harness::start(HarnessOptions options) {
  std::unique_ptr<Harness> h(new Harness());
  h->config_ = std::move(options.config);
  h->config_.data_dir = options.data_dir.empty() ? h->data_.path() : options.data_dir;
  h->config_.engine.model_dir = integrationModelDir();
  if (h->config_.engine.model_dir.empty()) return internalError("writing the integration model failed");
  cli::EngineLoadOptions load;
  load.model_dir = h->config_.engine.model_dir;
  load.terminal_progress = false;
  LG_ASSIGN_OR_RETURN(h->engine_, cli::loadEngine(h->config_, load));
  if (options.cache) {
    // Tier 0 only unless asked: the disk tier has tests of its own (tests/cache/).
    const std::string disk = options.disk ? cache::diskTierOptions(h->config_).path : std::string();
    LG_ASSIGN_OR_RETURN(h->cache_,
                        cli::openPrefixCache(h->config_, disk, *h->engine_.backend, cli::CacheUser::kServer));
  }
  proxy::EngineParts parts;
  parts.model_id = "demo";
  parts.tokenizer = h->engine_.tokenizer.get();
  parts.chat_template = &*h->engine_.chat_template;
  parts.backend = h->engine_.backend.get();
  parts.cache = h->cache_.index.get();
  if (options.scheduler) {
    parts.scheduler = *options.scheduler;
  } else {
    serving::SchedulerOptions s = serving::schedulerOptions(h->config_, h->engine_.backend->config());
    s.eos_token_ids = {};  // random weights: replies run to max_tokens
    parts.scheduler = s;
  }
  LG_ASSIGN_OR_RETURN(h->server_, proxy::Server::start(h->config_, std::move(parts), std::move(options.hooks)));
  std::ifstream admin_file(h->server_->adminKeyPath());
  std::getline(admin_file, h->admin_key_);
  if (h->admin_key_.empty()) return internalError("no admin key in " + h->server_->adminKeyPath());
  return h;
}

Harness::~Harness() {
  if (server_) server_->stop(std::chrono::milliseconds(0));
  server_.reset();  // before the cache and the engine it serves with
}

std::string Harness::url(std::string_view path) const { return server_->url() + std::string(path); }

std::string Harness::newKey(const std::string& team, const std::string& name) {
  auto created = server_->keys().create(team, name);
  return created.isOk() ? created->second : std::string();
}

proxy::testing::CurlReply Harness::call(const std::string& method, const std::string& path, const std::string& key,
                                        const nlohmann::json& body, std::vector<std::string> extra) const {
  if (!key.empty()) extra.insert(extra.end(), {"-H", "Authorization: Bearer " + key});
  if (!body.is_null()) extra.insert(extra.end(), {"-H", "content-type: application/json", "--data-binary", body.dump()});
  return proxy::testing::curlOverTls(caFile(), port(), method, path, extra, 120);
}

std::optional<billing::LedgerEntry> Harness::ledgerEntry(const std::string& request_id,
                                                         std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  do {
    auto found = server_->ledger().find(request_id);
    if (found.isOk() && found->has_value()) return **found;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

}  // namespace lg::test

// instant_gateway: `latentgate serve`'s server object (proxy/server/server.h)
// over an engine that answers at once (instant_backend.h), so that the
// gateway benchmark measures the gateway alone: TLS, HTTP, JSON, rendering
// and tokenizing, admission, the scheduler's bookkeeping, the prefix cache,
// billing with its synced ledger commits, and the responses. Everything but
// the forward pass is the real server's.
//
//   instant_gateway --data-dir DIR [--listen HOST:PORT] [--model DIR] [--config FILE]
//
// It prints the line `serve` prints ("... is serving MODEL at URL/v1"), so
// scripts/bench-gateway.sh starts it as it starts `serve`, and stops on
// SIGINT or SIGTERM. A benchmark tool only: never installed.
#include <signal.h>

#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "bench/gateway/instant_backend.h"
#include "cli/engine_loader.h"
#include "cli/prefix_cache_setup.h"
#include "config/config.h"
#include "engine/backend_config.h"
#include "proxy/server/server.h"

namespace {

int fail(const std::string& what, const lg::Status& s) {
  std::cerr << "instant_gateway: " << what << ": " << s.toString() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LatentGate's server over an engine that answers at once (a benchmark tool)"};
  std::string config_file, data_dir = "./data", listen = "127.0.0.1:8443", model_dir;
  app.add_option("--config", config_file, "Configuration file");
  app.add_option("--data-dir", data_dir, "Data directory");
  app.add_option("--listen", listen, "HOST:PORT");
  app.add_option("--model", model_dir, "Model directory (default: the demo model under DATA/models/demo)");
  CLI11_PARSE(app, argc, argv);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  lg::ConfigSources sources;
  sources.file = config_file;
  sources.environment = lg::processEnvironment();
  sources.flags = {{"data_dir", data_dir}, {"server.listen", listen}};
  if (!model_dir.empty()) sources.flags.emplace_back("engine.model_dir", model_dir);
  auto config = lg::loadConfig(sources);
  if (!config.isOk()) return fail("configuration", config.status());
  auto dir = lg::cli::servedModelDir(*config, std::cerr);
  if (!dir.isOk()) return fail("demo model", dir.status());

  // The tokenizer and the template as serve loads them; the model's weights
  // mapped, not read.
  lg::cli::EngineLoadOptions load;
  load.model_dir = *dir;
  load.terminal_progress = false;
  load.prefetch = false;
  auto engine = lg::cli::loadEngine(*config, load);
  if (!engine.isOk()) return fail("engine", engine.status());
  auto model = lg::engine::Model::load(*dir);
  if (!model.isOk()) return fail("model", model.status());
  // A token that decodes to plain text ("a" when the vocabulary has it).
  auto a = engine->tokenizer->encode("a");
  const int32_t token = a.isOk() && a->size() == 1 ? (*a)[0] : 0;
  auto backend = lg::bench::createInstantBackend(std::move(model).value(), lg::engine::backendOptions(*config), token);
  if (!backend.isOk()) return fail("instant backend", backend.status());
  engine->backend.reset();  // the real one is not used
  lg::Result<lg::cli::OpenedCache> cache = lg::cli::OpenedCache{};
  if (config->cache.enabled) cache = lg::cli::openPrefixCache(*config, "", **backend);  // tier 0
  if (!cache.isOk()) return fail("prefix cache", cache.status());

  lg::proxy::EngineParts parts;
  parts.model_id = std::filesystem::path(*dir).filename().string();
  parts.tokenizer = engine->tokenizer.get();
  parts.chat_template = &*engine->chat_template;
  parts.backend = backend->get();
  parts.cache = cache->index.get();
  auto server = lg::proxy::Server::start(*config, parts);
  if (!server.isOk()) return fail("server", server.status());
  std::cout << "instant_gateway is serving " << parts.model_id << " at " << (*server)->url() << "/v1 (an engine that "
            << "answers at once)\n"
            << std::flush;
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  (*server)->stop(std::chrono::seconds(2));
  return 0;
}

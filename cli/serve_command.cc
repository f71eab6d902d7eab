// `latentgate serve [--config FILE] [--model DIR] [--data-dir DIR] [--listen HOST:PORT]`
// (--config and --data-dir are global flags, cli/global_flags.h)
// The gateway: loads the model (the random-weight `demo` preset, made under
// DATA/models/demo at first start, when none is given), the prefix cache
// (tier 0 + DATA/kv), the scheduler, the API keys, stored responses, the
// prices, the ledger and budgets (DATA/billing) and the TLS material (a local CA under
// DATA/tls), serves the OpenAI-compatible API until SIGINT or SIGTERM, then
// stops accepting, lets streams finish for a few seconds and persists the
// cache. The loading is the commands' one loader (engine_loader.h); the
// rest is the server object (proxy/server/server.h). docs/gateway.md.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cache/cache_config.h"
#include "cli/commands.h"
#include "cli/engine_loader.h"
#include "cli/global_flags.h"
#include "cli/prefix_cache_setup.h"
#include "proxy/server/server.h"

namespace lg::cli {
namespace {

struct ServeArgs {
  std::string model_dir;
  std::string listen;
};

constexpr auto kDrainGrace = std::chrono::seconds(10);

int fail(std::string_view what, const Status& s) {
  std::cerr << "latentgate serve: " << what << ": " << s.toString() << "\n";
  return 2;
}

// What a person starting the server needs to know: where it serves, what
// clients trust, where the admin key is, and how to make a first call.
void printWelcome(const Config& config, const proxy::Server& server, const std::string& model_id,
                  const std::vector<cache::SharedGrant>& grants) {
  const std::string url = server.url();
  const std::string& ca = server.tls().ca_cert_path;
  const bool tls_on = !server.plainHttp();
  std::cout << "LatentGate is serving " << model_id << " at " << url << "/v1\n";
  if (tls_on && !ca.empty()) std::cout << "  clients trust the local CA " << ca << "\n";
  if (server.adminKeyCreated()) {
    std::cout << "  a new admin key was written to " << server.adminKeyPath() << " (mode 0600)\n";
  } else if (config.admin_key.empty()) {
    std::cout << "  the admin key is in " << server.adminKeyPath() << "\n";
  } else {
    std::cout << "  the admin key is LATENTGATE_ADMIN_KEY\n";
  }
  for (const cache::SharedGrant& g : grants) {
    std::string teams;
    for (const cache::TeamNamespace& t : g.teams) teams += (teams.empty() ? "" : ", ") + std::string(t.id());
    std::cout << "  shared cache namespace " << g.shared.name() << " (read by " << (teams.empty() ? "no team" : teams)
              << "): publish a prefix into it with POST /admin/shared-prefixes\n";
  }
  std::cout << "  metrics: GET " << url << "/metrics with the admin key"
            << (config.server.metrics_token.empty() ? "" : " or server.metrics_token") << " as a Bearer token\n";
  const std::string cacert = tls_on && !ca.empty() ? " --cacert " + ca : "";
  std::cout << "Make an API key, then call the API:\n"
            << "  curl -s" << cacert << " " << url << "/admin/keys -H \"Authorization: Bearer $(cat "
            << server.adminKeyPath() << ")\" -d '{\"team\": \"my-team\", \"name\": \"me\"}'\n"
            << "  curl -s" << cacert << " " << url << "/v1/chat/completions -H \"Authorization: Bearer $KEY\" \\\n"
            << "    -H 'content-type: application/json' -d '{\"model\": \"" << model_id
            << "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'\n"
            << "  # Node (openai SDK): NODE_EXTRA_CA_CERTS=" << ca << " and new OpenAI({baseURL: \"" << url
            << "/v1\", apiKey: KEY})\n"
            << "  # Python: SSL_CERT_FILE=" << ca << "; Codex CLI: CODEX_CA_CERTIFICATE=" << ca << "\n"
            << std::flush;
}

int runServe(const GlobalFlags& flags, const ServeArgs& args) {
  std::vector<std::pair<std::string, std::string>> shorthands;
  if (!args.model_dir.empty()) shorthands.emplace_back("engine.model_dir", args.model_dir);
  if (!args.listen.empty()) shorthands.emplace_back("server.listen", args.listen);
  auto loaded = flags.load(shorthands);
  if (!loaded.isOk()) {
    std::cerr << "latentgate: " << loaded.status().toString() << "\n";
    return 2;
  }
  const Config& config = *loaded;
  // Block the stop signals before any thread starts, so that only sigwait() sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto model_dir = servedModelDir(config, std::cerr);
  if (!model_dir.isOk()) return fail("demo model", model_dir.status());
  EngineLoadOptions load;
  load.model_dir = *model_dir;
  EngineLoadStep step{};
  auto engine = loadEngine(config, load, &step);
  if (!engine.isOk()) return fail(engineLoadStepName(step), engine.status());
  Result<OpenedCache> cache = OpenedCache{};
  if (config.cache.enabled) {
    cache = openPrefixCache(config, cache::diskTierOptions(config).path, *engine->backend, CacheUser::kServer);
  }
  if (!cache.isOk()) return fail("prefix cache", cache.status());
  if (!config.cache.enabled) std::cerr << "latentgate serve: the prefix cache is off (cache.enabled = false)\n";
  auto grants = cache::sharedGrants(config);
  if (!grants.isOk()) return fail("cache.shared_namespaces", grants.status());

  proxy::EngineParts parts;
  parts.model_id = std::filesystem::path(*model_dir).filename().string();
  parts.tokenizer = engine->tokenizer.get();
  parts.chat_template = &*engine->chat_template;
  parts.backend = engine->backend.get();
  parts.cache = cache->index.get();
  auto server = proxy::Server::start(config, parts);
  if (!server.isOk()) return fail("server", server.status());
  // Grants mean nothing without the cache (cache.enabled = false).
  printWelcome(config, **server, parts.model_id, cache->index ? *grants : std::vector<cache::SharedGrant>{});

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::cout << "latentgate serve: signal " << signal_number << ": stopping (in-flight streams get "
            << std::chrono::seconds(kDrainGrace).count() << " s)\n"
            << std::flush;
  (*server)->stop(kDrainGrace);
  server->reset();
  if (cache->disk) {
    if (Status s = cache->index->persistAll(/*flush_files=*/true); !s.isOk()) {
      std::cerr << "latentgate serve: prefix cache: " << s.toString() << "\n";
    }
  }
  return 0;
}

}  // namespace

Command addServeCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API over HTTPS");
  auto args = std::make_shared<ServeArgs>();
  cmd->add_option("--model", args->model_dir, "Model directory (default: the demo model under DATA/models/demo)");
  cmd->add_option("--listen", args->listen, "HOST:PORT to listen on (default: 127.0.0.1:8443; port 0: any free port)");
  flags.addTo(*cmd);
  return {cmd, [&flags, args]() -> int { return runServe(flags, *args); }};
}

}  // namespace lg::cli

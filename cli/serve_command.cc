// `latentgate serve [--config FILE] [--model DIR] [--data-dir DIR] [--listen HOST:PORT]`
// (--config and --data-dir are global flags, cli/global_flags.h)
// The gateway: loads the model (the random-weight `demo` preset, made under
// DATA/models/demo at first start, when none is given), the prefix cache
// (tier 0 + DATA/kv), the scheduler, the API keys, stored responses, the
// prices, the ledger and budgets (DATA/billing) and the TLS material (a local CA under
// DATA/tls), serves the OpenAI-compatible API until SIGINT or SIGTERM, then
// stops accepting, lets streams finish for a few seconds and persists the
// cache. docs/gateway.md.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "billing/billing_db.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/budgets.h"
#include "billing/ledger_metrics.h"
#include "cache/cache_config.h"
#include "cli/commands.h"
#include "cli/global_flags.h"
#include "cli/prefix_cache_setup.h"
#include "cli/terminal_progress.h"
#include "common/metrics.h"
#include "common/unix_time.h"
#include "engine/backend_config.h"
#include "engine/backend_factory.h"
#include "engine/model/presets.h"
#include "proxy/billing_api.h"
#include "proxy/blocking_pool.h"
#include "proxy/budget_api.h"
#include "proxy/dashboard.h"
#include "proxy/gateway.h"
#include "proxy/health_routes.h"
#include "proxy/http_server.h"
#include "proxy/metrics.h"
#include "proxy/openai/prompt_encoder.h"
#include "proxy/request_metrics.h"
#include "proxy/response_store.h"
#include "proxy/router.h"
#include "proxy/server_config.h"
#include "proxy/shared_prefixes.h"
#include "proxy/tls_material.h"
#include "serving/serving_config.h"
#include "serving/serving_metrics.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::cli {
namespace {

struct ServeArgs {
  std::string model_dir;
  std::string listen;
};

constexpr auto kDrainGrace = std::chrono::seconds(10);

int fail(const std::string& what, const Status& s) {
  std::cerr << "latentgate serve: " << what << ": " << s.toString() << "\n";
  return 2;
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

  // GET /metrics (docs/metrics.md). Declared before the scheduler: the
  // engine thread reports generations into them until it ends.
  metrics::Registry metrics_registry;
  proxy::GenerationMetrics generation_metrics;
  billing::LedgerMetrics ledger_metrics;  // the ledger's commits and costs by team (billing/ledger_metrics.h)
  // Opened once the ledger is, but declared here: it outlives the ledger,
  // whose last commits at shutdown count their costs and release their
  // reservations, and the scheduler, whose requests hold reservations.
  std::unique_ptr<billing::Budgets> budgets;

  std::string model_dir = config.engine.model_dir;
  if (model_dir.empty()) {
    model_dir = config.data_dir + "/models/demo";
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
      std::cerr << "latentgate serve: making the demo model in " << model_dir << " (random weights)\n";
      auto preset = engine::presetConfig("demo");
      if (!preset.isOk()) return fail("demo preset", preset.status());
      if (Status s = engine::writeRandomCheckpoint(*preset, model_dir, engine::presetInitOptions("demo")); !s.isOk()) return fail("demo model", s);
    }
  }
  auto tokenizer = text::Tokenizer::loadFromDir(model_dir);
  if (!tokenizer.isOk()) return fail("tokenizer", tokenizer.status());
  auto chat_template = text::ChatTemplate::loadFromDir(model_dir);
  if (!chat_template.isOk()) return fail("chat template", chat_template.status());
  engine::ModelLoadOptions load_options;
  load_options.prefetch = true;
  load_options.progress = terminalLoadProgress("loading " + model_dir);
  auto model = engine::Model::load(model_dir, load_options);
  if (!model.isOk()) return fail("model", model.status());
  auto backend = engine::createBackend(config.engine.backend, std::move(model).value(), engine::backendOptions(config));
  if (!backend.isOk()) return fail("backend", backend.status());
  Result<OpenedCache> cache = OpenedCache{};
  if (config.cache.enabled) cache = openPrefixCache(config, cache::diskTierOptions(config).path, **backend);
  if (!cache.isOk()) return fail("prefix cache", cache.status());
  if (!config.cache.enabled) std::cerr << "latentgate serve: the prefix cache is off (cache.enabled = false)\n";
  const serving::SchedulerOptions scheduler_options = serving::schedulerOptions(config, (*backend)->config());
  auto scheduler = serving::Scheduler::create(**backend, cache->index.get(), **tokenizer, scheduler_options);
  if (!scheduler.isOk()) return fail("scheduler", scheduler.status());

  auto billing_db = billing::BillingDb::open(config.data_dir + "/billing");
  if (!billing_db.isOk()) return fail("billing store", billing_db.status());
  auto keys = billing::KeyStore::open(**billing_db);
  if (!keys.isOk()) return fail("API keys", keys.status());
  bool admin_created = false;
  const std::string admin_path = config.data_dir + "/admin.key";
  auto admin = billing::AdminKey::loadOrCreate(config.admin_key, admin_path, &admin_created);
  if (!admin.isOk()) return fail("admin key", admin.status());
  proxy::ResponseStoreOptions response_options;
  response_options.ttl_s = config.server.stored_response_ttl_s;
  proxy::ResponseStore responses(**billing_db, response_options);
  // What expired while the server was down; later sweeps ride on new records.
  for (;;) {
    auto swept = responses.sweepExpired(1000);
    if (!swept.isOk()) return fail("stored responses", swept.status());
    if (*swept < 1000) break;
  }

  // Prices (billing.prices, recorded as a new version when they changed) and
  // the ledger; the ledger outlives the scheduler's engine thread and the
  // server, whose final deliveries run in its commit callbacks.
  const int64_t now_us = unixMicros();
  auto prices = billing::PriceBook::open(**billing_db, billing::PriceTable::fromSetting(config.billing.prices), now_us);
  if (!prices.isOk()) return fail("prices", prices.status());
  auto fingerprints = billing::SystemPromptFingerprinter::open(**billing_db);
  if (!fingerprints.isOk()) return fail("system prompt key", fingerprints.status());
  billing::LedgerOptions ledger_options;
  ledger_options.metrics = &ledger_metrics;
  ledger_options.idempotency_ttl_s = config.billing.idempotency_ttl_s;
  auto ledger = billing::Ledger::open(**billing_db, ledger_options);
  if (!ledger.isOk()) return fail("ledger", ledger.status());
  // Before any request: what was spent is summed from the ledger, and every
  // later commit is counted as it happens.
  auto opened_budgets = billing::Budgets::open(**billing_db, **ledger,
                                               {config.billing.key_budget, config.billing.team_budget}, now_us / 1'000'000);
  if (!opened_budgets.isOk()) return fail("budgets", opened_budgets.status());
  budgets = std::move(opened_budgets).value();

  proxy::TlsMaterial tls;
  auto server_options = proxy::loadHttpServerOptions(config, &tls);
  if (!server_options.isOk()) return fail("server", server_options.status());

  // cache.shared_namespaces: the cache lets each granted team read its
  // shared namespaces, and the gateway names them in the team's lookups.
  auto grants = cache::sharedGrants(config);
  if (!grants.isOk()) return fail("cache.shared_namespaces", grants.status());
  proxy::GatewayOptions gateway_options;
  gateway_options.model_id = std::filesystem::path(model_dir).filename().string();
  gateway_options.aliases = {"deepseek-chat", "deepseek-reasoner"};
  gateway_options.max_context = (*backend)->maxContext();
  gateway_options.limits.max_stop_strings = config.serving.max_stop_strings;
  gateway_options.limits.default_max_tokens = config.server.default_max_tokens;
  gateway_options.rate_limits.per_key = {config.limits.key_requests_per_minute, config.limits.key_tokens_per_minute};
  gateway_options.rate_limits.per_team = {config.limits.team_requests_per_minute, config.limits.team_tokens_per_minute};
  if (cache->index) gateway_options.shared_namespaces = cache::applySharedGrants(*grants, *cache->index);
  gateway_options.metrics = &generation_metrics;
  proxy::openai::PromptEncoder encoder(*chat_template, **tokenizer);
  proxy::Gateway gateway(gateway_options, **scheduler, **tokenizer, encoder, **keys, *admin, &responses,
                         proxy::BillingServices{ledger->get(), prices->get(), budgets.get(), &*fingerprints});
  proxy::BillingApi billing_api(**ledger, **prices, **keys, *admin, budgets.get());
  proxy::BudgetApi budget_api(*budgets, **keys, *admin);
  // Publishing into a shared namespace needs the cache (cache.enabled).
  std::unique_ptr<proxy::SharedPrefixPublisher> shared_prefixes;
  if (cache->index) {
    proxy::SharedPrefixOptions shared_prefix_options;
    shared_prefix_options.model_id = gateway_options.model_id;
    shared_prefix_options.block_tokens = config.cache.block_tokens;
    shared_prefix_options.limits = gateway_options.limits;
    shared_prefix_options.retry = gateway_options.retry;
    for (const cache::SharedGrant& g : *grants) shared_prefix_options.namespaces.push_back(g.shared);
    shared_prefixes = std::make_unique<proxy::SharedPrefixPublisher>(shared_prefix_options, **scheduler, *cache->index,
                                                                      encoder, *admin);
  }
  // GET /dashboard (docs/dashboard.md): the ledger's numbers as the usage API
  // shows them, the budgets, the limits' buckets, and the memory picture
  // /metrics reads.
  const serving::MemoryFacts memory_facts{(*backend)->model().checkpointBytes(),
                                          static_cast<uint64_t>((*backend)->latentLayout().blockBytes())};
  proxy::Dashboard dashboard(**ledger, **keys, *admin, budgets.get(), &gateway.rateLimiter(),
                             proxy::DashboardMemorySources{scheduler->get(), cache->index.get(), memory_facts});
  // The admin API's synced writes and scans wait here, not on an I/O thread.
  proxy::BlockingPool blocking_pool;
  proxy::Router router;
  router.setBlockingPool(&blocking_pool);
  proxy::addHealthRoutes(router, [] { return proxy::Readiness{true, ""}; });
  gateway.addRoutes(router);
  billing_api.addRoutes(router);
  budget_api.addRoutes(router);
  if (shared_prefixes) shared_prefixes->addRoutes(router);
  dashboard.addRoutes(router);
  auto metrics_access = proxy::metricsAccess(*admin, config.server.metrics_token);
  if (!metrics_access.isOk()) return fail("metrics", metrics_access.status());
  serving::addEngineCollectors(metrics_registry, **scheduler, cache->index.get(), memory_facts);
  metrics_registry.add([&generation_metrics](metrics::ExpositionWriter& w) { generation_metrics.collect(w); });
  metrics_registry.add([&ledger_metrics](metrics::ExpositionWriter& w) { ledger_metrics.collect(w); });
  metrics_registry.add([&budgets = *budgets](metrics::ExpositionWriter& w) { budgets.collect(w); });
  proxy::addMetricsRoute(router, metrics_registry, std::move(metrics_access).value());
  // Counts every request by route and status; built once every route is added.
  proxy::RequestMetrics request_metrics(router);
  metrics_registry.add([&request_metrics](metrics::ExpositionWriter& w) { request_metrics.collect(w); });
  auto server = proxy::HttpServer::start(*server_options, request_metrics.handler());
  if (!server.isOk()) return fail("server", server.status());
  metrics_registry.add([&server = **server](metrics::ExpositionWriter& w) {
    proxy::collectHttpServerStats(w, server.stats());
  });

  const bool tls_on = !server_options->plain_http;
  const std::string host = server_options->host == "0.0.0.0" || server_options->host == "::" ? "127.0.0.1"
                                                                                                 : server_options->host;
  const std::string url = std::string(tls_on ? "https" : "http") + "://" +
                          (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                          std::to_string((*server)->port());
  std::cout << "LatentGate is serving " << gateway_options.model_id << " at " << url << "/v1\n";
  if (tls_on && !tls.ca_cert_path.empty()) std::cout << "  clients trust the local CA " << tls.ca_cert_path << "\n";
  if (admin_created) {
    std::cout << "  a new admin key was written to " << admin_path << " (mode 0600)\n";
  } else if (config.admin_key.empty()) {
    std::cout << "  the admin key is in " << admin_path << "\n";
  } else {
    std::cout << "  the admin key is LATENTGATE_ADMIN_KEY\n";
  }
  // Grants mean nothing without the cache (cache.enabled = false).
  for (const cache::SharedGrant& g : cache->index ? *grants : std::vector<cache::SharedGrant>{}) {
    std::string teams;
    for (const cache::TeamNamespace& t : g.teams) teams += (teams.empty() ? "" : ", ") + std::string(t.id());
    std::cout << "  shared cache namespace " << g.shared.name() << " (read by " << (teams.empty() ? "no team" : teams)
              << "): publish a prefix into it with POST /admin/shared-prefixes\n";
  }
  std::cout << "  metrics: GET " << url << "/metrics with the admin key"
            << (config.server.metrics_token.empty() ? "" : " or server.metrics_token") << " as a Bearer token\n";
  const std::string cacert = tls_on && !tls.ca_cert_path.empty() ? " --cacert " + tls.ca_cert_path : "";
  std::cout << "Make an API key, then call the API:\n"
            << "  curl -s" << cacert << " " << url << "/admin/keys -H \"Authorization: Bearer $(cat " << admin_path
            << ")\" -d '{\"team\": \"my-team\", \"name\": \"me\"}'\n"
            << "  curl -s" << cacert << " " << url << "/v1/chat/completions -H \"Authorization: Bearer $KEY\" \\\n"
            << "    -H 'content-type: application/json' -d '{\"model\": \"" << gateway_options.model_id
            << "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'\n"
            << "  # Node (openai SDK): NODE_EXTRA_CA_CERTS=" << tls.ca_cert_path
            << " and new OpenAI({baseURL: \"" << url << "/v1\", apiKey: KEY})\n"
            << "  # Python: SSL_CERT_FILE=" << tls.ca_cert_path << "; Codex CLI: CODEX_CA_CERTIFICATE="
            << tls.ca_cert_path << "\n"
            << std::flush;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::cout << "latentgate serve: signal " << signal_number << ": stopping (in-flight streams get "
            << std::chrono::seconds(kDrainGrace).count() << " s)\n"
            << std::flush;
  const auto deadline = std::chrono::steady_clock::now() + kDrainGrace;
  (*scheduler)->shutdown(kDrainGrace);  // refuses what waits; running streams finish or are cancelled
  (*server)->stop(deadline);
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

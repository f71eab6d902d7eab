#include "proxy/server/server.h"

#include "billing/control_plane.h"
#include "billing/ledger_metrics.h"
#include "billing/metering.h"
#include "billing/postgres/ledger_drain.h"
#include "billing/postgres/pg_control_plane.h"
#include "billing/postgres/pg_fingerprint_key.h"
#include "billing/postgres/pg_ledger_reader.h"
#include "billing/postgres/pg_response_index.h"
#include "billing/prompt_fingerprint.h"
#include "billing/redis/redis_budget_view.h"
#include "billing/redis/redis_limits.h"
#include "billing/spend_source.h"
#include "cache/cache_config.h"
#include "cache/kv_events/kv_event_publisher.h"
#include "common/metrics.h"
#include "common/unix_time.h"
#include "proxy/admin/billing_api.h"
#include "proxy/admin/budget_api.h"
#include "proxy/admin/keys_api.h"
#include "proxy/admin/metrics_route.h"
#include "proxy/admin/replica_purges.h"
#include "proxy/admin/responses_api.h"
#include "proxy/admin/cache_curves.h"
#include "proxy/admin/shared_prefixes.h"
#include "proxy/admin/prefix_breakers_api.h"
#include "proxy/admin/teams_api.h"
#include "proxy/dashboard/dashboard.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/gateway.h"
#include "proxy/gateway/generation.h"
#include "proxy/gateway/generation_metrics.h"
#include "proxy/gateway/prefix_breakers.h"
#include "proxy/gateway/reply_ids.h"
#include "proxy/gateway/snippet_consent.h"
#include "proxy/gateway/response_store.h"
#include "proxy/http/blocking_pool.h"
#include "proxy/http/health_routes.h"
#include "proxy/http/proxy_log.h"
#include "proxy/http/http_server.h"
#include "proxy/http/request_metrics.h"
#include "proxy/http/router.h"
#include "proxy/http/server_config.h"
#include "proxy/openai/prompt_encoder.h"
#include "serving/serving_config.h"
#include "serving/serving_metrics.h"

namespace lg::proxy {

// Declared in the order they are built; destroyed in reverse, so that the
// HTTP server and the scheduler go before what their handlers and sinks use,
// and the budgets outlive the ledger whose last commits settle them.
struct Server::Parts {
  Config config;
  EngineParts engine;
  ServerHooks hooks;

  metrics::Registry registry;
  GenerationMetrics generation_metrics;
  // Chat replies' generated ids (cache.reply_ids_*); the engine thread records
  // into it, so it outlives the scheduler.
  std::unique_ptr<ReplyIdStore> reply_ids;
  // Which prompts break their own prefix (cache.prefix_breakers_*); fed by
  // admitted requests, read by the admin API and the dashboard.
  std::unique_ptr<PrefixBreakers> prefix_breakers;
  billing::LedgerMetrics ledger_metrics;

  std::unique_ptr<billing::BillingDb> db;
  // Keys, teams, budgets and prices change through it (billing/control_plane.h):
  // the billing store alone, or, with billing.postgres_url, PostgreSQL shared
  // by every replica, whose follower applies the others' changes here.
  std::unique_ptr<billing::ControlPlane> control;
  billing::pg::PgControlPlane* pg_control = nullptr;  // `control`, when it is PostgreSQL's
  std::unique_ptr<billing::KeyStore> keys;
  // The teams' consents to prompt snippets in the prefix-breaker report (snippets/).
  std::unique_ptr<SnippetConsents> snippet_consents;
  std::optional<billing::AdminKey> admin;
  std::string admin_path;
  bool admin_created = false;
  // With billing.postgres_url: which replica holds each stored response.
  std::unique_ptr<billing::pg::PgResponseIndex> response_index;
  std::unique_ptr<ResponseStore> responses;
  std::unique_ptr<billing::PriceBook> prices;
  std::optional<billing::SystemPromptFingerprinter> fingerprints;
  std::unique_ptr<billing::Budgets> budgets;  // observes the ledger: opened after it, but must outlive it
  // What the usage API, the ledger routes and the dashboard read: the ledger
  // of record in PostgreSQL when billing.postgres_url is set (every replica
  // shows the same numbers), else this ledger. Chosen once, here; declared
  // before what reads it (the spend source), so it goes after them.
  std::unique_ptr<billing::pg::PgLedgerReader> pg_reads;
  const billing::LedgerReads* reads = nullptr;
  // limits.redis_url: budgets and rate limits shared by the replicas. Made
  // after the ledger, which it observes too (after the budgets), and goes
  // after it; its spend source reads the budgets and the ledger.
  std::unique_ptr<billing::SpendSource> spend_source;
  std::unique_ptr<billing::redis::RedisLimits> redis_limits;
  // What the usage API, the admin budget API and the dashboard show of
  // budgets: with limits.redis_url the replicas' shared counts in Redis (its
  // own connections; it reads the budgets and the spend source), else the
  // budgets' own (this replica's) count.
  std::unique_ptr<billing::redis::RedisBudgetView> redis_budget_view;
  const billing::BudgetView* budget_view = nullptr;
  std::unique_ptr<billing::Ledger> ledger;
  // billing.postgres_url: drains the ledger's outbox. stop() flushes the
  // ledger and then makes the drain's final attempt; it goes before the
  // ledger (what the ledger commits after that attempt stays in the outbox
  // for the next start).
  std::unique_ptr<billing::pg::LedgerDrain> drain;
  std::unique_ptr<billing::RateLimiter> rate_limiter;
  std::unique_ptr<billing::Metering> metering;

  TlsMaterial tls;
  HttpServerOptions server_options;
  std::unique_ptr<openai::PromptEncoder> encoder;
  std::unique_ptr<StructuredOutput> structured;
  std::unique_ptr<Admission> admission;
  Router router;
  std::unique_ptr<RequestMetrics> request_metrics;

  // The engine thread's users from here on: the scheduler goes before them
  // (its sinks call the generation call, the gateway's responder and the
  // stored responses), and the server before the scheduler.
  std::unique_ptr<Generation> generation;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<KeysApi> keys_api;
  std::unique_ptr<TeamsApi> teams_api;
  std::unique_ptr<BillingApi> billing_api;
  std::unique_ptr<BudgetApi> budget_api;
  std::unique_ptr<SharedPrefixPublisher> shared_prefixes;
  std::unique_ptr<CacheCurvesApi> cache_curves;
  std::unique_ptr<PrefixBreakersApi> prefix_breakers_api;
  std::unique_ptr<ResponsesAdminApi> responses_api;
  std::unique_ptr<Dashboard> dashboard;
  // Purges here what admins deleted on other replicas (after the parts it uses).
  std::unique_ptr<ReplicaPurges> replica_purges;
  // Runs what is still queued when it is destroyed: after the server
  // stopped, before what the routes' handlers use.
  std::unique_ptr<BlockingPool> blocking_pool;
  std::unique_ptr<serving::Scheduler> scheduler;
  std::unique_ptr<HttpServer> server;
  // cache.kv_events: what the cache holds, published for prefix-aware routers.
  std::unique_ptr<cache::kv_events::KvEventPublisher> kv_events;
  bool stopped = false;

  // The follower goes first: nothing is applied to the stores, nor told to
  // their observers, while the parts are destroyed. The cache outlives the
  // server: it stops telling the publisher before the publisher goes.
  ~Parts() {
    if (pg_control != nullptr) pg_control->stop();
    if (kv_events != nullptr) engine.cache->setBlockEvents(nullptr);
  }

  Status build();
  Status openBilling();
  Status startControlPlane();
  Status startKvEvents();
  void addRoutes();
};

Status Server::Parts::openBilling() {
  LG_ASSIGN_OR_RETURN(db, billing::BillingDb::open(config.data_dir + "/billing"));
  if (config.billing.postgres_url.empty()) {
    control = std::make_unique<billing::LocalControlPlane>(*db);
  } else {
    // Started at the end of build(), once every store and purge listens:
    // the records are synced (seeded from this store the first time) before
    // the server takes its first request.
    billing::pg::ControlSyncOptions control_options;
    control_options.postgres.url = config.billing.postgres_url;
    control_options.postgres.statement_timeout_ms = 10'000;
    control_options.interval = std::chrono::milliseconds(config.billing.control_sync_interval_ms);
    LG_ASSIGN_OR_RETURN(auto pg, billing::pg::PgControlPlane::create(*db, std::move(control_options)));
    pg_control = pg.get();
    control = std::move(pg);
  }
  // The stores load this replica's view of the control records.
  LG_ASSIGN_OR_RETURN(keys, billing::KeyStore::open(*db, *control));
  admin_path = config.data_dir + "/admin.key";
  LG_ASSIGN_OR_RETURN(billing::AdminKey a, billing::AdminKey::loadOrCreate(config.admin_key, admin_path, &admin_created));
  admin.emplace(std::move(a));
  ResponseStoreOptions response_options;
  response_options.ttl_s = config.server.stored_response_ttl_s;
  response_options.max_record_bytes = config.server.max_stored_response_bytes;
  if (pg_control != nullptr) {
    billing::pg::ResponseIndexOptions index_options;
    index_options.postgres.url = config.billing.postgres_url;
    index_options.postgres.statement_timeout_ms = 10'000;
    index_options.replica = pg_control->replicaId();
    index_options.interval = std::chrono::milliseconds(config.billing.control_sync_interval_ms);
    LG_ASSIGN_OR_RETURN(response_index, billing::pg::PgResponseIndex::start(*db, std::move(index_options)));
    response_options.index = response_index.get();
  }
  responses = std::make_unique<ResponseStore>(*db, response_options);
  // What expired while the server was down; later sweeps ride on new records.
  for (;;) {
    LG_ASSIGN_OR_RETURN(int64_t swept, responses->sweepExpired(1000));
    if (swept < 1000) break;
  }
  // Prices (billing.prices is recorded as a new version when it changed, in
  // startControlPlane()) and the ledger; then budgets, which sum what was
  // spent from the ledger before it takes any commit and count every later one.
  const int64_t now_us = unixMicros();
  LG_ASSIGN_OR_RETURN(prices, billing::PriceBook::open(*db, *control));
  // With PostgreSQL, the key every replica shares (the first replica's,
  // adopted into this store by the others), so that one prompt has one
  // fingerprint in PostgreSQL's usage rows; PostgreSQL away at start keys
  // with this store's (logged), never an error.
  if (pg_control != nullptr) {
    billing::pg::PostgresOptions key_options;
    key_options.url = config.billing.postgres_url;
    key_options.statement_timeout_ms = 10'000;
    LG_ASSIGN_OR_RETURN(billing::SystemPromptFingerprinter f,
                        billing::pg::openSharedFingerprinter(*db, key_options, pg_control->replicaId()));
    fingerprints.emplace(std::move(f));
  } else {
    LG_ASSIGN_OR_RETURN(billing::SystemPromptFingerprinter f, billing::SystemPromptFingerprinter::open(*db));
    fingerprints.emplace(std::move(f));
  }
  billing::LedgerOptions ledger_options;
  ledger_options.metrics = &ledger_metrics;
  ledger_options.idempotency_ttl_s = config.billing.idempotency_ttl_s;
  ledger_options.outbox = !config.billing.postgres_url.empty();
  LG_ASSIGN_OR_RETURN(ledger, billing::Ledger::open(*db, ledger_options));
  reads = ledger.get();
  if (ledger_options.outbox) {
    // Its own thread migrates the schema and drains; PostgreSQL away at start
    // (or later) delays the drain, never the server: the outbox holds.
    billing::pg::DrainOptions drain_options;
    drain_options.postgres.url = config.billing.postgres_url;
    drain_options.postgres.statement_timeout_ms = 30'000;
    // Reads connect on first use; until the drain migrated the schema they
    // fail (a 503), as they do while PostgreSQL is away.
    pg_reads = std::make_unique<billing::pg::PgLedgerReader>(drain_options.postgres);
    reads = pg_reads.get();
    drain_options.batch_size = static_cast<size_t>(config.billing.postgres_drain_batch);
    drain_options.interval = std::chrono::milliseconds(config.billing.postgres_drain_interval_ms);
    drain_options.retry_min = std::chrono::milliseconds(config.billing.postgres_retry_min_ms);
    drain_options.retry_max = std::chrono::milliseconds(config.billing.postgres_retry_max_ms);
    drain_options.shutdown_drain = std::chrono::milliseconds(config.billing.postgres_shutdown_drain_ms);
    LG_ASSIGN_OR_RETURN(drain, billing::pg::LedgerDrain::start(*ledger, std::move(drain_options)));
  }
  LG_ASSIGN_OR_RETURN(budgets, billing::Budgets::open(*db, *ledger, {config.billing.key_budget, config.billing.team_budget},
                                                      now_us / 1'000'000, *control));
  billing::RateLimitOptions limits;
  limits.per_key = {config.limits.key_requests_per_minute, config.limits.key_tokens_per_minute};
  limits.per_team = {config.limits.team_requests_per_minute, config.limits.team_tokens_per_minute};
  rate_limiter = std::make_unique<billing::RateLimiter>(limits);
  if (!config.limits.redis_url.empty()) {
    // Redis away at start (or later) refuses budgeted requests and shares
    // out the rate limits; the server starts and serves either way.
    billing::redis::RedisLimitsOptions o;
    o.redis.url = config.limits.redis_url;
    o.redis.connect_timeout_ms = config.limits.redis_connect_timeout_ms;
    o.redis.command_timeout_ms = config.limits.redis_command_timeout_ms;
    o.redis.retry_ms = config.limits.redis_retry_ms;
    o.reservation_ttl = std::chrono::seconds(config.limits.redis_reservation_ttl_s);
    o.rate = limits;
    o.fallback_replicas = config.limits.redis_fallback_replicas;
    // Lost counters are rebuilt from every replica's entries when they are
    // in PostgreSQL (plus this replica's undrained outbox), else from this
    // replica's ledger alone.
    if (pg_reads) {
      spend_source = std::make_unique<billing::RecordSpendSource>(*pg_reads, *ledger);
    } else {
      spend_source = std::make_unique<billing::LedgerSpendSource>(*budgets, *ledger);
    }
    billing::redis::RedisBudgetViewOptions view_options;
    view_options.redis = o.redis;
    view_options.key_prefix = o.key_prefix;
    // One per blocking-pool thread (the tenants' lane and the admin's), the
    // threads its callers run on, so none waits for a connection.
    view_options.connections = static_cast<size_t>(config.server.blocking_threads) + 1;
    view_options.source_counts = pg_reads ? billing::BudgetCounted::kRecords : billing::BudgetCounted::kReplicaLedger;
    LG_ASSIGN_OR_RETURN(redis_limits, billing::redis::RedisLimits::start(std::move(o), *budgets, *spend_source));
    ledger->addObserver(redis_limits.get());
    LG_ASSIGN_OR_RETURN(redis_budget_view,
                        billing::redis::RedisBudgetView::open(std::move(view_options), *budgets, *spend_source));
  }
  budget_view = redis_budget_view ? static_cast<const billing::BudgetView*>(redis_budget_view.get()) : budgets.get();
  metering = std::make_unique<billing::Metering>(
      billing::MeteringServices{ledger.get(), prices.get(), budgets.get(), &*fingerprints});
  return Status::ok();
}

Status Server::Parts::startControlPlane() {
  // With PostgreSQL: migrate, seed an empty table from this store, sync
  // fully (applied to every store, and to the purges of what was deleted
  // elsewhere meanwhile), and follow. A replica that synced before starts on
  // its last view when PostgreSQL is away; one that never did refuses.
  if (pg_control != nullptr) LG_RETURN_IF_ERROR(pg_control->start());
  Status recorded = prices->recordConfigured(billing::PriceTable::fromSetting(config.billing.prices), unixMicros());
  if (!recorded.isOk()) {
    if (pg_control == nullptr || recorded.code() != StatusCode::kUnavailable) return recorded;
    proxyLog()->warn("billing.prices differs from the last configured price table, but PostgreSQL is unreachable: "
                     "not recorded, the prices in force stay; restart this replica once it is back");
  }
  return Status::ok();
}

Status Server::Parts::build() {
  LG_RETURN_IF_ERROR(openBilling());
  LG_ASSIGN_OR_RETURN(server_options, loadHttpServerOptions(config, &tls));
  LG_ASSIGN_OR_RETURN(std::optional<billing::AdminKey> metrics_token, Admission::metricsToken(config.server.metrics_token));
  admission = redis_limits
                  ? std::make_unique<Admission>(*keys, *admin, std::move(metrics_token), *redis_limits, *metering)
                  : std::make_unique<Admission>(*keys, *admin, std::move(metrics_token), *rate_limiter, *metering);

  // cache.shared_namespaces: the cache lets each granted team read its
  // shared namespaces, and the gateway names them in the team's lookups.
  LG_ASSIGN_OR_RETURN(std::vector<cache::SharedGrant> grants, cache::sharedGrants(config));
  // A deleted team's grants ended with it; a team whose id was reused after
  // a deletion is granted in its current generation's namespace.
  for (cache::SharedGrant& g : grants) {
    std::vector<cache::TeamNamespace> teams;
    for (const cache::TeamNamespace& t : g.teams) {
      const std::optional<billing::TeamInfo> info = keys->team(t.id());
      if (info && info->deleted()) continue;
      teams.push_back(info ? cache::TeamNamespace::ofTeam(t.id(), info->generation).value() : t);
    }
    g.teams = std::move(teams);
  }
  const serving::SchedulerOptions scheduler_options =
      engine.scheduler ? *engine.scheduler : serving::schedulerOptions(config, engine.backend->config());
  LG_ASSIGN_OR_RETURN(scheduler, serving::Scheduler::create(*engine.backend, engine.cache, *engine.tokenizer,
                                                             scheduler_options));
  encoder = std::make_unique<openai::PromptEncoder>(*engine.chat_template, *engine.tokenizer);
  generation = std::make_unique<Generation>(*scheduler, *admission, &generation_metrics, openai::RetryAfter{});

  GatewayOptions gateway_options;
  gateway_options.model_id = engine.model_id;
  gateway_options.aliases = {"deepseek-chat", "deepseek-reasoner"};
  gateway_options.max_context = engine.backend->maxContext();
  gateway_options.limits.max_stop_strings = config.serving.max_stop_strings;
  gateway_options.limits.default_max_tokens = config.server.default_max_tokens;
  if (engine.cache != nullptr) gateway_options.shared_namespaces = cache::applySharedGrants(grants, *engine.cache);
  structured = std::make_unique<StructuredOutput>(*engine.tokenizer);
  gateway = std::make_unique<Gateway>(gateway_options, *admission, *generation, *engine.tokenizer, *encoder,
                                      *structured, responses.get());
  // The routes that wait on the disk run here, in lanes (blocking_pool.h):
  // the admin's own, and the tenants', each team with a bounded share.
  BlockingPoolOptions pool_options;
  pool_options.threads = config.server.blocking_threads;
  pool_options.max_queued = static_cast<size_t>(config.server.blocking_max_queued);
  pool_options.max_queued_per_tenant = static_cast<size_t>(config.server.blocking_max_queued_per_team);
  blocking_pool = std::make_unique<BlockingPool>(pool_options);
  gateway->setBlockingPool(blocking_pool.get());
  reply_ids = std::make_unique<ReplyIdStore>(
      ReplyIdsOptions{config.cache.reply_ids_max_bytes, config.cache.reply_ids_ttl_seconds});
  gateway->setReplyIds(reply_ids.get());
  LG_ASSIGN_OR_RETURN(snippet_consents, SnippetConsents::open(*db, *control));
  prefix_breakers = std::make_unique<PrefixBreakers>(
      PrefixBreakersOptions{config.cache.prefix_breakers_max_bytes, config.cache.prefix_breakers_max_prompt_tokens,
                            config.cache.prefix_breakers_min_common_tokens},
      *engine.tokenizer,
      [this](std::string_view team, uint32_t generation) { return snippet_consents->retentionFor(team, generation); },
      hooks.clock_us);
  // A withdrawn consent (here or on another replica) drops the team's snippets at once.
  snippet_consents->onWithdrawn([this](const std::string& team) { prefix_breakers->dropSnippets(team); });
  generation->setPrefixBreakers(prefix_breakers.get());
  // A revoked key's requests in flight are cancelled within one engine step
  // (billed for what they computed), whichever path revoked it.
  keys->onRevoke([this](const billing::ApiKeyInfo& key) {
    // What the breakers kept of the key's prompts goes with it (a deleted team's keys too).
    prefix_breakers->forgetKey(key.id);
    if (const size_t n = generation->cancelKey(key.id); n > 0) {
      proxyLog()->info("API key {} revoked: {} request(s) in flight cancelled", key.id, n);
    }
  });
  keys_api = std::make_unique<KeysApi>(*keys, *admission);
  TeamsApiOptions teams_options;
  teams_options.shared_namespaces = gateway_options.shared_namespaces;
  // The dashboard is built below, before any route runs.
  teams_options.drop_sessions = [this](const std::string& team) { return dashboard->sessions().removeTeam(team); };
  teams_options.withdraw_snippet_consent = [this](const std::string& team) {
    return snippet_consents->withdraw(team);
  };
  teams_api = std::make_unique<TeamsApi>(std::move(teams_options), *keys, *admission, *generation, engine.cache,
                                         responses.get());
  billing_api = std::make_unique<BillingApi>(*reads, *ledger, *prices, *keys, *admission, budget_view);
  billing_api->setKeyQueryLimit(config.limits.key_usage_queries_per_minute);
  responses_api = std::make_unique<ResponsesAdminApi>(*responses, *keys, *control, *admission);
  budget_api = std::make_unique<BudgetApi>(*budgets, *keys, *admission, budget_view);
  // Publishing into a shared namespace needs the cache (cache.enabled).
  if (engine.cache != nullptr) {
    SharedPrefixOptions o;
    o.model_id = engine.model_id;
    o.block_tokens = config.cache.block_tokens;
    o.limits = gateway_options.limits;
    for (const cache::SharedGrant& g : grants) o.namespaces.push_back(g.shared);
    shared_prefixes = std::make_unique<SharedPrefixPublisher>(o, *generation, *engine.cache, *encoder, *admission);
  }
  cache_curves = std::make_unique<CacheCurvesApi>(engine.cache, *admission, engine.model_id);
  prefix_breakers_api = std::make_unique<PrefixBreakersApi>(*prefix_breakers, *snippet_consents, *keys, *admission);
  // The dashboard: the ledger's numbers as the usage API shows them, the
  // budgets, the limits' buckets, and the memory picture /metrics reads.
  const serving::MemoryFacts memory{engine.backend->model().checkpointBytes(),
                                    static_cast<uint64_t>(engine.backend->latentLayout().blockBytes())};
  DashboardOptions dashboard_options;
  dashboard_options.clock_us = hooks.clock_us;
  dashboard_options.max_sessions_per_key = static_cast<size_t>(config.server.dashboard_sessions_per_key);
  dashboard_options.sign_in_failures_per_minute = config.server.dashboard_sign_in_failures_per_minute;
  dashboard_options.sign_ins_per_key_per_minute = config.server.dashboard_sign_ins_per_key_per_minute;
  dashboard_options.rate_limits_shared = redis_limits != nullptr;
  dashboard_options.served_model = engine.model_id;
  dashboard = std::make_unique<Dashboard>(*reads, *keys, *admission, budget_view, rate_limiter.get(),
                                          DashboardMemorySources{scheduler.get(), engine.cache, memory},
                                          dashboard_options);
  dashboard->setPrefixBreakers(prefix_breakers.get());

  // Each part registers its own metric families; /metrics only collects.
  // vLLM's names for the load and the pool, for routers: block_size is the
  // pool's page, which cache.block_tokens sets (and the cache's blocks are).
  serving::addEngineCollectors(registry, *scheduler, engine.cache, memory,
                               serving::VllmFacts{engine.model_id, engine.backend->latentLayout().block_tokens});
  registry.add([this](metrics::ExpositionWriter& w) { generation_metrics.collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { reply_ids->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { prefix_breakers->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { ledger_metrics.collect(w); });
  if (drain) registry.add([this](metrics::ExpositionWriter& w) { drain->collect(w); });
  if (redis_limits) registry.add([this](metrics::ExpositionWriter& w) { redis_limits->collect(w); });
  if (pg_control != nullptr) registry.add([this](metrics::ExpositionWriter& w) { pg_control->collect(w); });
  if (response_index) registry.add([this](metrics::ExpositionWriter& w) { response_index->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { budgets->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { blocking_pool->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) { dashboard->collect(w); });
  registry.add([this](metrics::ExpositionWriter& w) {
    w.counter("latentgate_stored_responses_not_kept_total",
              "Finished responses not stored because their record passed server.max_stored_response_bytes.",
              responses->oversizeDropped());
  });
  replica_purges = std::make_unique<ReplicaPurges>(*teams_api, responses.get(), *keys, *control);
  addRoutes();
  registry.add([this](metrics::ExpositionWriter& w) { request_metrics->collect(w); });
  LG_RETURN_IF_ERROR(startControlPlane());

  // The router's preflight answers 404, 405 and 401 at header time, and sets
  // each route's body limit (issue 21 item 4).
  LG_ASSIGN_OR_RETURN(server, HttpServer::start(server_options, request_metrics->handler(), request_metrics->preflighter()));
  registry.add([this](metrics::ExpositionWriter& w) { collectHttpServerStats(w, server->stats()); });
  // After the listener, whose port is in the default topic.
  if (engine.cache != nullptr && !config.cache.kv_events.endpoint.empty()) LG_RETURN_IF_ERROR(startKvEvents());
  return Status::ok();
}

Status Server::Parts::startKvEvents() {
  const KvEventsOptions& k = config.cache.kv_events;
  cache::kv_events::PublisherOptions o;
  o.endpoint = k.endpoint;
  o.bind = k.bind;
  o.replay_endpoint = k.replay_endpoint;
  // llm-d keys a pod's events by this topic's middle part, which must equal
  // the address and port it routes to (docs/deploy.md): behind a wildcard
  // listener that is the pod's own address, which only the operator knows.
  o.topic = k.topic;
  if (o.topic.empty()) {
    const std::string& host = server_options.host;
    if (host == "0.0.0.0" || host == "::") {
      proxyLog()->warn("cache.kv_events.topic is empty and the server listens on {}: routers need the replica's own "
                        "address in the topic (kv@ADDRESS:PORT@MODEL)", host);
    }
    o.topic = "kv@" + host + ":" + std::to_string(server->port()) + "@" + engine.model_id;
  }
  o.encoding = k.encoding == KvEventsEncodingSetting::kMap ? cache::kv_events::EventEncoding::kMap
                                                            : cache::kv_events::EventEncoding::kArray;
  o.buffer_steps = static_cast<size_t>(k.buffer_steps);
  o.max_queue_events = static_cast<size_t>(k.max_queue_events);
  o.hwm = k.hwm;
  o.reannounce_interval = std::chrono::milliseconds(k.reannounce_interval_ms);
  o.block_size = config.cache.block_tokens;
  o.pool_medium = config.engine.backend == BackendSetting::kCuda ? "GPU" : "CPU";
  cache::PrefixCache* cache = engine.cache;
  LG_ASSIGN_OR_RETURN(kv_events, cache::kv_events::KvEventPublisher::start(o, [cache] { return cache->announceResident(); }));
  cache->setBlockEvents(kv_events.get());
  registry.add([this](metrics::ExpositionWriter& w) { kv_events->collect(w); });
  proxyLog()->info("KV events on {} (topic {}{}{})", k.endpoint, o.topic, k.replay_endpoint.empty() ? "" : ", replay on ",
                    k.replay_endpoint);
  return Status::ok();
}

void Server::Parts::addRoutes() {
  // The admin API's synced writes and scans wait on the blocking pool, not
  // on an I/O thread; each job in its caller's lane, decided from memory
  // before it queues: the admin key (or an admin's dashboard session), else
  // the key's team, else the one tenant of callers without credentials.
  blocking_pool->setClassifier([this](const HttpRequest& request) {
    const Caller caller = admission->identify(request);
    if (caller.kind == Caller::Kind::kAdmin) return BlockingPool::admin();
    if (caller.kind == Caller::Kind::kKey) return BlockingPool::tenant(caller.who.team);
    if (request.path.starts_with("/dashboard/") && dashboard->adminSession(request)) return BlockingPool::admin();
    return BlockingPool::tenant("");
  });
  router.setBlockingPool(blocking_pool.get());
  router.setBodyLimits(static_cast<uint64_t>(config.server.max_body_bytes),
                       static_cast<uint64_t>(config.server.max_control_body_bytes));
  // The drain's state is reported, never a reason to be unready: while
  // PostgreSQL is away the outbox holds and every commit still succeeds.
  // Redis away is reported too, and is no reason to be unready either: the
  // replicas share one Redis, so taking this one out of rotation would help
  // no request, and requests without a budget still run (at this replica's
  // share of the rate limits) while budgeted ones get a 503 each.
  // The cache's disk tier is reported and is no reason to be unready either
  // (degraded or unwritable, tier 0 still serves). Weight files changed under
  // the running process are: the cache has stopped (guardIdentity) and the
  // engine's mapped weights may no longer be the ones it loaded.
  addHealthRoutes(router, [this] {
    Readiness r{true, ""};
    if (const cache::PrefixCache* cache = engine.cache) {
      if (cache->stale()) {
        r.ready = false;
        r.reason = "the model's weight files changed since they were loaded: restart the server to load them";
      }
      r.details.emplace_back("model_files", cache->stale() ? "changed" : "unchanged");
      r.details.emplace_back("cache_disk", std::string(cache::diskStateName(cache->diskState())));
    }
    if (drain) r.details.emplace_back("ledger_drain", std::string(billing::pg::drainStateName(drain->state())));
    if (redis_limits) r.details.emplace_back("redis", std::string(billing::redis::redisStateName(redis_limits->state())));
    // The control plane's too: "stale" while PostgreSQL is away (this replica
    // serves its last synced view; its age is in /metrics).
    if (pg_control != nullptr) {
      r.details.emplace_back("control_sync", std::string(billing::pg::controlSyncStateName(pg_control->state())));
    }
    return r;
  });
  gateway->addRoutes(router);
  keys_api->addRoutes(router);
  teams_api->addRoutes(router);
  billing_api->addRoutes(router);
  budget_api->addRoutes(router);
  if (shared_prefixes) shared_prefixes->addRoutes(router);
  cache_curves->addRoutes(router);
  prefix_breakers_api->addRoutes(router);
  responses_api->addRoutes(router);
  dashboard->addRoutes(router);
  addMetricsRoute(router, registry, *admission);
  // Counts every request by route and status; built once every route is added.
  request_metrics = std::make_unique<RequestMetrics>(router);
}

Result<std::unique_ptr<Server>> Server::start(const Config& config, EngineParts engine, ServerHooks hooks) {
  auto parts = std::make_unique<Parts>();
  parts->config = config;
  parts->engine = std::move(engine);
  parts->hooks = std::move(hooks);
  LG_RETURN_IF_ERROR(parts->build());
  return std::unique_ptr<Server>(new Server(std::move(parts)));
}

Server::Server(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

Server::~Server() { stop(std::chrono::milliseconds(0)); }

void Server::stop(std::chrono::milliseconds grace) {
  if (parts_->stopped) return;
  parts_->stopped = true;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // The scheduler refuses what waits; running streams finish or are cancelled.
  parts_->scheduler->shutdown(grace);
  parts_->server->stop(deadline);
  // Admissions still waiting for Redis are answered now, while what their
  // callbacks use (the generation call, the scheduler) is still here.
  if (parts_->redis_limits) parts_->redis_limits->stopAdmitting();
  // Every entry the requests left is queued by now (the engine thread and the
  // I/O threads have ended): write them, then the drain's final attempt
  // takes them to PostgreSQL, everything a client saw complete included.
  // What commits later (a blocking-pool job still queued) stays in the
  // outbox, durable, for the next start.
  parts_->ledger->flush();
  if (parts_->drain) parts_->drain->stop();
}

uint16_t Server::port() const { return parts_->server->port(); }

std::string Server::url() const {
  const HttpServerOptions& o = parts_->server_options;
  const std::string host = o.host == "0.0.0.0" || o.host == "::" ? "127.0.0.1" : o.host;
  return std::string(o.plain_http ? "http" : "https") + "://" +
         (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port());
}

const TlsMaterial& Server::tls() const { return parts_->tls; }
bool Server::plainHttp() const { return parts_->server_options.plain_http; }
const std::string& Server::adminKeyPath() const { return parts_->admin_path; }
bool Server::adminKeyCreated() const { return parts_->admin_created; }
serving::Scheduler& Server::scheduler() { return *parts_->scheduler; }
billing::KeyStore& Server::keys() { return *parts_->keys; }
billing::Ledger& Server::ledger() { return *parts_->ledger; }
billing::Budgets& Server::budgets() { return *parts_->budgets; }
billing::PriceBook& Server::prices() { return *parts_->prices; }
ResponseStore& Server::responses() { return *parts_->responses; }
billing::RateLimiter& Server::rateLimiter() { return *parts_->rate_limiter; }
const billing::Metering& Server::metering() const { return *parts_->metering; }
DashboardSessions& Server::dashboardSessions() { return parts_->dashboard->sessions(); }
HttpServerStats Server::httpStats() const { return parts_->server->stats(); }

}  // namespace lg::proxy

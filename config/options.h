// The typed configuration of one LatentGate process.
//
// Each module reads only its own struct, passed by const reference; nothing
// below cli/ reads the environment or files for configuration. config.h parses
// and validates these once, from a file, environment variables and flags;
// every value here is typed (enums, not strings) and already valid. Each
// module turns its part into its own options with one function
// (engine/backend_config.h, cache/cache_config.h).
// Defaults are the embedded mode: everything under ./data, a demo model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "billing/settings.h"  // prices and budgets: their types and JSON are billing's
#include "common/log_options.h"

namespace lg {

// The network edge (proxy/, docs/gateway.md). proxy/server_config.h turns
// this into HttpServerOptions.
struct ServerOptions {
  std::string listen = "127.0.0.1:8443";  // HOST:PORT; port 0 picks a free port
  std::string tls_cert;                   // PEM chain; empty: a local CA and a server cert it signs, under data_dir/tls
  std::string tls_key;
  bool plain_http = false;                // plain HTTP, no TLS: only behind a trusted load balancer that terminates TLS
  int io_threads = 2;
  int max_connections = 1024;             // open connections; more are closed at accept
  int64_t max_body_bytes = int64_t{32} << 20;  // request body; larger: 413
  int default_max_tokens = 4096;               // a request without max_tokens gets this cap (DeepSeek's API: 4,096)
  int64_t stored_response_ttl_s = 30 * 24 * 3600;  // stored Responses (`store`) expire after this (OpenAI: 30 days)
  int64_t max_stored_response_bytes = int64_t{4} << 20;  // one stored response's record; larger input: 400 before generation
  // The blocking pool's tenants' lane (proxy/http/blocking_pool.h): threads,
  // jobs waiting or running for all tenants, and one team's share of them.
  // The admin key's routes have a lane of their own.
  int blocking_threads = 2;
  int blocking_max_queued = 256;
  int blocking_max_queued_per_team = 32;
  // Dashboard sign-in (docs/dashboard.md): sessions one key may hold, failed
  // sign-ins per client address and sign-ins per API key a minute (0: unlimited).
  int dashboard_sessions_per_key = 8;
  int dashboard_sign_in_failures_per_minute = 20;
  int dashboard_sign_ins_per_key_per_minute = 10;
  int header_timeout_ms = 10000;          // TLS handshake + request header (slow clients are cut off)
  int idle_timeout_ms = 60000;            // keep-alive connection with no request
  int body_timeout_ms = 60000;            // request header complete -> body complete (slow uploads are cut off)
  int request_timeout_ms = 600000;        // a non-streamed response must be complete within this
  // The edge before authentication (issue 21, docs/security.md): what one
  // client without a key can hold.
  int64_t max_control_body_bytes = int64_t{64} << 10;      // body of every route but the generation ones; larger: 413
  int64_t max_inflight_body_bytes = int64_t{256} << 20;    // bodies being read or handled, all together; more: 503
  int max_connections_per_address = 64;   // open connections from one client IP; more are closed at accept; 0: no cap
  int reserved_connections = 64;          // top slots for requests with valid credentials (at most max_connections/4)
  int pressure_idle_timeout_ms = 2000;    // idle wait of unauthenticated connections once 3/4 of max_connections are open
  // A bearer token that may read GET /metrics besides the admin key
  // (LATENTGATE_SERVER_METRICS_TOKEN), for a Prometheus scraper or a router
  // that should not hold the admin key; it may also call the render routes
  // (token ids only: no tenant's data). Empty: the admin key only. A secret:
  // at least 16 characters, never shown by `latentgate config`.
  std::string metrics_token;
};

// The dtype of the engine's latent pool. BF16 halves the pool's memory but
// misses the 1e-3 golden bar (docs/engine.md), so F32 is the default.
enum class LatentDTypeSetting : uint8_t { kF32, kBF16 };
// The form of MLA attention (docs/engine.md): the cheaper per sequence chunk
// by arithmetic, or one forced for every chunk (to compare them).
enum class PrefillAttentionSetting : uint8_t { kAuto, kAbsorbed, kStandard };
// Which backend runs the model: the CPU reference, or the CUDA backend
// (builds with the CUDA toolkit only; docs/cuda.md). Not automatic yet: the
// CUDA backend becomes the default on GPU machines once its device check has
// passed on one.
enum class BackendSetting : uint8_t { kCpu, kCuda };

struct EngineOptions {
  BackendSetting backend = BackendSetting::kCpu;  // cpu or cuda
  std::string model_dir;  // empty: the demo model under data_dir/models/demo
  int threads = 0;        // 0: one per hardware thread
  int max_context = 0;    // 0: the model's max_position_embeddings
  LatentDTypeSetting latent_dtype = LatentDTypeSetting::kF32;
  int64_t pool_blocks = 0;           // latent pool capacity in blocks; 0: enough for 4 sequences of max_context
  int64_t max_batch_tokens = 16384;  // new tokens per forward pass (bounds activation memory)
  PrefillAttentionSetting prefill_attention = PrefillAttentionSetting::kAuto;  // auto, absorbed, standard
};

// How stored blocks are encoded on disk: as the pool holds them, or
// converted (bf16 and int8 are lossy, docs/cache.md).
enum class StoredDTypeSetting : uint8_t { kPool, kF32, kBF16, kInt8 };
// Whether a lookup restores blocks from disk: as the cost model decides, or always, or never.
enum class RestorePolicySetting : uint8_t { kAuto, kAlways, kNever };
// How much of the weights the model fingerprint reads: a sample (fast
// restarts) or every byte (cache/model_fingerprint.h says what each notices).
enum class FingerprintSetting : uint8_t { kSampled, kFull };

// Shared cache namespaces (cache/namespace.h) and the teams granted each:
// {"company": ["team-a", "team-b"]}. Names and team ids follow the team-id
// rule (common/team_id.h: 1..128 of [A-Za-z0-9._-]).
using SharedNamespaceGrants = std::map<std::string, std::vector<std::string>>;

// How KV events encode each event: as vLLM's positional arrays (every
// router reads them) or as maps keyed by field name (vLLM >= PR #42892).
enum class KvEventsEncodingSetting : uint8_t { kArray, kMap };

// vLLM-format KV events for prefix-aware routers (cache/kv_events/, docs/deploy.md):
// which blocks this replica holds, on a ZMQ PUB socket. Off while endpoint is empty.
struct KvEventsOptions {
  std::string endpoint;         // ZMQ PUB, e.g. tcp://*:5557; empty: no events
  // The PUB socket binds when the endpoint has '*' or '::' or is ipc:// or
  // inproc:// (vLLM's rule), else connects (a router that binds); true: binds always.
  bool bind = false;
  std::string replay_endpoint;  // ZMQ ROUTER that answers replay requests (always bound); empty: none
  std::string topic;            // empty: kv@<listen host>:<port>@<model id>, the pod id llm-d expects
  KvEventsEncodingSetting encoding = KvEventsEncodingSetting::kArray;
  int buffer_steps = 10000;             // published batches kept for replay
  int max_queue_events = 100000;        // events waiting for the publisher; more: dropped and counted
  int hwm = 100000;                     // the PUB socket's send high-water mark (messages)
  int reannounce_interval_ms = 30000;   // every resident pool block again, roots first; 0: never
};

// The prefix cache (cache/, docs/cache.md). Sizes are bytes; in a file or
// the environment they may carry a binary suffix ("8GiB", "512MiB").
struct CacheOptions {
  bool enabled = true;    // false: no prefix cache at all (every prompt computed in full; A/B runs)
  int block_tokens = 64;  // fingerprint block = latent page size, in tokens
  int64_t tier0_budget_bytes = 0;                 // cached blocks kept in the pool; 0: bounded by the pool
  std::string disk_path;                          // the RocksDB tier; empty: data_dir/kv
  std::string secret_file;                        // the key stored blocks are authenticated with; empty: <disk path>.key
  int64_t disk_max_bytes = int64_t{64} << 30;     // byte cap of the disk tier
  int64_t disk_ttl_seconds = 7 * 24 * 3600;       // unused blocks expire after this; 0: never
  bool disk_verify_checksums = true;              // RocksDB's own read checksums (SST blocks, blobs; docs/cache.md)
  StoredDTypeSetting stored_dtype = StoredDTypeSetting::kPool;  // pool, f32, bf16, int8
  int write_through_hits = 2;                     // write a block through after N reuses; 0: at once; -1: never
  int write_back_queue_blocks = 64;               // bounded write-back queue; full: dropped and counted
  int write_back_batch_blocks = 16;               // blocks per RocksDB write batch
  RestorePolicySetting restore_policy = RestorePolicySetting::kAuto;  // auto (cost model), always, never
  int in_flight_wait_ms = 60000;                  // longest wait for blocks another request is computing
  int io_threads = 0;                             // restore threads; 0: one per core, at most 4
  FingerprintSetting fingerprint = FingerprintSetting::kSampled;  // sampled or full
  int identity_check_seconds = 10;                // how often the weight files are compared with those loaded
  // Miss-ratio curves per tier (cache/miss_ratio_curve.h, docs/cache.md "What
  // more cache would buy"): SHARDS' sampling rate of block keys in parts per
  // million (0: per tier, so that half today's size holds 512 sampled keys),
  // and the sampled keys each tier's estimator holds at most (the memory
  // bound: <= 56 bytes a key; beyond it the rate drops). 0 keys: no curves.
  int mrc_sampling_ppm = 0;
  int mrc_max_samples = 16384;
  // Recent evictions remembered to say why a request missed (docs/cache.md,
  // "Why requests miss"); 0: none.
  int evicted_blocks_tracked = 262144;
  // An admin publishes a prefix into a shared namespace on purpose (POST
  // /admin/shared-prefixes); the requests of the teams granted it read it.
  SharedNamespaceGrants shared_namespaces;
  KvEventsOptions kv_events;
  // Chat replies' generated token ids, kept per team so that the next turn's
  // history reuses the blocks published while generating them
  // (proxy/gateway/reply_ids.h, docs/cache.md). 0 bytes: none kept.
  int64_t reply_ids_max_bytes = int64_t{64} << 20;
  int64_t reply_ids_ttl_seconds = 3600;  // a kept reply unused this long is dropped; 0: never
  // Prefix breakers (proxy/gateway/prefix_breakers.h, docs/cache.md): each
  // key's last requests kept as keyed token hashes, to flag prompts that
  // diverge early from their previous one. 0 bytes: off.
  int64_t prefix_breakers_max_bytes = int64_t{32} << 20;
  int64_t prefix_breakers_max_prompt_tokens = 16384;  // a request's first tokens compared
  int64_t prefix_breakers_min_common_tokens = 256;    // tokens found again after a divergence that flag it
};

// The scheduler (serving/, docs/serving.md): what one engine step holds and
// when requests are admitted or refused.
struct ServingOptions {
  int step_tokens = 512;                  // tokens per step: running decodes first, then prefill chunks
  int max_running = 64;                   // sequences in one step
  int max_queued = 256;                   // requests waiting for admission; more: refused (queue_full)
  int max_queue_wait_ms = 30000;          // longest wait for admission; longer: refused (queue_timeout)
  int output_reservation_tokens = 256;    // pool space held for each request's output (at most its max_tokens)
  int max_stop_strings = 4;               // stop strings per request (OpenAI's limit)
};

// Requests and tokens per minute (prompt + output cap, the unused part given
// back at the end) per API key and per team; 0 = unlimited
// (billing/rate_limiter.h).
struct LimitOptions {
  int64_t key_requests_per_minute = 0;
  int64_t key_tokens_per_minute = 0;
  int64_t team_requests_per_minute = 0;
  int64_t team_tokens_per_minute = 0;
  // GET /v1/usage and /user/balance per API key (0 = unlimited).
  int64_t key_usage_queries_per_minute = 60;
  // Budgets and the per-minute limits above shared by every replica through
  // Redis (docs/billing.md, "Budgets and limits shared by replicas"):
  // redis://[[user]:password@]host[:port][/db] or unix:///path/to/redis.sock;
  // empty: each replica counts in its own memory, as always. A secret when
  // it holds a password: never shown or logged whole.
  std::string redis_url;
  int redis_connect_timeout_ms = 200;
  int redis_command_timeout_ms = 250;
  int redis_retry_ms = 1000;              // after a failure, Redis is not tried again for this long
  // How long a budget reservation outlives a replica that died holding it
  // (a running request's is extended); at least server.request_timeout_ms.
  int64_t redis_reservation_ttl_s = 900;
  // While Redis is unreachable, each replica enforces 1/this of every
  // per-minute limit on its own (budgets are refused instead: 503).
  int redis_fallback_replicas = 1;
};

struct BillingOptions {
  PriceTableSetting prices;  // the table in force until PUT /admin/pricing schedules another
  // Budgets of every key and every team that has none of its own (PUT
  // /admin/budgets/keys/ID and /admin/budgets/teams/TEAM set those).
  BudgetSetting key_budget;
  BudgetSetting team_budget;
  // How long an Idempotency-Key stays spent (its replay kept); after that the
  // same key runs a new request. 24 hours, as at Stripe.
  int64_t idempotency_ttl_s = 24 * 3600;
  // The ledger of record in PostgreSQL (docs/billing.md, "The outbox and its
  // drain"): a libpq URL or key=value string; empty: the RocksDB ledger only,
  // as always. A secret when it holds a password: never shown or logged whole.
  std::string postgres_url;
  int postgres_drain_batch = 1000;          // entries per PostgreSQL transaction
  int postgres_drain_interval_ms = 200;     // wait after a batch that was not full
  int postgres_retry_min_ms = 500;          // backoff after a failed drain, doubling ...
  int postgres_retry_max_ms = 30000;        // ... up to this
  int postgres_shutdown_drain_ms = 2000;    // the final drain at shutdown starts no batch after this
  // With postgres_url, keys, teams, budgets and prices are shared through
  // PostgreSQL (docs/billing.md, "The control plane"): how often each replica
  // polls for the others' changes. A key revoked on one replica is refused
  // by every other within this plus one poll query.
  int control_sync_interval_ms = 1000;
};

struct Config {
  std::string data_dir = "./data";
  // The admin API's bearer key (LATENTGATE_ADMIN_KEY); empty: DATA/admin.key,
  // generated at first start. A secret: `latentgate config` never shows it.
  std::string admin_key;
  LogOptions log;
  ServerOptions server;
  EngineOptions engine;
  CacheOptions cache;
  ServingOptions serving;
  LimitOptions limits;
  BillingOptions billing;
};

}  // namespace lg

// `latentgate forward --model DIR --ids FILE --out FILE.safetensors
//   [--chunk N] [--decode-from K] [--threads N] [--latent-dtype f32|bf16]
//   [--cache-dir DIR [--namespace NS]]`
// Runs a JSON array of token ids through the engine and writes the logits of
// every position (`logits`, F32 [len, vocab]) as safetensors. Needs only
// config.json and the weights. Prints one JSON line of statistics on stdout.
// With --cache-dir the persistent prefix cache in DIR supplies the longest
// cached prefix (those rows are NaN, metadata `first_computed_position`), and
// every block computed is written to DIR before exit (docs/cli.md).
// Exit codes: 0 success, 1 the engine rejected the input or the output could
// not be written, 2 bad usage, configuration, model or ids file.
#include <chrono>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cache/cache_config.h"
#include "cache/disk_tier.h"
#include "cache/model_fingerprint.h"
#include "cache/prefix_cache.h"
#include "cli/commands.h"
#include "cli/engine_loader.h"
#include "cli/global_flags.h"
#include "cli/prefix_cache_setup.h"
#include "common/file_util.h"
#include "engine/backend_config.h"
#include "engine/forward_runner.h"
#include "engine/model/safetensors.h"
#include "engine/sequence_blocks.h"

namespace lg::cli {
namespace {

using nlohmann::json;

struct ForwardArgs {
  std::string model_dir;
  std::string ids_file;
  std::string out_file;
  int chunk = 0;
  int decode_from = -1;
  int threads = 0;           // 0: engine.threads from the configuration
  std::string latent_dtype;  // empty: engine.latent_dtype from the configuration
  std::string cache_dir;             // empty: no prefix cache
  std::string cache_namespace = "default";
};

json cacheStatsJson(const OpenedCache& c, const cache::PrefixLease& lease, const std::string& ns, double persist_ms) {
  const cache::CacheStats s = c.index->snapshot();
  json rejected = json::object();
  for (size_t r = 0; r < cache::kRejectReasonCount; ++r) {
    if (s.rejected_blocks[r] > 0) {
      rejected[std::string(cache::rejectReasonName(static_cast<cache::RejectReason>(r)))] = s.rejected_blocks[r];
    }
  }
  const cache::Decision& d = lease.decision();
  return {
      {"namespace", ns},
      {"model_fingerprint", c.fingerprint_hex},
      {"fingerprint_ms", c.fingerprint_ms},
      {"tier0_hit_blocks", lease.tier0Blocks()},
      {"disk_hit_blocks", lease.diskBlocks()},
      {"decision", std::string(cache::restoreChoiceName(d.choice))},
      {"restore_estimate_ms", d.restore_seconds * 1e3},
      {"recompute_estimate_ms", d.recompute_seconds < 0 ? json(nullptr) : json(d.recompute_seconds * 1e3)},
      {"restore_ms", lease.restoreSeconds() * 1e3},
      {"restore_bytes", lease.restoreBytes()},
      {"restore_mb_per_s", lease.restoreSeconds() > 0 ? lease.restoreBytes() / lease.restoreSeconds() / 1e6 : 0.0},
      {"stored_dtype", std::string(cache::storedDTypeName(c.stored_dtype))},
      {"stored_blocks", s.write_back_written_blocks},
      {"stored_bytes", s.write_back_written_bytes},
      {"persist_ms", persist_ms},
      {"rejected_blocks", rejected},
      {"disk_read_errors", s.disk_read_errors},
      {"disk_recovered_from_corruption", s.disk_recovered_from_corruption},
      {"disk_blocks", s.disk.blocks},
      {"disk_bytes", s.disk.bytes},
  };
}

Result<std::vector<int32_t>> readIds(const std::string& path) {
  LG_ASSIGN_OR_RETURN(std::string text, readFile(path, size_t{1} << 30));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return invalidArgument(path + ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const json& v = j[i];
    if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return invalidArgument(path + ": element " + std::to_string(i) + " is not a 32-bit integer");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

int runForwardCommand(const GlobalFlags& flags, const ForwardArgs& args) {
  using Clock = std::chrono::steady_clock;
  // --threads and --latent-dtype are shorthands for configuration fields,
  // validated there like every other source.
  std::vector<std::pair<std::string, std::string>> shorthands;
  if (args.threads > 0) shorthands.emplace_back("engine.threads", std::to_string(args.threads));
  if (!args.latent_dtype.empty()) shorthands.emplace_back("engine.latent_dtype", args.latent_dtype);
  auto config = flags.load(shorthands);
  if (!config.isOk()) {
    std::cerr << "latentgate: " << config.status().toString() << "\n";
    return 2;
  }
  auto team = cache::TeamNamespace::ofTeam(args.cache_namespace);
  if (!team.isOk()) {
    std::cerr << "latentgate forward: --namespace: " << team.status().message() << "\n";
    return 2;
  }
  auto ids = readIds(args.ids_file);
  if (!ids.isOk()) {
    std::cerr << "latentgate forward: " << ids.status().toString() << "\n";
    return 2;
  }
  engine::BackendOptions options = engine::backendOptions(*config);
  if (options.num_blocks == 0) {  // engine.pool_blocks unset: exactly what this sequence needs
    options.num_blocks = (static_cast<int64_t>(ids->size()) + options.block_tokens - 1) / options.block_tokens + 1;
  }
  EngineLoadOptions load_options;
  load_options.model_dir = args.model_dir;
  load_options.tokenizer = false;  // the ids are given: config.json and the weights suffice
  load_options.chat_template = false;
  load_options.backend_options = options;
  auto loaded = loadEngine(*config, load_options);
  if (!loaded.isOk()) {
    std::cerr << "latentgate forward: " << loaded.status().toString() << "\n";
    return 2;
  }
  engine::Backend& backend = *loaded->backend;
  const double load_ms = loaded->load_ms;
  std::optional<OpenedCache> cache;
  if (!args.cache_dir.empty()) {
    auto opened = openPrefixCache(*config, args.cache_dir, backend);
    if (!opened.isOk()) {
      std::cerr << "latentgate forward: prefix cache: " << opened.status().toString() << "\n";
      return 2;
    }
    cache = std::move(opened).value();
  }
  engine::ForwardRunOptions run_options;
  run_options.chunk = args.chunk;
  run_options.decode_from = args.decode_from;
  engine::ForwardRunStats stats;
  engine::SequenceBlocks seq(backend);
  cache::PrefixLease lease;
  if (cache) {
    lease = cache->index->acquire(*team, *ids);
    seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  }
  auto logits = engine::runForwardFrom(backend, seq, *ids, run_options, &stats);
  if (!logits.isOk()) {
    std::cerr << "latentgate forward: " << logits.status().toString() << "\n";
    return 1;
  }
  const int64_t prefill_tokens = stats.computed_tokens - stats.decode_steps;
  double persist_ms = 0;
  if (cache) {
    cache->index->observePrefill(stats.cached_tokens, stats.cached_tokens + prefill_tokens,
                                 stats.prefill_seconds - stats.prefill_attention_seconds,
                                 stats.prefill_attention_seconds);
    const auto p0 = Clock::now();
    Status s = lease.publish(seq.blocks(), seq.length());
    // Write-through at exit: everything computed is in DIR before the process
    // ends, so the next process can reuse it.
    if (s.isOk()) s = cache->index->persistAll(/*flush_files=*/true);
    persist_ms = std::chrono::duration<double, std::milli>(Clock::now() - p0).count();
    if (!s.isOk()) std::cerr << "latentgate forward: prefix cache: " << s.toString() << " (continuing)\n";
  }
  const int64_t vocab = backend.config().vocab_size;
  std::vector<engine::TensorToWrite> tensors(1);
  tensors[0].name = "logits";
  tensors[0].dtype = engine::DType::kF32;
  tensors[0].shape = {static_cast<int64_t>(ids->size()), vocab};
  tensors[0].fill = [&](std::span<uint8_t> out) { std::memcpy(out.data(), logits->data(), out.size()); };
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (cache) metadata["first_computed_position"] = std::to_string(stats.cached_tokens);
  if (Status s = engine::writeSafetensors(args.out_file, tensors, metadata); !s.isOk()) {
    std::cerr << "latentgate forward: " << s.toString() << "\n";
    return 1;
  }
  json line = {
      {"tokens", stats.tokens},
      {"cached_tokens", stats.cached_tokens},
      {"computed_tokens", stats.computed_tokens},
      {"prefill_tokens", prefill_tokens},
      {"prefill_calls", stats.prefill_calls},
      {"decode_steps", stats.decode_steps},
      {"load_ms", load_ms},
      {"prefill_ms", stats.prefill_seconds * 1e3},
      {"decode_ms", stats.decode_seconds * 1e3},
      {"prefill_tokens_per_s", stats.prefill_seconds > 0 ? prefill_tokens / stats.prefill_seconds : 0.0},
      {"decode_ms_per_token", stats.decode_steps > 0 ? stats.decode_seconds * 1e3 / stats.decode_steps : 0.0},
      {"backend", std::string(backend.name())},
      {"latent_dtype", options.latent_dtype == engine::LatentDType::kBF16 ? "bf16" : "f32"},
      {"block_tokens", options.block_tokens},
  };
  if (cache) line["cache"] = cacheStatsJson(*cache, lease, args.cache_namespace, persist_ms);
  std::cout << line.dump() << std::endl;
  return 0;
}

}  // namespace

Command addForwardCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand("forward", "Run token ids through the model and write every position's logits");
  auto args = std::make_shared<ForwardArgs>();
  cmd->add_option("--model", args->model_dir, "Model directory (config.json and safetensors weights)")->required();
  cmd->add_option("--ids", args->ids_file, "JSON file holding an array of token ids")->required();
  cmd->add_option("--out", args->out_file, "Output safetensors file (tensor `logits`, F32 [len, vocab])")->required();
  cmd->add_option("--chunk", args->chunk, "Prefill in chunks of N tokens, each over the cached prefix")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--decode-from", args->decode_from,
                  "Prefill the first K tokens, then feed the rest one token at a time through the latent cache")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", args->threads, "Compute threads (default: engine.threads)")->check(CLI::PositiveNumber);
  cmd->add_option("--latent-dtype", args->latent_dtype, "Latent pool dtype: f32 or bf16 (default: engine.latent_dtype)");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "Persistent prefix cache (a RocksDB directory): reuse the cached prefix, store what is new");
  cmd->add_option("--namespace", args->cache_namespace,
                  "The team whose prefix cache namespace is used (a team id; default: default)");
  flags.addTo(*cmd);
  return {cmd, [&flags, args]() -> int { return runForwardCommand(flags, *args); }};
}

}  // namespace lg::cli

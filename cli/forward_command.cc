// `latentgate forward --model DIR --ids FILE --out FILE.safetensors
//   [--chunk N] [--decode-from K] [--threads N] [--latent-dtype f32|bf16]`
// Runs a JSON array of token ids through the engine and writes the logits of
// every position (`logits`, F32 [len, vocab]) as safetensors. Needs only
// config.json and the weights. Prints one JSON line of statistics on stdout.
// Exit codes: 0 success, 1 the engine rejected the input or the output could
// not be written, 2 bad usage, configuration, model or ids file.
#include <chrono>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "common/file_util.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/forward_runner.h"
#include "engine/model/load_progress.h"
#include "engine/model/safetensors.h"

namespace lg::cli {
namespace {

using nlohmann::json;

struct ForwardArgs {
  std::string model_dir;
  std::string ids_file;
  std::string out_file;
  int chunk = 0;
  int decode_from = -1;
  int threads = 0;  // 0: engine.threads from the configuration
  std::string latent_dtype = "f32";
};

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
  auto config = flags.load();
  if (!config.isOk()) {
    std::cerr << "latentgate: " << config.status().toString() << "\n";
    return 2;
  }
  if (args.latent_dtype != "f32" && args.latent_dtype != "bf16") {
    std::cerr << "latentgate forward: --latent-dtype must be f32 or bf16\n";
    return 2;
  }
  auto ids = readIds(args.ids_file);
  if (!ids.isOk()) {
    std::cerr << "latentgate forward: " << ids.status().toString() << "\n";
    return 2;
  }
  const auto t0 = Clock::now();
  engine::ModelLoadOptions load_options;
  load_options.prefetch = true;
  load_options.progress = engine::terminalLoadProgress("loading " + args.model_dir);
  auto model = engine::Model::load(args.model_dir, load_options);
  if (!model.isOk()) {
    std::cerr << "latentgate forward: " << model.status().toString() << "\n";
    return 2;
  }
  engine::BackendOptions options;
  options.threads = args.threads > 0 ? args.threads : config->engine.threads;
  options.max_context = config->engine.max_context;
  options.block_tokens = config->cache.block_tokens;
  options.latent_dtype = args.latent_dtype == "bf16" ? engine::LatentDType::kBF16 : engine::LatentDType::kF32;
  options.num_blocks = (static_cast<int64_t>(ids->size()) + options.block_tokens - 1) / options.block_tokens + 1;
  auto backend = engine::createCpuBackend(std::move(model).value(), options);
  if (!backend.isOk()) {
    std::cerr << "latentgate forward: " << backend.status().toString() << "\n";
    return 2;
  }
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  engine::ForwardRunOptions run_options;
  run_options.chunk = args.chunk;
  run_options.decode_from = args.decode_from;
  engine::ForwardRunStats stats;
  auto logits = engine::runForward(**backend, *ids, run_options, &stats);
  if (!logits.isOk()) {
    std::cerr << "latentgate forward: " << logits.status().toString() << "\n";
    return 1;
  }
  const int64_t vocab = (*backend)->config().vocab_size;
  std::vector<engine::TensorToWrite> tensors(1);
  tensors[0].name = "logits";
  tensors[0].dtype = engine::DType::kF32;
  tensors[0].shape = {static_cast<int64_t>(ids->size()), vocab};
  tensors[0].fill = [&](std::span<uint8_t> out) { std::memcpy(out.data(), logits->data(), out.size()); };
  if (Status s = engine::writeSafetensors(args.out_file, tensors, {{"format", "pt"}}); !s.isOk()) {
    std::cerr << "latentgate forward: " << s.toString() << "\n";
    return 1;
  }
  const int64_t prefill_tokens = stats.computed_tokens - stats.decode_steps;
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
      {"backend", std::string((*backend)->name())},
      {"latent_dtype", args.latent_dtype},
      {"block_tokens", options.block_tokens},
  };
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
  cmd->add_option("--latent-dtype", args->latent_dtype, "Latent cache storage: f32 (default) or bf16");
  flags.addTo(*cmd);
  return {cmd, [&flags, args]() -> int { return runForwardCommand(flags, *args); }};
}

}  // namespace lg::cli

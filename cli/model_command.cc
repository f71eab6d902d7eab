// `latentgate model init --preset NAME --out DIR [--seed N]`: writes a
// random-weight checkpoint in the Hugging Face layout (config.json,
// model.safetensors, tokenizer.json, tokenizer_config.json) with the embedded
// DeepSeek-V3 tokenizer. Prints one JSON line describing what was written.
#include <iostream>
#include <optional>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "cli/terminal_progress.h"
#include "engine/model/presets.h"

namespace lg::cli {
namespace {

struct InitArgs {
  std::string preset;
  std::string out_dir;
  uint64_t seed = 0;
  std::optional<float> end_token_rate;
};

int runInit(const GlobalFlags& flags, const InitArgs& args) {
  if (auto config = flags.load(); !config.isOk()) {
    std::cerr << "latentgate: " << config.status().toString() << "\n";
    return 2;
  }
  auto config = engine::presetConfig(args.preset);
  if (!config.isOk()) {
    std::cerr << "latentgate model init: " << config.status().toString() << "\n";
    return 2;
  }
  engine::CheckpointInitOptions options = engine::presetInitOptions(args.preset);
  options.seed = args.seed;
  if (args.end_token_rate) options.end_token_rate = *args.end_token_rate;
  options.progress = terminalByteProgress("model init " + args.preset);
  if (Status s = engine::writeRandomCheckpoint(*config, args.out_dir, options); !s.isOk()) {
    std::cerr << "latentgate model init: " << s.toString() << "\n";
    return 1;
  }
  nlohmann::json line = {{"preset", args.preset},
                         {"dir", args.out_dir},
                         {"seed", args.seed},
                         {"end_token_rate", options.end_token_rate},
                         {"layers", config->num_hidden_layers},
                         {"hidden_size", config->hidden_size},
                         {"vocab_size", config->vocab_size}};
  std::cout << line.dump() << std::endl;
  return 0;
}

}  // namespace

Command addModelCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand("model", "Model utilities");
  cmd->require_subcommand(1);
  CLI::App* init = cmd->add_subcommand("init", "Write a random-weight checkpoint (Hugging Face layout)");
  auto args = std::make_shared<InitArgs>();
  std::string names;
  for (const auto& n : engine::presetNames()) names += (names.empty() ? "" : ", ") + n;
  init->add_option("--preset", args->preset, "Preset: " + names)->required();
  init->add_option("--out", args->out_dir, "Output directory (created if missing)")->required();
  init->add_option("--seed", args->seed, "Random seed (default 0)");
  init->add_option("--end-token-rate", args->end_token_rate,
                   "Fraction of tokens after which EOS is likely (0: plain random weights, replies run to "
                   "max_tokens; demo's default makes sampled replies end)")
      ->check(CLI::Range(0.0f, 1.0f));
  flags.addTo(*init);
  return {cmd, [&flags, args, init]() -> int {
            if (init->parsed()) return runInit(flags, *args);
            return 2;
          }};
}

}  // namespace lg::cli

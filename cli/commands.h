// Subcommands of the `latentgate` executable. Each add* function registers a
// CLI11 subcommand; its Command::run is called when that subcommand was parsed.
#pragma once

#include <functional>

namespace CLI { class App; }

namespace lg::cli {

struct GlobalFlags;

struct Command {
  CLI::App* app = nullptr;     // the registered subcommand
  std::function<int()> run;    // returns the process exit code
};

Command addConfigCommand(CLI::App& app, GlobalFlags& flags);
Command addTokenizeCommand(CLI::App& app, GlobalFlags& flags);
Command addForwardCommand(CLI::App& app, GlobalFlags& flags);
Command addModelCommand(CLI::App& app, GlobalFlags& flags);
Command addGenerateCommand(CLI::App& app, GlobalFlags& flags);
Command addServeCommand(CLI::App& app, GlobalFlags& flags);

}  // namespace lg::cli

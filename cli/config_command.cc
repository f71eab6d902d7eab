// `latentgate config`: prints the effective configuration after file,
// environment and flags, or the first validation error (exit code 2).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/global_flags.h"

namespace lg::cli {

Command addConfigCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand("config", "Print the effective configuration as JSON");
  flags.addTo(*cmd);
  return {cmd, [&flags]() -> int {
            auto config = flags.load();
            if (!config.isOk()) {
              std::cerr << "latentgate: " << config.status().toString() << "\n";
              return 2;
            }
            std::cout << configToJson(*config) << "\n";
            return 0;
          }};
}

}  // namespace lg::cli

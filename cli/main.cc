// latentgate: one binary, one subcommand per capability (see docs/cli.md).
#include <sys/stat.h>

#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "common/malloc_tuning.h"

int main(int argc, char** argv) {
  // Everything LatentGate writes is private to its user: the prefix cache's
  // store (data/kv) holds every team's token ids verbatim, and RocksDB
  // creates its files 0644. With this umask every file and directory the
  // process creates is 0600 / 0700 from the start (the disk tier also
  // tightens its own files, for when it runs inside another program).
  ::umask(077);
  lg::keepFreedMemoryForReuse();
  CLI::App app{"LatentGate: an OpenAI-compatible prompt-caching gateway for DeepSeek MLA models"};
  app.set_version_flag("--version", "latentgate 0.1.0");
  app.require_subcommand(1);

  lg::cli::GlobalFlags flags;
  const std::vector<lg::cli::Command> commands = {
      lg::cli::addConfigCommand(app, flags),
      lg::cli::addTokenizeCommand(app, flags),
      lg::cli::addForwardCommand(app, flags),
      lg::cli::addGenerateCommand(app, flags),
      lg::cli::addServeCommand(app, flags),
      lg::cli::addModelCommand(app, flags),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return 2;
}

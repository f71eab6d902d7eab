#include "cli/global_flags.h"

#include <CLI/CLI.hpp>

#include "common/logging.h"

namespace lg::cli {

void GlobalFlags::addTo(CLI::App& cmd) {
  cmd.add_option("--config", config_file, "Configuration file (JSON with comments)");
  auto override_of = [this](const std::string& path) {
    return [this, path](const std::string& value) { overrides.emplace_back(path, value); };
  };
  cmd.add_option_function<std::string>("--data-dir", override_of("data_dir"),
                                       "Data directory (default ./data or $LATENTGATE_DATA)");
  cmd.add_option_function<std::string>("--log-level", override_of("log.level"),
                                       "trace, debug, info, warn, error, critical or off");
  cmd.add_option_function<std::string>("--log-format", override_of("log.format"), "text or json");
}

Result<Config> GlobalFlags::load(const std::vector<std::pair<std::string, std::string>>& extra) const {
  ConfigSources sources;
  sources.file = config_file;
  sources.environment = processEnvironment();
  sources.flags = overrides;
  sources.flags.insert(sources.flags.end(), extra.begin(), extra.end());
  LG_ASSIGN_OR_RETURN(Config config, loadConfig(sources));
  initLogging(config.log);
  return config;
}

}  // namespace lg::cli

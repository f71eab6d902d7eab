#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"

namespace CLI { class App; }

namespace lg::cli {

// Flags every subcommand accepts; they become config overrides.
struct GlobalFlags {
  std::string config_file;
  std::vector<std::pair<std::string, std::string>> overrides;  // (field path, value)

  // Adds --config, --data-dir, --log-level, --log-format to `cmd`.
  void addTo(CLI::App& cmd);

  // File + environment + flags (then `extra`, a subcommand's own flags that
  // set configuration fields) -> validated Config; also initializes logging.
  Result<Config> load(const std::vector<std::pair<std::string, std::string>>& extra = {}) const;
};

}  // namespace lg::cli

// Loading the process configuration: file, then environment, then flags.
//
// File: JSON with // and /* */ comments. Every key is a dotted path such as
// "log.level"; unknown keys are errors (they are usually typos).
// Environment: LATENTGATE_<PATH> with dots as underscores, upper case
// (LATENTGATE_LOG_LEVEL, LATENTGATE_ENGINE_THREADS); LATENTGATE_DATA is an
// alias of data_dir. Flags: explicit (path, value) overrides from the CLI.
// Errors name the offending source, field and value.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/options.h"

namespace lg {

struct ConfigSources {
  std::string file;                                      // empty: none
  std::map<std::string, std::string> environment;        // the process environment
  std::vector<std::pair<std::string, std::string>> flags;  // ("log.level", "debug")
};

Result<Config> loadConfig(const ConfigSources& sources);

// Parses config file text (JSON with comments) over `base`. `origin` names the
// source in error messages.
Status applyConfigText(const std::string& text, const std::string& origin, Config& config);

// Sets one dotted field from its string form ("engine.threads", "4").
Status setConfigField(const std::string& path, const std::string& value, Config& config);

// Checks cross-field and range constraints; errors name the field and value.
Status validateConfig(const Config& config);

// The effective configuration as JSON text (for `latentgate config show`).
std::string configToJson(const Config& config);

// Collects `environ` into a map (called by main only; libraries never read it).
std::map<std::string, std::string> processEnvironment();

}  // namespace lg

// The logging options, apart from the logger itself, so that the
// configuration can name them without pulling spdlog into every file that
// sees the options (common/logging.h has the loggers).
#pragma once

#include <string>

namespace lg {

enum class LogFormat { kText, kJson };

// Parsed and validated by config/ like every other options struct.
struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::kText;
};

}  // namespace lg

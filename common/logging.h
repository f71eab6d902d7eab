// Process-wide logging: one spdlog logger per component ("proxy", "cache", ...),
// human-readable lines by default or JSON lines on request.
//
// Policy (docs/operations.md): never log secrets (API keys, admin key) or prompt
// and completion text at info level or above. Log ids, counts and timings.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "common/log_options.h"

namespace lg {

// Applies level and format to all existing and future component loggers.
// Safe to call more than once (tests, reloads). Thread-safe.
void initLogging(const LogOptions& options);

// The logger of a component, created on first use. The pointer stays valid for
// the life of the process; callers may keep it in a static.
spdlog::logger* componentLogger(std::string_view component);

}  // namespace lg

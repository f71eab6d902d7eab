// The "cache" component's logger, shared by the files of cache/.
#pragma once

#include "common/logging.h"

namespace lg::cache {

inline spdlog::logger* cacheLog() {
  static spdlog::logger* logger = componentLogger("cache");
  return logger;
}

}  // namespace lg::cache

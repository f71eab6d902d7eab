// The "proxy" component's logger, shared by the files of proxy/.
#pragma once

#include "common/logging.h"

namespace lg::proxy {

inline spdlog::logger* proxyLog() {
  static spdlog::logger* logger = componentLogger("proxy");
  return logger;
}

}  // namespace lg::proxy

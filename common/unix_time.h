// The wall clock as Unix time, for what is stored or shown with a date:
// ledger entries, key creation, `created` fields, expiries. Durations and
// timeouts use std::chrono::steady_clock instead.
#pragma once

#include <chrono>
#include <cstdint>

namespace lg {

inline int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline int64_t unixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace lg

// LG_CHECK: invariants that hold in release builds too.
//
// `assert` vanishes under NDEBUG, which the default build defines. Use
// LG_CHECK for invariants whose violation would corrupt data or leak across
// tenants (a block released twice lands on the free list twice and serves one
// sequence's latents to another as a cache hit); the process then stops at
// once with the file, line, condition and the values involved, rather than
// going on with a corrupt pool or index. Keep `assert` for checks that are
// cheap to lose (a caller bug that fails loudly anyway).
//
// The failure path is out of line and the condition is marked unlikely, so a
// check costs one predictable branch on the hot path.
//
//   LG_CHECK(refs > 0, "release of free block ", id, " (count ", refs, ")");
#pragma once

#include <sstream>
#include <string>

namespace lg {

// Writes "FATAL file:line: check `expr` failed: detail" to stderr and aborts.
[[noreturn]] void checkFailed(const char* file, int line, const char* expr, const std::string& detail);

template <typename... Parts>
std::string checkDetail(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace lg

#define LG_CHECK(cond, ...)                                                             \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      ::lg::checkFailed(__FILE__, __LINE__, #cond, ::lg::checkDetail(__VA_ARGS__));     \
    }                                                                                   \
  } while (0)

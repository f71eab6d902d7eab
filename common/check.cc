#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace lg {

void checkFailed(const char* file, int line, const char* expr, const std::string& detail) {
  // Plain stdio rather than the logger: the process may be in any state, and
  // the message must reach stderr before abort() even if logging is broken.
  std::fprintf(stderr, "FATAL %s:%d: check `%s` failed: %s\n", file, line, expr, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace lg

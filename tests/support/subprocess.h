// Runs a child process with the given stdin and captures stdout/stderr.
// For end-to-end tests of the `latentgate` binary.
#pragma once

#include <string>
#include <vector>

namespace lg::test {

struct ProcessResult {
  int exit_code = -1;     // exit status, or 128 + signal when killed by a signal
  bool signaled = false;  // true if the child died from a signal (a crash)
  std::string out;
  std::string err;
};

// argv[0] is the program path. `env` entries ("K=V") are added to the environment.
ProcessResult runProcess(const std::vector<std::string>& argv, const std::string& input,
                         const std::vector<std::string>& env = {});

// Path of the latentgate binary in the build tree.
std::string latentgateBinary();

}  // namespace lg::test

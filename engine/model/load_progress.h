// A progress line for loading large checkpoints, printed on stderr only when
// stderr is a terminal (logs and pipes stay clean).
#pragma once

#include <functional>
#include <string>

#include "engine/model/model.h"

namespace lg::engine {

// Returns an empty function when stderr is not a terminal. Prints nothing for
// checkpoints under `min_bytes`. The line is rewritten in place and ended
// with a newline when loading completes.
std::function<void(const LoadProgress&)> terminalLoadProgress(std::string label, uint64_t min_bytes = 256ull << 20);

// The same for byte counts (writing a checkpoint).
std::function<void(uint64_t done, uint64_t total)> terminalByteProgress(std::string label,
                                                                         uint64_t min_bytes = 256ull << 20);

}  // namespace lg::engine

// Progress lines for the terminal: the CLI's (and the benchmarks') printers for
// the progress callbacks the engine reports through (ModelLoadOptions::progress,
// CheckpointInitOptions::progress). A line is printed on stderr only when stderr
// is a terminal, so logs and pipes stay clean; the library itself prints nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/model/model.h"

namespace lg::cli {

// Returns an empty function when stderr is not a terminal. Prints nothing for
// checkpoints under `min_bytes`. The line is rewritten in place and ended
// with a newline when loading completes.
std::function<void(const engine::LoadProgress&)> terminalLoadProgress(std::string label,
                                                                      uint64_t min_bytes = 256ull << 20);

// The same for byte counts (writing a checkpoint).
std::function<void(uint64_t done, uint64_t total)> terminalByteProgress(std::string label,
                                                                         uint64_t min_bytes = 256ull << 20);

}  // namespace lg::cli

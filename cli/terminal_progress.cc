#include "cli/terminal_progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace lg::cli {
namespace {

struct Line {
  std::string label;
  uint64_t min_bytes;
  std::chrono::steady_clock::time_point last{};
  bool finished = false;

  void print(const char* phase, uint64_t done, uint64_t total) {
    if (total < min_bytes || finished) return;
    const auto now = std::chrono::steady_clock::now();
    const bool complete = done >= total;
    if (!complete && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    std::fprintf(stderr, "\r%s: %s %.1f / %.1f GB (%3.0f%%)", label.c_str(), phase, done / 1e9, total / 1e9,
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
    if (complete) {
      std::fputc('\n', stderr);
      finished = true;
    }
    std::fflush(stderr);
  }
};

}  // namespace

std::function<void(const engine::LoadProgress&)> terminalLoadProgress(std::string label, uint64_t min_bytes) {
  if (!::isatty(STDERR_FILENO)) return {};
  auto line = std::make_shared<Line>(Line{std::move(label), min_bytes});
  return [line](const engine::LoadProgress& p) {
    // Validation completes quickly (the weights are mapped, not read); the
    // prefetch pass that reads every page is the long part.
    if (p.phase == "prefetching") line->print("reading weights", p.done_bytes, p.total_bytes);
  };
}

std::function<void(uint64_t, uint64_t)> terminalByteProgress(std::string label, uint64_t min_bytes) {
  if (!::isatty(STDERR_FILENO)) return {};
  auto line = std::make_shared<Line>(Line{std::move(label), min_bytes});
  return [line](uint64_t done, uint64_t total) { line->print("writing", done, total); };
}

}  // namespace lg::cli

// What every command that runs the model loads first, in one place: the
// tokenizer, the chat template, the model (its weights prefetched, with a
// progress line on the terminal) and the backend over it. `latentgate
// generate` and `forward` use it, `serve` is meant to, and so may tests and
// benchmarks (library lg_cli_support).
//
// The prefix cache over the backend's pool is opened apart, with
// openPrefixCache (prefix_cache_setup.h), because each command wants it
// differently: serve only with cache.enabled (DATA/kv), generate always (tier
// 0 alone without --cache-dir), forward only with --cache-dir. Open it after
// loadEngine and destroy it before the LoadedEngine: it borrows the pool.
//
// Serve, for instance:
//   auto model_dir = servedModelDir(config, std::cerr);
//   EngineLoadOptions options;
//   options.model_dir = *model_dir;
//   EngineLoadStep step{};
//   auto engine = loadEngine(config, options, &step);
//   if (!engine.isOk()) return fail(engineLoadStepName(step), engine.status());
//   if (config.cache.enabled) cache = openPrefixCache(config, cache::diskTierOptions(config).path, *engine->backend);
//
// Errors are Status values, never exceptions; the loader prints nothing but
// the progress line (only when stderr is a terminal).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/options.h"
#include "engine/backend.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::cli {

struct EngineLoadOptions {
  std::string model_dir;       // the checkpoint directory (required)
  bool tokenizer = true;       // load its tokenizer (forward runs ids and needs none)
  bool chat_template = true;   // load its chat template (generate loads it on first use instead)
  bool prefetch = true;        // engine::ModelLoadOptions::prefetch: read every weight page before serving
  bool terminal_progress = true;  // the "reading weights" line on stderr when it is a terminal
  std::string progress_label;     // that line's label; empty: "loading MODEL_DIR"
  // The backend's options; empty: engine::backendOptions(config). forward
  // sizes the pool for its one sequence this way.
  std::optional<engine::BackendOptions> backend_options;
};

struct LoadedEngine {
  std::string model_dir;
  std::unique_ptr<text::Tokenizer> tokenizer;       // null unless asked for
  std::optional<text::ChatTemplate> chat_template;  // empty unless asked for
  engine::BackendOptions backend_options;           // what the backend was created with
  std::unique_ptr<engine::Backend> backend;         // owns the model
  double load_ms = 0;  // loading the model and creating the backend (not the tokenizer or template)
};

// The steps of loadEngine, in order, for messages that name the one that
// failed (`latentgate serve: tokenizer: ...`).
enum class EngineLoadStep : uint8_t { kTokenizer, kChatTemplate, kModel, kBackend };

// "tokenizer", "chat template", "model", "backend".
std::string_view engineLoadStepName(EngineLoadStep step);

// Loads what `options` asks for from options.model_dir, then creates
// config.engine.backend over the model. On failure the Status is the failing
// step's own, unchanged (generate and forward print it as is), and
// *failed_step, when given, names that step.
Result<LoadedEngine> loadEngine(const Config& config, const EngineLoadOptions& options,
                                EngineLoadStep* failed_step = nullptr);

// The model directory `serve` runs: engine.model_dir, or when that is empty
// DATA/models/demo, where the random-weight `demo` preset is written at first
// start (announced on `notices`, since writing it takes a while).
Result<std::string> servedModelDir(const Config& config, std::ostream& notices);

}  // namespace lg::cli

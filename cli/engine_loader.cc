#include "cli/engine_loader.h"

#include <chrono>
#include <filesystem>
#include <utility>

#include "cli/terminal_progress.h"
#include "engine/backend_config.h"
#include "engine/backend_factory.h"
#include "engine/model/model.h"
#include "engine/model/presets.h"

namespace lg::cli {

std::string_view engineLoadStepName(EngineLoadStep step) {
  switch (step) {
    case EngineLoadStep::kTokenizer:
      return "tokenizer";
    case EngineLoadStep::kChatTemplate:
      return "chat template";
    case EngineLoadStep::kModel:
      return "model";
    case EngineLoadStep::kBackend:
      return "backend";
  }
  return "engine";
}

Result<LoadedEngine> loadEngine(const Config& config, const EngineLoadOptions& options, EngineLoadStep* failed_step) {
  using Clock = std::chrono::steady_clock;
  auto fail = [failed_step](EngineLoadStep step, Status status) {
    if (failed_step != nullptr) *failed_step = step;
    return status;
  };
  LoadedEngine loaded;
  loaded.model_dir = options.model_dir;
  // The tokenizer and the template first: they are small, and a broken one
  // fails the command before gigabytes of weights are read.
  if (options.tokenizer) {
    auto tokenizer = text::Tokenizer::loadFromDir(options.model_dir);
    if (!tokenizer.isOk()) return fail(EngineLoadStep::kTokenizer, tokenizer.status());
    loaded.tokenizer = std::move(tokenizer).value();
  }
  if (options.chat_template) {
    auto chat_template = text::ChatTemplate::loadFromDir(options.model_dir);
    if (!chat_template.isOk()) return fail(EngineLoadStep::kChatTemplate, chat_template.status());
    loaded.chat_template.emplace(std::move(chat_template).value());
  }
  const auto t0 = Clock::now();
  engine::ModelLoadOptions load_options;
  load_options.prefetch = options.prefetch;
  if (options.terminal_progress) {
    load_options.progress = terminalLoadProgress(
        options.progress_label.empty() ? "loading " + options.model_dir : options.progress_label);
  }
  auto model = engine::Model::load(options.model_dir, load_options);
  if (!model.isOk()) return fail(EngineLoadStep::kModel, model.status());
  loaded.backend_options = options.backend_options.value_or(engine::backendOptions(config));
  auto backend = engine::createBackend(config.engine.backend, std::move(model).value(), loaded.backend_options);
  if (!backend.isOk()) return fail(EngineLoadStep::kBackend, backend.status());
  loaded.backend = std::move(backend).value();
  loaded.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return loaded;
}

Result<std::string> servedModelDir(const Config& config, std::ostream& notices) {
  if (!config.engine.model_dir.empty()) return config.engine.model_dir;
  const std::string dir = config.data_dir + "/models/demo";
  // Written once; later starts load what the first one wrote.
  if (std::filesystem::exists(dir + "/model.safetensors")) return dir;
  notices << "latentgate serve: making the demo model in " << dir << " (random weights)\n";
  LG_ASSIGN_OR_RETURN(engine::ModelConfig preset, engine::presetConfig("demo"));
  LG_RETURN_IF_ERROR(engine::writeRandomCheckpoint(preset, dir, engine::presetInitOptions("demo")));
  return dir;
}

}  // namespace lg::cli

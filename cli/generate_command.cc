// `latentgate generate --model DIR [--json] [--cache-dir DIR [--namespace TEAM]]
//   [--threads N]`
// Reads JSON lines on stdin, each {"messages": [...]} (rendered with the
// model's chat template) or {"prompt": "..."} (plain text), with optional
// max_tokens, temperature, top_p, top_k, seed, stop (a string or a list),
// stop_token_ids. All lines are submitted to the scheduler at once, so they
// are batched together, and each stream's text is printed as it comes
// ("[N] " marks a switch between streams when there are several). With
// --json, one line per finished request instead: {"index", "text",
// "token_ids", "finish_reason", "usage": {"prompt_tokens", "cached_tokens",
// "completion_tokens"}, "timing"}.
// A line that cannot be parsed, rendered or admitted yields
// {"index": N, "error": {"message", "reason"}} (on stderr without --json);
// the others still run. Exit codes: 0 all requests completed, 1 some line
// failed, 2 bad usage, configuration or model.
#include <chrono>
#include <climits>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_loader.h"
#include "cli/global_flags.h"
#include "cli/prefix_cache_setup.h"
#include "serving/scheduler.h"
#include "serving/serving_config.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::cli {
namespace {

using nlohmann::json;

constexpr int32_t kDefaultMaxTokens = 256;
constexpr size_t kMaxLineBytes = size_t{64} << 20;

struct GenerateArgs {
  std::string model_dir;
  bool json_output = false;
  std::string cache_dir;
  std::string cache_namespace = "default";
  int threads = 0;
};

struct Renderer {
  const std::string& model_dir;
  const text::Tokenizer& tokenizer;
  std::optional<Result<text::ChatTemplate>> chat_template;  // loaded on first use

  Result<std::vector<int32_t>> promptIds(const json& line) {
    const bool has_prompt = line.contains("prompt");
    if (has_prompt == line.contains("messages")) return invalidArgument("expected exactly one of \"prompt\" or \"messages\"");
    if (has_prompt) {
      if (!line["prompt"].is_string()) return invalidArgument("\"prompt\" must be a string");
      return tokenizer.encode(line["prompt"].get_ref<const std::string&>());
    }
    const json& messages = line["messages"];
    if (!messages.is_array()) return invalidArgument("\"messages\" must be an array");
    if (!chat_template) chat_template = text::ChatTemplate::loadFromDir(model_dir);
    if (!chat_template->isOk()) return chat_template->status();
    text::ChatRenderInput input;
    input.messages = &messages;
    input.add_generation_prompt = true;
    if (auto it = line.find("tools"); it != line.end()) input.tools = &*it;
    LG_ASSIGN_OR_RETURN(text::PromptText prompt, (*chat_template)->render(input));
    return tokenizer.encodePrompt(prompt);
  }
};

// The sampling fields of one input line.
Status readSampling(const json& line, int32_t prompt_len, int32_t max_context, serving::SamplingOptions& s) {
  auto number = [&](const char* key, float& out) -> Status {
    auto it = line.find(key);
    if (it == line.end() || it->is_null()) return Status::ok();
    if (!it->is_number()) return invalidArgument(std::string("\"") + key + "\" must be a number");
    out = it->get<float>();
    return Status::ok();
  };
  auto integer = [&](const char* key, int32_t& out) -> Status {
    auto it = line.find(key);
    if (it == line.end() || it->is_null()) return Status::ok();
    if (!it->is_number_integer() || it->get<int64_t>() < INT32_MIN || it->get<int64_t>() > INT32_MAX) {
      return invalidArgument(std::string("\"") + key + "\" must be a 32-bit integer");
    }
    out = static_cast<int32_t>(it->get<int64_t>());
    return Status::ok();
  };
  s.max_tokens = std::max(1, std::min(kDefaultMaxTokens, max_context - prompt_len));
  LG_RETURN_IF_ERROR(integer("max_tokens", s.max_tokens));
  LG_RETURN_IF_ERROR(number("temperature", s.temperature));
  LG_RETURN_IF_ERROR(number("top_p", s.top_p));
  LG_RETURN_IF_ERROR(integer("top_k", s.top_k));
  if (auto it = line.find("seed"); it != line.end() && !it->is_null()) {
    if (!it->is_number_integer()) return invalidArgument("\"seed\" must be an integer");
    s.seed = it->get<uint64_t>();
  }
  if (auto it = line.find("stop"); it != line.end() && !it->is_null()) {
    if (it->is_string()) {
      s.stop = {it->get<std::string>()};
    } else if (it->is_array()) {
      for (const json& v : *it) {
        if (!v.is_string()) return invalidArgument("\"stop\" must be a string or a list of strings");
        s.stop.push_back(v.get<std::string>());
      }
    } else {
      return invalidArgument("\"stop\" must be a string or a list of strings");
    }
  }
  if (auto it = line.find("stop_token_ids"); it != line.end() && !it->is_null()) {
    if (!it->is_array()) return invalidArgument("\"stop_token_ids\" must be a list of integers");
    for (const json& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        return invalidArgument("\"stop_token_ids\" must be a list of 32-bit integers");
      }
      s.stop_token_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  return Status::ok();
}

void printError(bool as_json, size_t index, const std::string& message, std::string_view reason) {
  if (as_json) {
    json line = {{"index", index}, {"error", {{"message", message}, {"reason", reason}}}};
    std::cout << line.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  } else {
    std::cerr << "latentgate generate: line " << index + 1 << ": " << message << "\n";
  }
}

int runGenerate(const GlobalFlags& flags, const GenerateArgs& args) {
  std::vector<std::pair<std::string, std::string>> shorthands;
  if (args.threads > 0) shorthands.emplace_back("engine.threads", std::to_string(args.threads));
  auto config = flags.load(shorthands);
  if (!config.isOk()) {
    std::cerr << "latentgate: " << config.status().toString() << "\n";
    return 2;
  }
  auto team = cache::TeamNamespace::ofTeam(args.cache_namespace);
  if (!team.isOk()) {
    std::cerr << "latentgate generate: --namespace: " << team.status().message() << "\n";
    return 2;
  }
  EngineLoadOptions load_options;
  load_options.model_dir = args.model_dir;
  load_options.chat_template = false;  // loaded by the first "messages" line (Renderer)
  auto loaded = loadEngine(*config, load_options);
  if (!loaded.isOk()) {
    std::cerr << "latentgate generate: " << loaded.status().toString() << "\n";
    return 2;
  }
  engine::Backend& backend = *loaded->backend;
  // Without --cache-dir the cache lives in the latent pool only, so that
  // requests sharing a prefix still compute it once.
  auto cache = openPrefixCache(*config, args.cache_dir, backend);
  if (!cache.isOk()) {
    std::cerr << "latentgate generate: prefix cache: " << cache.status().toString() << "\n";
    return 2;
  }
  auto scheduler = serving::Scheduler::create(backend, cache->index.get(), *loaded->tokenizer,
                                              serving::schedulerOptions(*config, backend.config()));
  if (!scheduler.isOk()) {
    std::cerr << "latentgate generate: " << scheduler.status().toString() << "\n";
    return 2;
  }

  // Read every line first: all requests are submitted together.
  Renderer renderer{loaded->model_dir, *loaded->tokenizer, std::nullopt};
  serving::EventQueue events;
  std::map<uint64_t, size_t> index_of;  // request id -> input line index
  int exit_code = 0;
  std::string line;
  std::vector<std::pair<size_t, serving::GenerationRequest>> requests;
  for (size_t index = 0; std::getline(std::cin, line); ++index) {
    if (line.empty()) {
      --index;
      continue;
    }
    json parsed = line.size() > kMaxLineBytes ? json(nullptr) : json::parse(line, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      printError(args.json_output, index, "expected a JSON object per line (at most 64 MiB)", "invalid_request");
      exit_code = 1;
      continue;
    }
    Result<std::vector<int32_t>> ids = renderer.promptIds(parsed);
    serving::GenerationRequest request(*team);
    Status s = ids.isOk() ? readSampling(parsed, static_cast<int32_t>(ids->size()), backend.maxContext(),
                                         request.sampling)
                          : ids.status();
    if (!s.isOk()) {
      printError(args.json_output, index, s.toString(), "invalid_request");
      exit_code = 1;
      continue;
    }
    request.prompt = std::move(ids).value();
    requests.emplace_back(index, std::move(request));
  }
  size_t in_flight = 0;
  for (auto& [index, request] : requests) {
    serving::Submission sub = (*scheduler)->submit(std::move(request), events.sink());
    if (!sub) {
      printError(args.json_output, index, sub.refused.message, serving::refusalName(sub.refused.reason));
      exit_code = 1;
      continue;
    }
    index_of[sub.handle.id()] = index;
    ++in_flight;
  }

  std::map<size_t, std::pair<std::string, std::vector<int32_t>>> streamed;  // by index
  std::optional<size_t> last_printed;
  const bool several = in_flight > 1;
  while (in_flight > 0) {
    serving::StreamEvent e = events.pop();
    const size_t index = index_of.at(e.request_id);
    auto& [text, ids] = streamed[index];
    text += e.text;
    ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
    if (!args.json_output && !e.text.empty()) {
      if (several && last_printed != index) std::cout << (last_printed ? "\n" : "") << "[" << index << "] ";
      last_printed = index;
      std::cout << e.text << std::flush;
    }
    if (!e.final) continue;
    --in_flight;
    const bool completed = e.finish_reason == serving::FinishReason::kStop ||
                           e.finish_reason == serving::FinishReason::kLength;
    if (!completed) exit_code = 1;
    if (args.json_output) {
      json out = {
          {"index", index},
          {"text", text},
          {"token_ids", ids},
          {"finish_reason", serving::finishReasonName(e.finish_reason)},
          {"usage",
           {{"prompt_tokens", e.usage.prompt_tokens},
            {"cached_tokens", e.usage.hitTokens()},
            {"completion_tokens", e.usage.completion_tokens}}},
          {"timing",
           {{"queued_ms", e.timing.queued * 1e3},
            {"cache_lookup_ms", e.timing.cache_lookup * 1e3},
            {"prefill_ms", e.timing.prefill * 1e3},
            {"first_token_ms", e.timing.first_token * 1e3},
            {"decode_ms", e.timing.decode * 1e3}}},
      };
      if (!e.message.empty()) out["message"] = e.message;
      std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    } else if (!completed) {
      std::cerr << "\nlatentgate generate: line " << index + 1 << ": " << serving::finishReasonName(e.finish_reason)
                << ": " << e.message << "\n";
    }
  }
  if (!args.json_output && last_printed) std::cout << std::endl;
  (*scheduler)->shutdown(std::chrono::milliseconds(0));
  if (cache->disk) {
    // Everything computed (prompts and replies) is in DIR for the next run.
    if (Status s = cache->index->persistAll(/*flush_files=*/true); !s.isOk()) {
      std::cerr << "latentgate generate: prefix cache: " << s.toString() << " (continuing)\n";
    }
  }
  return exit_code;
}

}  // namespace

Command addGenerateCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate completions for JSON lines of {\"messages\"} or {\"prompt\"}, all batched together");
  auto args = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", args->model_dir, "Model directory (config.json, weights, tokenizer files)")->required();
  cmd->add_flag("--json", args->json_output, "One JSON line per finished request instead of streamed text");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "Persistent prefix cache (a RocksDB directory): reuse cached prefixes, store what is new");
  cmd->add_option("--namespace", args->cache_namespace, "The team whose cache namespace is used (default: default)");
  cmd->add_option("--threads", args->threads, "Compute threads (default: engine.threads)")->check(CLI::PositiveNumber);
  flags.addTo(*cmd);
  return {cmd, [&flags, args]() -> int { return runGenerate(flags, *args); }};
}

}  // namespace lg::cli

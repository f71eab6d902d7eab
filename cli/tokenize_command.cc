// `latentgate tokenize --model DIR`: JSON lines in, JSON lines out.
//   {"text": "..."}                                   -> {"ids": [...]}
//   {"messages": [...], "add_generation_prompt": true} -> {"ids": [...], "text": "..."}
// Text and message content are encoded as plain text (special-token strings in
// them stay text); only the chat template's own markers become special tokens.
// A bad line yields {"error": {"message": ..., "line": N}} and processing goes on;
// the exit code is 1 if any line failed.
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxLineBytes = size_t{64} << 20;

struct TokenizeSession {
  std::string model_dir;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<Result<text::ChatTemplate>> chat_template;  // loaded on first use

  Result<json> handle(const std::string& line) {
    json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded()) return invalidArgument("malformed JSON (or invalid UTF-8)");
    if (!request.is_object()) return invalidArgument("expected a JSON object");
    const bool has_text = request.contains("text");
    const bool has_messages = request.contains("messages");
    if (has_text == has_messages) return invalidArgument("expected exactly one of \"text\" or \"messages\"");
    json out = json::object();
    if (has_text) {
      const json& text = request["text"];
      if (!text.is_string()) return invalidArgument("\"text\" must be a string");
      LG_ASSIGN_OR_RETURN(auto ids, tokenizer->encode(text.get_ref<const std::string&>()));
      out["ids"] = ids;
      return out;
    }
    const json& messages = request["messages"];
    if (!messages.is_array()) return invalidArgument("\"messages\" must be an array");
    bool add_generation_prompt = false;
    if (auto it = request.find("add_generation_prompt"); it != request.end()) {
      if (!it->is_boolean()) return invalidArgument("\"add_generation_prompt\" must be a boolean");
      add_generation_prompt = it->get<bool>();
    }
    if (!chat_template) chat_template = text::ChatTemplate::loadFromDir(model_dir);
    if (!chat_template->isOk()) return chat_template->status();
    text::ChatRenderInput input;
    input.messages = &messages;
    input.add_generation_prompt = add_generation_prompt;
    if (auto it = request.find("tools"); it != request.end()) input.tools = &*it;
    LG_ASSIGN_OR_RETURN(text::PromptText prompt, (*chat_template)->render(input));
    LG_ASSIGN_OR_RETURN(auto ids, tokenizer->encodePrompt(prompt));
    out["ids"] = ids;
    out["text"] = prompt.text;
    return out;
  }
};

}  // namespace

Command addTokenizeCommand(CLI::App& app, GlobalFlags& flags) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode JSON lines of text or chat messages into token ids");
  auto model_dir = std::make_shared<std::string>();
  cmd->add_option("--model", *model_dir, "Model directory with tokenizer.json and tokenizer_config.json")
      ->required();
  flags.addTo(*cmd);
  return {cmd, [&flags, model_dir]() -> int {
            if (auto config = flags.load(); !config.isOk()) {
              std::cerr << "latentgate: " << config.status().toString() << "\n";
              return 2;
            }
            TokenizeSession session;
            session.model_dir = *model_dir;
            auto tokenizer = text::Tokenizer::loadFromDir(*model_dir);
            if (!tokenizer.isOk()) {
              std::cerr << "latentgate tokenize: " << tokenizer.status().toString() << "\n";
              return 2;
            }
            session.tokenizer = std::move(tokenizer).value();
            std::ios::sync_with_stdio(false);
            int exit_code = 0;
            std::string line;
            for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
              if (line.empty()) continue;
              Result<json> out = line.size() > kMaxLineBytes
                                     ? Result<json>(invalidArgument("line longer than 64 MiB"))
                                     : session.handle(line);
              if (out.isOk()) {
                std::cout << out->dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
              } else {
                exit_code = 1;
                json error = {{"error", {{"message", out.status().toString()}, {"line", line_no}}}};
                std::cout << error.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
              }
              std::cout.flush();
            }
            return exit_code;
          }};
}

}  // namespace lg::cli

#include "text/chat/chat_template.h"

#include <exception>
#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/chat/jinja_interpreter.h"
#include "text/chat/jinja_parser.h"

namespace lg::text {

using nlohmann::json;

struct ChatTemplate::Impl {
  jinja::TemplateAst ast;
  std::string bos_token;
  std::string eos_token;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, std::string bos_token, std::string eos_token) {
  try {
    auto impl = std::make_unique<Impl>();
    LG_ASSIGN_OR_RETURN(impl->ast, jinja::parseTemplate(source));
    impl->bos_token = std::move(bos_token);
    impl->eos_token = std::move(eos_token);
    return ChatTemplate(std::move(impl));
  } catch (const std::exception& e) {
    return internalError(std::string("chat template parse: ") + e.what());
  }
}

namespace {

// bos_token / eos_token are a string or an AddedToken object ({"content": ...}).
Result<std::string> specialToken(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return invalidArgument(std::string("tokenizer_config.json: \"") + key + "\" must be a string or an AddedToken object");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::loadFromDir(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  LG_ASSIGN_OR_RETURN(std::string text, readFile(path, size_t{64} << 20));
  const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return invalidArgument(path + ": not a JSON object");
  std::string source;
  auto it = config.find("chat_template");
  // Newer checkpoints keep the template in its own file, which transformers
  // prefers over the tokenizer_config.json entry.
  const std::string jinja_path = dir + "/chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::is_regular_file(jinja_path, ec)) {
    LG_ASSIGN_OR_RETURN(source, readFile(jinja_path, size_t{16} << 20));
  } else if (it == config.end() || it->is_null()) {
    return notFound(path + ": no \"chat_template\" (and no chat_template.jinja)");
  } else if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    // transformers' named templates: [{"name": ..., "template": ...}], "default" is used.
    bool found = false;
    for (const json& entry : *it) {
      if (!entry.is_object()) continue;
      auto name = entry.find("name");
      auto tmpl = entry.find("template");
      if (name != entry.end() && name->is_string() && *name == "default" && tmpl != entry.end() &&
          tmpl->is_string()) {
        source = tmpl->get<std::string>();
        found = true;
      }
    }
    if (!found) return notFound(path + ": \"chat_template\" has no template named \"default\"");
  } else {
    return invalidArgument(path + ": \"chat_template\" must be a string or a list of named templates");
  }
  LG_ASSIGN_OR_RETURN(std::string bos, specialToken(config, "bos_token"));
  LG_ASSIGN_OR_RETURN(std::string eos, specialToken(config, "eos_token"));
  auto result = parse(source, std::move(bos), std::move(eos));
  if (!result.isOk()) return result.status().withContext(dir);
  return result;
}

Result<PromptText> ChatTemplate::render(const ChatRenderInput& input, const ChatRenderOptions& options) const {
  using jinja::Value;
  if (input.messages == nullptr || !input.messages->is_array()) {
    return invalidArgument("\"messages\" must be an array");
  }
  if (input.tools != nullptr && !input.tools->is_null()) {
    if (!input.tools->is_array()) return invalidArgument("\"tools\" must be an array");
    for (const json& tool : *input.tools) {
      if (!tool.is_object()) return invalidArgument("each tool must be a JSON object");
    }
  }
  if (input.extra != nullptr && !input.extra->is_null() && !input.extra->is_object()) {
    return invalidArgument("extra template variables must be a JSON object");
  }
  try {
    // The variables transformers' apply_chat_template passes: messages, tools
    // (None when absent), documents, add_generation_prompt and the special
    // tokens, then the caller's extra keyword arguments.
    std::vector<std::pair<std::string, Value>> vars;
    vars.emplace_back("messages", Value::fromJson(*input.messages));
    vars.emplace_back("tools", input.tools != nullptr ? Value::fromJson(*input.tools) : Value::none(true));
    vars.emplace_back("documents", Value::none(true));
    vars.emplace_back("add_generation_prompt", Value::boolean(input.add_generation_prompt, true));
    vars.emplace_back("bos_token", Value::string(impl_->bos_token, true));
    vars.emplace_back("eos_token", Value::string(impl_->eos_token, true));
    if (input.extra != nullptr && input.extra->is_object()) {
      for (auto it = input.extra->begin(); it != input.extra->end(); ++it) {
        const std::string& key = it.key();
        if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt") {
          return invalidArgument("extra template variable \"" + key + "\" is reserved");
        }
        bool replaced = false;
        for (auto& [name, value] : vars) {
          if (name == key) {
            value = Value::fromJson(*it);  // request data: untrusted even as bos_token
            replaced = true;
          }
        }
        if (!replaced) vars.emplace_back(key, Value::fromJson(*it));
      }
    }
    jinja::RenderLimits limits;
    limits.max_output_bytes = options.max_output_bytes;
    limits.max_copied_bytes = options.max_copied_bytes;
    limits.max_loop_iterations = options.max_loop_iterations;
    ChatRenderStats ignored;
    ChatRenderStats* stats = options.stats != nullptr ? options.stats : &ignored;
    LG_ASSIGN_OR_RETURN(jinja::StrRep rendered, jinja::renderTemplate(impl_->ast, vars, limits, &stats->copied_bytes,
                                                                      &stats->loop_iterations));
    PromptText prompt;
    prompt.text = std::move(rendered.text);
    prompt.trusted = std::move(rendered.trusted);
    return prompt;
  } catch (const std::bad_alloc&) {
    return resourceExhausted("out of memory rendering the chat template");
  } catch (const std::exception& e) {
    return internalError(std::string("chat template render: ") + e.what());
  }
}

}  // namespace lg::text

#include "proxy/gateway/structured_output.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar/grammar_cache.h"
#include "text/grammar/matcher.h"

namespace lg::proxy {

namespace grammar = text::grammar;
using openai::ApiError;
using openai::ApiResult;
using openai::ResponseFormat;

namespace {

// A scheduler constraint over one grammar matcher.
class MatcherConstraint final : public serving::TokenConstraint {
 public:
  MatcherConstraint(std::shared_ptr<const grammar::Grammar> g, std::shared_ptr<const grammar::Vocabulary> vocab)
      : matcher_(std::move(g), std::move(vocab)) {}

  void fillAllowed(std::span<uint32_t> bitmask) override {
    const size_t words = matcher_.vocabulary().maskWords();
    if (bitmask.size() >= words) {
      matcher_.fillNextTokenMask(bitmask);
      return;
    }
    // A logits row narrower than the tokenizer's vocabulary (never for a
    // served model; the mask is cut to the row).
    scratch_.assign(words, 0u);
    matcher_.fillNextTokenMask(scratch_);
    std::copy_n(scratch_.begin(), bitmask.size(), bitmask.begin());
  }
  bool accept(int32_t token) override { return matcher_.accept(token); }
  bool canEnd() const override { return matcher_.canEnd(); }
  bool mustEnd() const override { return matcher_.mustEnd(); }

 private:
  grammar::Matcher matcher_;
  std::vector<uint32_t> scratch_;
};

// "tools[3].function.parameters" -> "/tools/3/function/parameters".
std::string pointerOf(std::string_view param) {
  std::string out = "/";
  for (char c : param) {
    if (c == '.' || c == '[') {
      if (out.back() != '/') out += '/';
    } else if (c != ']') {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
  }
  return out;
}

// The schema at `param` of the raw body, keys in the client's order; a
// string there (vLLM's guided_json as JSON text) is parsed. Null: not found
// (the caller keeps the parsed, sorted one).
nlohmann::ordered_json orderedSchema(std::string_view raw_body, std::string_view param) {
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  if (body.is_discarded()) return nullptr;
  const nlohmann::ordered_json::json_pointer at(pointerOf(param));
  if (!body.contains(at)) return nullptr;
  nlohmann::ordered_json schema = body.at(at);
  if (schema.is_string()) schema = nlohmann::ordered_json::parse(schema.get<std::string>(), nullptr, false);
  if (schema.is_discarded()) return nullptr;
  return schema;
}

ApiError grammarError(const grammar::GrammarError& e, const std::string& param) {
  std::string where = param.empty() ? std::string("the schema") : param;
  if (!e.path.empty()) where += " at " + e.path;
  return openai::invalidRequest(param, "invalid_value",
                                where + ": " + (e.keyword.empty() ? std::string() : "'" + e.keyword + "': ") + e.message);
}

}  // namespace

StructuredOutput::StructuredOutput(const text::Tokenizer& tokenizer, grammar::Limits limits)
    : vocab_(grammar::Vocabulary::fromTokenizer(tokenizer)),
      limits_(limits),
      cache_(std::make_unique<grammar::GrammarCache>()) {}

StructuredOutput::~StructuredOutput() = default;

serving::TokenConstraintFactory StructuredOutput::constraintFor(std::shared_ptr<const grammar::Grammar> g,
                                                                std::shared_ptr<const grammar::Vocabulary> vocab) {
  return [g = std::move(g), vocab = std::move(vocab)]() -> std::unique_ptr<serving::TokenConstraint> {
    return std::make_unique<MatcherConstraint>(g, vocab);
  };
}

serving::TokenConstraintFactory StructuredOutput::factoryFor(std::shared_ptr<const grammar::Grammar> g) const {
  // Every token table now, here (an I/O thread, once per grammar: the cache
  // keeps the grammar and its tables), so that no mask the engine thread asks
  // for ever builds one (docs/grammar.md, "prepare").
  g->prepare(vocab_);
  return constraintFor(std::move(g), vocab_);
}

ApiResult<std::shared_ptr<const grammar::Grammar>> StructuredOutput::compileFormat(const ResponseFormat& format,
                                                                                  std::string_view raw_body) const {
  grammar::GrammarOrError compiled;
  switch (format.kind) {
    case ResponseFormat::Kind::kText:
      return std::shared_ptr<const grammar::Grammar>();
    case ResponseFormat::Kind::kJsonObject:
      compiled = cache_->anyJsonObject(limits_);
      break;
    case ResponseFormat::Kind::kJsonSchema: {
      nlohmann::ordered_json schema = orderedSchema(raw_body, format.param);
      if (schema.is_null()) schema = nlohmann::ordered_json::parse(format.schema.dump());
      compiled = cache_->jsonSchema(schema, limits_);
      break;
    }
    case ResponseFormat::Kind::kRegex:
      compiled = cache_->regex(format.regex, limits_);
      break;
    case ResponseFormat::Kind::kChoice:
      compiled = cache_->choices(format.choices, limits_);
      break;
  }
  if (const auto* e = std::get_if<grammar::GrammarError>(&compiled)) return grammarError(*e, format.param);
  return std::get<std::shared_ptr<const grammar::Grammar>>(compiled);
}

ApiResult<serving::TokenConstraintFactory> StructuredOutput::forFormat(const ResponseFormat& format,
                                                                       std::string_view raw_body) const {
  ApiResult<std::shared_ptr<const grammar::Grammar>> g = compileFormat(format, raw_body);
  if (!g) return g.error();
  if (!*g) return serving::TokenConstraintFactory();
  return factoryFor(std::move(*g));
}

ApiResult<serving::TokenConstraintFactory> StructuredOutput::forChat(const openai::ChatPrompt& prompt,
                                                                     openai::ToolCallSyntax syntax,
                                                                     std::string_view raw_body) const {
  using Mode = openai::ToolChoice::Mode;
  const bool tools_callable = !prompt.tools.empty() && prompt.tool_choice.mode != Mode::kNone;
  const bool calls_forced = tools_callable && (prompt.tool_choice.mode == Mode::kRequired ||
                                               prompt.tool_choice.mode == Mode::kFunction);
  const bool any_strict = std::any_of(prompt.tools.begin(), prompt.tools.end(),
                                      [](const openai::FunctionTool& t) { return t.strict; });
  if (!calls_forced && prompt.response_format.kind != ResponseFormat::Kind::kText) {
    return forFormat(prompt.response_format, raw_body);
  }
  if (!calls_forced && !(tools_callable && any_strict)) return serving::TokenConstraintFactory();

  std::vector<grammar::ToolSpec> tools;
  // Each tool's schema in the client's key order, read from the raw body.
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  for (size_t i = 0; i < prompt.tools.size(); ++i) {
    const openai::FunctionTool& t = prompt.tools[i];
    grammar::ToolSpec spec;
    spec.name = t.name;
    spec.strict = t.strict;
    spec.parameters = t.parameters.is_null() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(t.parameters.dump());
    if (!body.is_discarded() && body.contains("tools") && body["tools"].is_array() && i < body["tools"].size()) {
      // Chat nests the function ({"type": "function", "function": {...}}); Responses does not.
      const nlohmann::ordered_json& tool = body["tools"][i];
      const nlohmann::ordered_json* fn = tool.contains("function") ? &tool["function"] : &tool;
      if (fn->is_object() && fn->contains("parameters") && (*fn)["name"] == t.name) spec.parameters = (*fn)["parameters"];
    }
    tools.push_back(std::move(spec));
  }
  grammar::ToolCallOptions options;
  options.choice = prompt.tool_choice.mode == Mode::kRequired   ? grammar::ToolCallOptions::Choice::kRequired
                   : prompt.tool_choice.mode == Mode::kFunction ? grammar::ToolCallOptions::Choice::kNamed
                                                                : grammar::ToolCallOptions::Choice::kAuto;
  options.named = prompt.tool_choice.function;
  options.parallel_tool_calls = prompt.parallel_tool_calls;
  options.syntax = syntax == openai::ToolCallSyntax::kV31 ? grammar::ToolCallSyntax::kV31 : grammar::ToolCallSyntax::kV3;
  // The cache key: everything the grammar depends on, canonically.
  nlohmann::ordered_json key = nlohmann::ordered_json::array();
  for (const grammar::ToolSpec& t : tools) key.push_back({t.name, t.strict, t.parameters});
  key.push_back({static_cast<int>(options.choice), options.named, options.parallel_tool_calls,
                 static_cast<int>(options.syntax)});
  grammar::GrammarOrError compiled = cache_->getOrCompile(
      "tools:" + key.dump() + grammar::limitsKey(limits_),
      [&] { return grammar::Grammar::forToolCalls(tools, options, limits_); });
  if (const auto* e = std::get_if<grammar::GrammarError>(&compiled)) {
    // The error's path is inside one tool's parameters: name the tool.
    std::string param = "tools";
    for (size_t i = 0; i < prompt.tools.size(); ++i) {
      if (e->message.find("'" + prompt.tools[i].name + "'") != std::string::npos) {
        param = "tools[" + std::to_string(i) + "].function.parameters";
      }
    }
    return grammarError(*e, param);
  }
  return factoryFor(std::get<std::shared_ptr<const grammar::Grammar>>(compiled));
}

}  // namespace lg::proxy

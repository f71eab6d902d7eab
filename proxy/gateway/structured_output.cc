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
  std::string out, segment;
  bool pending = false;
  const auto flush = [&] {
    if (pending) out += "/" + grammar::jsonPointerEscape(segment);
    segment.clear();
    pending = false;
  };
  for (char c : param) {
    if (c == '.' || c == '[' || c == ']') {
      flush();
    } else {
      segment += c;
      pending = true;
    }
  }
  flush();
  return out;
}

// The schema at `param` of the body as sent (keys in the client's order); a
// string there (vLLM's guided_json as JSON text) is parsed. Null: not found
// (the caller keeps the parsed, sorted one).
nlohmann::ordered_json orderedSchema(const nlohmann::ordered_json& body, std::string_view param) {
  if (body.is_discarded()) return nullptr;
  const nlohmann::ordered_json::json_pointer at(pointerOf(param));
  if (!body.contains(at)) return nullptr;
  nlohmann::ordered_json schema = body.at(at);
  if (schema.is_string()) schema = nlohmann::ordered_json::parse(schema.get<std::string>(), nullptr, false);
  if (schema.is_discarded()) return nullptr;
  return schema;
}

grammar::ContentFormat contentOf(const ResponseFormat& format, const nlohmann::ordered_json& body) {
  grammar::ContentFormat out;
  switch (format.kind) {
    case ResponseFormat::Kind::kText:
    case ResponseFormat::Kind::kJsonObject:
      out.kind = grammar::ContentFormat::Kind::kJsonObject;
      break;
    case ResponseFormat::Kind::kJsonSchema:
      out.kind = grammar::ContentFormat::Kind::kJsonSchema;
      out.schema = orderedSchema(body, format.param);
      if (out.schema.is_null()) out.schema = nlohmann::ordered_json::parse(format.schema.dump());
      break;
    case ResponseFormat::Kind::kRegex:
      out.kind = grammar::ContentFormat::Kind::kRegex;
      out.regex = format.regex;
      break;
    case ResponseFormat::Kind::kChoice:
      out.kind = grammar::ContentFormat::Kind::kChoices;
      out.choices = format.choices;
      break;
  }
  return out;
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

ApiResult<ReplyConstraint> StructuredOutput::describeFormat(const ResponseFormat& format,
                                                            std::string_view raw_body) const {
  ReplyConstraint out;
  if (format.kind == ResponseFormat::Kind::kText) return out;
  const nlohmann::ordered_json body = format.kind == ResponseFormat::Kind::kJsonSchema
                                          ? nlohmann::ordered_json::parse(raw_body, nullptr, false)
                                          : nlohmann::ordered_json(nullptr);
  grammar::ReplySpec spec;
  spec.content = contentOf(format, body);
  out.content_param = format.param;
  out.cache_key = "reply:" + grammar::limitsKey(limits_) + ":" + spec.canonicalText();
  out.spec = std::move(spec);
  return out;
}

ApiResult<ReplyConstraint> StructuredOutput::describeChat(const openai::ChatPrompt& prompt,
                                                          const openai::OutputParserOptions& output,
                                                          std::string_view raw_body) const {
  using Mode = openai::ToolChoice::Mode;
  const bool tools_callable = !prompt.tools.empty() && prompt.tool_choice.mode != Mode::kNone;
  const bool calls_forced = tools_callable && (prompt.tool_choice.mode == Mode::kRequired ||
                                               prompt.tool_choice.mode == Mode::kFunction);
  const bool any_strict = std::any_of(prompt.tools.begin(), prompt.tools.end(),
                                      [](const openai::FunctionTool& t) { return t.strict; });
  const bool has_format = prompt.response_format.kind != ResponseFormat::Kind::kText;
  ReplyConstraint out;
  if (!calls_forced && !has_format && !(tools_callable && any_strict)) return out;  // free text

  // Schemas with their keys in the client's order, read from the raw body.
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  grammar::ReplySpec spec;
  spec.reasoning_first = output.starts_in_reasoning;
  if (has_format && !calls_forced) {
    spec.content = contentOf(prompt.response_format, body);
    out.content_param = prompt.response_format.param;
  }
  if (tools_callable) {
    const nlohmann::ordered_json* sent_tools =
        !body.is_discarded() && body.contains("tools") && body["tools"].is_array() ? &body["tools"] : nullptr;
    for (size_t i = 0; i < prompt.tools.size(); ++i) {
      const openai::FunctionTool& t = prompt.tools[i];
      grammar::ToolSpec tool;
      tool.name = t.name;
      tool.strict = t.strict;
      tool.parameters = t.parameters.is_null() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(t.parameters.dump());
      // The tool as sent: where the parser found it (Responses), else by
      // its name (chat, whose function is nested: {"type": "function",
      // "function": {...}}). A custom tool's parameters are made by the
      // parser, around its format's regex.
      std::string param = "tools[" + std::to_string(i) + "].parameters";
      const nlohmann::ordered_json* search = sent_tools;
      if (t.origin.custom) {
        param = t.param + ".format.definition";
        search = nullptr;
      } else if (!t.param.empty()) {
        param = t.param + ".parameters";
        if (nlohmann::ordered_json sent = orderedSchema(body, param); sent.is_object()) tool.parameters = std::move(sent);
        search = nullptr;
      }
      for (size_t j = 0; search != nullptr && j < search->size(); ++j) {
        const nlohmann::ordered_json& sent = (*search)[j];
        const bool nested = sent.is_object() && sent.contains("function");
        const nlohmann::ordered_json& fn = nested ? sent["function"] : sent;
        // (A hosted tool's fields were not checked by the parser: no value() that could throw.)
        const auto name = fn.is_object() ? fn.find("name") : fn.end();
        if (!fn.is_object() || name == fn.end() || !name->is_string() || *name != t.name) continue;
        param = "tools[" + std::to_string(j) + (nested ? "].function.parameters" : "].parameters");
        if (fn.contains("parameters")) tool.parameters = fn["parameters"];
        break;
      }
      spec.tools.push_back(std::move(tool));
      out.tool_params.push_back(std::move(param));
    }
    grammar::ToolCallOptions& options = spec.tool_options;
    options.choice = prompt.tool_choice.mode == Mode::kRequired   ? grammar::ToolCallOptions::Choice::kRequired
                     : prompt.tool_choice.mode == Mode::kFunction ? grammar::ToolCallOptions::Choice::kNamed
                                                                  : grammar::ToolCallOptions::Choice::kAuto;
    options.named = prompt.tool_choice.function;
    options.parallel_tool_calls = prompt.parallel_tool_calls;
    options.syntax =
        output.syntax == openai::ToolCallSyntax::kV31 ? grammar::ToolCallSyntax::kV31 : grammar::ToolCallSyntax::kV3;
  }
  out.cache_key = "reply:" + grammar::limitsKey(limits_) + ":" + spec.canonicalText();
  out.spec = std::move(spec);
  return out;
}

std::optional<serving::TokenConstraintFactory> StructuredOutput::ready(const ReplyConstraint& reply) const {
  if (!reply.constrained()) return serving::TokenConstraintFactory();
  std::optional<grammar::GrammarOrError> found = cache_->find(reply.cache_key);
  if (!found) return std::nullopt;
  const auto* g = std::get_if<std::shared_ptr<const grammar::Grammar>>(&*found);
  if (g == nullptr || !(*g)->prepared(vocab_)) return std::nullopt;  // an error: compile() answers it
  return constraintFor(*g, vocab_);
}

ApiResult<serving::TokenConstraintFactory> StructuredOutput::compile(const ReplyConstraint& reply) const {
  if (!reply.constrained()) return serving::TokenConstraintFactory();
  grammar::GrammarOrError compiled =
      cache_->getOrCompile(reply.cache_key, [&] { return grammar::Grammar::forReply(*reply.spec, limits_); });
  if (const auto* e = std::get_if<grammar::GrammarError>(&compiled)) {
    std::string param = reply.content_param;
    if (e->tool && *e->tool < reply.tool_params.size()) {
      param = reply.tool_params[*e->tool];
      if (e->keyword == "name" && param.ends_with("parameters")) {
        param = param.substr(0, param.size() - std::string_view("parameters").size()) + "name";
      }
    } else if (e->keyword == "tool_choice") {
      param = "tool_choice";
    } else if (param.empty()) {
      param = "tools";
    }
    if (param.ends_with(".format.definition")) {
      // A custom tool's regex: the schema around it is this server's.
      grammar::GrammarError in_definition = *e;
      in_definition.path.clear();
      return grammarError(in_definition, param);
    }
    return grammarError(*e, param);
  }
  auto g = std::get<std::shared_ptr<const grammar::Grammar>>(compiled);
  // Every token table now (once per grammar: the cache keeps the grammar and
  // its tables), so that no mask the engine thread asks for ever builds one
  // (docs/grammar.md, "prepare").
  g->prepare(vocab_);
  return constraintFor(std::move(g), vocab_);
}

}  // namespace lg::proxy

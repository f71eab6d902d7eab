#include "text/grammar/grammar.h"

#include "text/grammar/automaton_builder.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/regex.h"
#include "text/grammar/token_table.h"
#include "text/grammar/vocabulary.h"

namespace lg::text::grammar {

namespace {

GrammarOrError finishInto(AutomatonBuilder& b, uint32_t root) {
  auto a = b.finish(root);
  if (auto* err = std::get_if<GrammarError>(&a)) return *err;
  return std::make_shared<const Grammar>(std::move(std::get<Automaton>(a)));
}

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

}  // namespace

GrammarOrError Grammar::fromJsonSchema(const nlohmann::json& schema, const Limits& limits) {
  return fromJsonSchema(nlohmann::ordered_json::parse(schema.dump()), limits);
}

GrammarOrError Grammar::fromJsonSchema(const nlohmann::ordered_json& schema, const Limits& limits) {
  const std::string text = schema.dump();
  if (text.size() > limits.max_schema_bytes) {
    return GrammarError{"(size)", "", "the schema is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                          std::to_string(limits.max_schema_bytes)};
  }
  AutomatonBuilder b(limits);
  JsonRules rules(b, limits);
  SchemaCompiler compiler(b, rules, schema, limits);
  auto root = compiler.compile();
  if (auto* err = std::get_if<GrammarError>(&root)) return *err;
  return finishInto(b, std::get<uint32_t>(root));
}

GrammarOrError Grammar::anyJsonObject(const Limits& limits) {
  ContentFormat object;
  object.kind = ContentFormat::Kind::kJsonObject;
  ReplySpec spec;
  spec.content = std::move(object);
  return forReply(spec, limits);
}

GrammarOrError Grammar::fromRegex(std::string_view regex, const Limits& limits) {
  ContentFormat format;
  format.kind = ContentFormat::Kind::kRegex;
  format.regex = std::string(regex);
  ReplySpec spec;
  spec.content = std::move(format);
  return forReply(spec, limits);
}

GrammarOrError Grammar::fromChoices(const std::vector<std::string>& choices, const Limits& limits) {
  ContentFormat format;
  format.kind = ContentFormat::Kind::kChoices;
  format.choices = choices;
  ReplySpec spec;
  spec.content = std::move(format);
  return forReply(spec, limits);
}

GrammarOrError Grammar::forToolCalls(const std::vector<ToolSpec>& tools, const ToolCallOptions& options,
                                     const Limits& limits) {
  ReplySpec spec;
  spec.tools = tools;
  spec.tool_options = options;
  return forReply(spec, limits);
}

namespace {

using Frag = AutomatonBuilder::Frag;

// Free text in which `marker` does not occur, as a Knuth-Morris-Pratt
// automaton over the marker's bytes: `text.in` starts it, `text.out` is
// reached right after the marker's last byte (the marker is consumed), and
// `ended` from any point before the marker completes (the text may end there).
struct TextUntilMarker {
  Frag text;
  Frag ended;
};

TextUntilMarker textUntil(AutomatonBuilder& b, std::string_view m) {
  std::vector<size_t> fail(m.size() + 1, 0);
  for (size_t i = 1, k = 0; i < m.size(); ++i) {
    while (k > 0 && m[i] != m[k]) k = fail[k];
    if (m[i] == m[k]) ++k;
    fail[i + 1] = k;
  }
  std::vector<Frag> st(m.size());
  for (Frag& f : st) f = b.empty();
  Frag out = b.empty();
  for (size_t q = 0; q < m.size(); ++q) {
    // Next state for each byte.
    std::vector<size_t> next(256);
    for (int c = 0; c < 256; ++c) {
      size_t k = q;
      while (k > 0 && static_cast<uint8_t>(m[k]) != c) k = fail[k];
      next[static_cast<size_t>(c)] = static_cast<uint8_t>(m[k]) == c ? k + 1 : 0;
    }
    for (int c = 0; c < 256;) {
      int e = c;
      while (e + 1 < 256 && next[static_cast<size_t>(e + 1)] == next[static_cast<size_t>(c)]) ++e;
      const size_t to = next[static_cast<size_t>(c)];
      Frag r = b.range(static_cast<uint8_t>(c), static_cast<uint8_t>(e));
      b.seq(st[q], r);
      b.seq(r, to == m.size() ? out : st[to]);
      c = e + 1;
    }
  }
  Frag ended = b.empty();
  for (size_t q = 0; q < m.size(); ++q) b.seq(st[q], ended);
  return {{st[0].in, out.out}, ended};
}

// The content format's fragment, inside `b` (its rules shared with the tools').
std::variant<Frag, GrammarError> contentFrag(AutomatonBuilder& b, JsonRules& rules, const ContentFormat& format,
                                             const Limits& limits) {
  switch (format.kind) {
    case ContentFormat::Kind::kJsonSchema: {
      const size_t size = format.schema.dump().size();
      if (size > limits.max_schema_bytes) {
        return GrammarError{"(size)", "", "the schema is " + std::to_string(size) + " bytes, over the limit of " +
                                              std::to_string(limits.max_schema_bytes)};
      }
      SchemaCompiler compiler(b, rules, format.schema, limits);
      auto rule = compiler.compile();
      if (auto* err = std::get_if<GrammarError>(&rule)) return *err;
      return b.call(std::get<uint32_t>(rule));
    }
    case ContentFormat::Kind::kJsonObject:
      return b.seq({rules.ws(), b.call(rules.anyObject()), rules.ws()});
    case ContentFormat::Kind::kRegex: {
      if (format.regex.size() > limits.max_schema_bytes) return GrammarError{"regex", "", "the regex is too long"};
      Frag f;
      if (auto err = compileRegex(b, format.regex, CharEncoding::kRaw, false, &f)) return GrammarError{"regex", "", *err};
      return f;
    }
    case ContentFormat::Kind::kChoices: {
      if (format.choices.empty()) return GrammarError{"choice", "", "no choices"};
      std::vector<Frag> alts;
      size_t total = 0;
      for (const std::string& c : format.choices) {
        total += c.size();
        if (total > limits.max_schema_bytes) return GrammarError{"choice", "", "the choices are too long"};
        alts.push_back(b.literal(c));
      }
      return b.alt(alts);
    }
  }
  return GrammarError{"", "", "unknown content format"};
}

// The tool-call section's rules: "tool_calls" (the whole section, markers
// included) and "tool_calls_after_marker" (what follows the opening marker).
struct ToolSection {
  uint32_t whole = 0, after_marker = 0;
};

std::variant<ToolSection, GrammarError> toolSection(AutomatonBuilder& b, JsonRules& rules,
                                                    const std::vector<ToolSpec>& tools,
                                                    const ToolCallOptions& options, const Limits& limits) {
  std::vector<std::pair<std::string, uint32_t>> args;  // name -> arguments rule
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    if (t.name.empty() || t.name.find('\n') != std::string::npos || t.name.find("<｜") != std::string::npos) {
      return GrammarError{"name", "", "'" + t.name + "' is not a usable function name", i};
    }
    if (options.choice == ToolCallOptions::Choice::kNamed && t.name != options.named) continue;
    uint32_t rule;
    if (t.strict && !t.parameters.is_null()) {
      // Errors (here and at finish()) are named "tool:I/..." (toolError).
      SchemaCompiler compiler(b, rules, t.parameters, limits, "tool:" + std::to_string(i));
      auto r = compiler.compile();
      if (auto* err = std::get_if<GrammarError>(&r)) return *err;
      rule = std::get<uint32_t>(r);
    } else {
      rule = rules.anyObject();
    }
    args.emplace_back(t.name, rule);
  }
  if (args.empty()) {
    return GrammarError{"tool_choice", "", options.choice == ToolCallOptions::Choice::kNamed
                                               ? "no tool named '" + options.named + "'"
                                               : "no tools"};
  }
  const uint32_t call = b.newRule("tool_call");
  std::vector<Frag> alts;
  for (const auto& [name, rule] : args) {
    if (options.syntax == ToolCallSyntax::kV3) {
      alts.push_back(b.seq({b.literal(std::string(kCallBegin) + "function" + std::string(kSep) + name + "\n```json\n"),
                            b.call(rule), b.literal("\n```" + std::string(kCallEnd))}));
    } else {
      alts.push_back(b.seq({b.literal(std::string(kCallBegin) + name + std::string(kSep)), b.call(rule),
                            b.literal(std::string(kCallEnd))}));
    }
  }
  b.defineRule(call, b.alt(alts));
  const std::string between = options.syntax == ToolCallSyntax::kV3 ? "\n" : "";
  const auto calls = [&] {
    Frag f = b.call(call);
    if (options.parallel_tool_calls) f = b.seq(f, b.star(b.seq(b.literal(between), b.call(call))));
    return f;
  };
  ToolSection section;
  section.after_marker = b.newRule("tool_calls_after_marker");
  b.defineRule(section.after_marker, b.seq(calls(), b.literal(kCallsEnd)));
  section.whole = b.newRule("tool_calls");
  b.defineRule(section.whole, b.seq(b.literal(kCallsBegin), b.call(section.after_marker)));
  return section;
}

// An error inside tool I's parameters ("tool:I/properties/x": no JSON
// pointer starts so) says whose it is in `tool` and keeps the path inside
// the parameters ("/properties/x").
GrammarError toolError(GrammarError e) {
  constexpr std::string_view kTools = "tool:";
  if (e.tool || !e.path.starts_with(kTools)) return e;
  const size_t end = e.path.find('/', kTools.size());
  const std::string index = e.path.substr(kTools.size(), end - kTools.size());
  if (index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos) return e;
  e.tool = static_cast<size_t>(std::stoull(index));
  e.path = end == std::string::npos ? "" : e.path.substr(end);
  return e;
}

}  // namespace

GrammarOrError Grammar::forReply(const ReplySpec& spec, const Limits& limits) {
  AutomatonBuilder b(limits);
  JsonRules rules(b, limits);
  std::optional<Frag> content;
  if (spec.content) {
    auto f = contentFrag(b, rules, *spec.content, limits);
    if (auto* err = std::get_if<GrammarError>(&f)) return *err;
    content = std::get<Frag>(f);
  }
  Frag body;
  if (spec.tools.empty()) {
    // Content alone; none at all: any text (only reasoning_first asks for
    // that, and then the reasoning's end is what the grammar checks).
    body = content ? *content : b.star(b.range(0x00, 0xff));
  } else {
    auto s = toolSection(b, rules, spec.tools, spec.tool_options, limits);
    if (auto* err = std::get_if<GrammarError>(&s)) return toolError(*err);
    const ToolSection section = std::get<ToolSection>(s);
    if (spec.tool_options.choice != ToolCallOptions::Choice::kAuto) {
      body = b.call(section.whole);
    } else if (content) {
      body = b.alt({*content, b.call(section.whole)});
    } else {
      // Free text that does not contain the section's marker, optionally
      // followed by the calls once the marker completes.
      TextUntilMarker text = textUntil(b, kCallsBegin);
      Frag end = b.empty();
      b.seq(text.ended, end);
      b.seq(b.seq(text.text, b.call(section.after_marker)), end);
      body = {text.text.in, end.out};
    }
  }
  if (spec.reasoning_first) {
    TextUntilMarker reasoning = textUntil(b, "</think>");
    body = b.seq({reasoning.text, b.repeat([&] { return b.range('\n', '\n'); }, 0, 2), body});
  }
  const uint32_t root = b.newRule("root");
  b.defineRule(root, body);
  auto g = finishInto(b, root);
  if (auto* err = std::get_if<GrammarError>(&g)) {
    *err = toolError(std::move(*err));
    if (spec.content && spec.content->kind == ContentFormat::Kind::kRegex && spec.tools.empty()) {
      err->keyword = "regex";  // a limit the regex's automaton reached
    }
  }
  return g;
}

std::string ReplySpec::canonicalText() const {
  nlohmann::ordered_json key = nlohmann::ordered_json::object();
  key["reasoning_first"] = reasoning_first;
  if (content) {
    key["content"] = {static_cast<int>(content->kind), content->schema, content->regex, content->choices};
  }
  if (!tools.empty()) {
    nlohmann::ordered_json t = nlohmann::ordered_json::array();
    for (const ToolSpec& tool : tools) t.push_back({tool.name, tool.strict, tool.parameters});
    key["tools"] = std::move(t);
    key["tool_options"] = {static_cast<int>(tool_options.choice), tool_options.named,
                           tool_options.parallel_tool_calls, static_cast<int>(tool_options.syntax)};
  }
  return key.dump();
}

std::shared_ptr<TokenTable> Grammar::tokenTable(const std::shared_ptr<const Vocabulary>& vocab) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [v, t] : tables_) {
    if (v == vocab.get()) return t;
  }
  auto t = std::make_shared<TokenTable>(vocab, automaton_);
  tables_.emplace_back(vocab.get(), t);
  return t;
}

std::shared_ptr<TokenTable> Grammar::prepare(const std::shared_ptr<const Vocabulary>& vocab) const {
  auto t = tokenTable(vocab);
  if (!t->prepared()) t->prepareAll();
  return t;
}

bool Grammar::prepared(const std::shared_ptr<const Vocabulary>& vocab) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [v, t] : tables_) {
    if (v == vocab.get()) return t->prepared();
  }
  return false;
}

}  // namespace lg::text::grammar

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
  AutomatonBuilder b(limits);
  JsonRules rules(b, limits);
  const uint32_t root = b.newRule("root");
  b.defineRule(root, b.seq({rules.ws(), b.call(rules.anyObject()), rules.ws()}));
  return finishInto(b, root);
}

GrammarOrError Grammar::fromRegex(std::string_view regex, const Limits& limits) {
  if (regex.size() > limits.max_schema_bytes) return GrammarError{"regex", "", "the regex is too long"};
  AutomatonBuilder b(limits);
  AutomatonBuilder::Frag f;
  if (auto err = compileRegex(b, regex, CharEncoding::kRaw, false, &f)) return GrammarError{"regex", "", *err};
  const uint32_t root = b.newRule("root");
  b.defineRule(root, f);
  auto g = finishInto(b, root);
  if (auto* err = std::get_if<GrammarError>(&g)) err->keyword = "regex";
  return g;
}

GrammarOrError Grammar::fromChoices(const std::vector<std::string>& choices, const Limits& limits) {
  if (choices.empty()) return GrammarError{"choice", "", "no choices"};
  AutomatonBuilder b(limits);
  std::vector<AutomatonBuilder::Frag> alts;
  size_t total = 0;
  for (const std::string& c : choices) {
    total += c.size();
    if (total > limits.max_schema_bytes) return GrammarError{"choice", "", "the choices are too long"};
    alts.push_back(b.literal(c));
  }
  const uint32_t root = b.newRule("root");
  b.defineRule(root, b.alt(alts));
  return finishInto(b, root);
}

GrammarOrError Grammar::forToolCalls(const std::vector<ToolSpec>& tools, const ToolCallOptions& options,
                                     const Limits& limits) {
  using Frag = AutomatonBuilder::Frag;
  AutomatonBuilder b(limits);
  JsonRules rules(b, limits);
  std::vector<std::pair<std::string, uint32_t>> args;  // name -> arguments rule
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    if (t.name.empty() || t.name.find('\n') != std::string::npos || t.name.find("<｜") != std::string::npos) {
      return GrammarError{"name", "/tools/" + std::to_string(i) + "/function/name", "not a usable function name"};
    }
    if (options.choice == ToolCallOptions::Choice::kNamed && t.name != options.named) continue;
    uint32_t rule;
    if (t.strict && !t.parameters.is_null()) {
      SchemaCompiler compiler(b, rules, t.parameters, limits, "/tools/" + std::to_string(i) + "/function/parameters");
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
  {
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
  }
  const std::string between = options.syntax == ToolCallSyntax::kV3 ? "\n" : "";
  Frag calls = b.call(call);
  if (options.parallel_tool_calls) calls = b.seq(calls, b.star(b.seq(b.literal(between), b.call(call))));
  const uint32_t section = b.newRule("tool_calls");
  b.defineRule(section, b.seq({b.literal(kCallsBegin), calls, b.literal(kCallsEnd)}));

  const uint32_t root = b.newRule("root");
  if (options.choice != ToolCallOptions::Choice::kAuto) {
    b.defineRule(root, b.call(section));
    return finishInto(b, root);
  }
  // auto: free text that does not contain the section marker (a
  // Knuth-Morris-Pratt automaton over its bytes), optionally followed by the
  // section once the marker completes.
  const std::string_view m = kCallsBegin;
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
      if (to == m.size()) {
        b.seq(r, out);  // the marker completed: the calls follow
      } else {
        b.seq(r, st[to]);
      }
      c = e + 1;
    }
  }
  // After the marker: calls and the end marker (the marker's own bytes were consumed by the free text automaton).
  const uint32_t after = b.newRule("tool_calls_after_marker");
  Frag calls2 = b.call(call);
  if (options.parallel_tool_calls) calls2 = b.seq(calls2, b.star(b.seq(b.literal(between), b.call(call))));
  b.defineRule(after, b.seq(calls2, b.literal(kCallsEnd)));
  Frag end = b.empty();
  for (size_t q = 0; q < m.size(); ++q) b.seq(st[q], end);
  Frag body{st[0].in, end.out};
  Frag after_call = b.call(after);
  b.seq(out, after_call);
  b.seq(after_call, end);
  b.defineRule(root, body);
  return finishInto(b, root);
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

}  // namespace lg::text::grammar

// Grammar: a constraint on generated text, compiled to a byte-level pushdown
// automaton (a recursive transition network): a set of rules, each a
// deterministic automaton over bytes whose edges either consume a byte range
// or call another rule. JSON Schema, plain JSON objects, regular expressions,
// fixed choices and DeepSeek tool calls all compile to this one form; a
// Matcher (matcher.h) runs it against a Vocabulary (vocabulary.h).
//
// Every builder returns a grammar or a GrammarError naming the schema keyword
// and its JSON pointer; nothing unsupported is silently ignored. Compile cost
// is bounded by Limits. A built Grammar is immutable and may be shared by any
// number of threads and matchers (its per-vocabulary token tables are built
// by prepare(), or else lazily under a mutex). Design and coverage: docs/grammar.md.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace lg::text::grammar {

class Vocabulary;
class TokenTable;

struct GrammarError {
  std::string keyword;  // the schema keyword (or "pattern" / "regex" / a limit's name)
  std::string path;     // JSON pointer in the schema ("" for the root)
  std::string message;
  // A reply's grammar: the index of the tool whose parameters (or name) it is
  // about; none: the content's format (or the grammar as a whole).
  std::optional<size_t> tool = std::nullopt;
  std::string toString() const;
};

// A JSON object key as a JSON pointer segment ("~" -> "~0", "/" -> "~1").
std::string jsonPointerEscape(std::string_view key);

struct Limits {
  size_t max_schema_bytes = 256 * 1024;  // canonical text of the schema
  int max_depth = 48;                    // nesting of subschemas
  size_t max_nfa_states = 400000;        // before determinization
  size_t max_nodes = 60000;              // automaton states after determinization
  size_t max_rules = 20000;
  // White space allowed at each place JSON allows it, in bytes of [ \t\n\r].
  // 0 (the default, xgrammar's compact separators): {"a":1,"b":[2,3]}.
  int max_whitespace = 0;
};

// The automaton: nodes of all rules, numbered globally.
struct ByteEdge {
  uint8_t lo, hi;
  uint32_t target;
};
struct CallEdge {
  uint32_t rule;
  uint32_t ret;  // node to continue at when the callee finishes
};
struct AutomatonNode {
  uint32_t bytes_begin = 0, bytes_end = 0;  // ByteEdges, sorted by lo, disjoint
  uint32_t calls_begin = 0, calls_end = 0;
  bool final = false;  // the node's rule may finish here
};
struct Automaton {
  std::vector<AutomatonNode> nodes;
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
  std::vector<uint32_t> rule_start;
  std::vector<std::string> rule_names;
  uint32_t root_rule = 0;
};

// DeepSeek tool calls (the syntax the chat templates render and
// proxy/openai/output_parser reads).
enum class ToolCallSyntax : uint8_t {
  kV3,   // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
  kV31,  // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
};
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // JSON Schema of the arguments; null: any object
  bool strict = false;                // arguments must match `parameters`; else any JSON object
};
struct ToolCallOptions {
  enum class Choice : uint8_t { kAuto, kRequired, kNamed };
  Choice choice = Choice::kAuto;
  std::string named;             // kNamed: the function
  bool parallel_tool_calls = true;
  ToolCallSyntax syntax = ToolCallSyntax::kV3;
};

// What a reply's content must be (response_format, vLLM's structured outputs).
struct ContentFormat {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoices };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema, keys in the client's order
  std::string regex;                 // kRegex: the whole content matches it
  std::vector<std::string> choices;  // kChoices: the content is one of them
};

// A whole chat reply as the chat template opens it and the output parser
// reads it: optional reasoning, then content and tool calls.
//   - tools forced (required, named): the tool-call section;
//   - tools on auto with a content format: that content, or the section;
//   - tools on auto alone: free text until the model opens the section;
//   - no tools: the content format.
// reasoning_first (the prompt ends inside an open <think>, as R1's template
// and V3.1's thinking mode do): any text without "</think>", then
// "</think>", up to two new lines, then the above. Reasoning is free: the
// rules bind what the parser reports as content and calls.
struct ReplySpec {
  bool reasoning_first = false;
  std::optional<ContentFormat> content;  // none: free text
  std::vector<ToolSpec> tools;           // the callable tools; empty: none
  ToolCallOptions tool_options;
  // The canonical text of everything the grammar depends on (a cache key).
  std::string canonicalText() const;
};

class Grammar;
using GrammarOrError = std::variant<std::shared_ptr<const Grammar>, GrammarError>;

class Grammar {
 public:
  // nlohmann::json keeps object keys sorted, so properties are generated in
  // alphabetical order; the ordered_json overload keeps the schema's order.
  static GrammarOrError fromJsonSchema(const nlohmann::json& schema, const Limits& limits = {});
  static GrammarOrError fromJsonSchema(const nlohmann::ordered_json& schema, const Limits& limits = {});
  static GrammarOrError anyJsonObject(const Limits& limits = {});
  // vLLM's structured_outputs: the whole output matches the regex / is one of the choices.
  static GrammarOrError fromRegex(std::string_view regex, const Limits& limits = {});
  static GrammarOrError fromChoices(const std::vector<std::string>& choices, const Limits& limits = {});
  static GrammarOrError forToolCalls(const std::vector<ToolSpec>& tools, const ToolCallOptions& options,
                                     const Limits& limits = {});
  static GrammarOrError forReply(const ReplySpec& spec, const Limits& limits = {});

  const Automaton& automaton() const { return automaton_; }

  // The per-vocabulary token tables (built lazily, shared by all matchers).
  std::shared_ptr<TokenTable> tokenTable(const std::shared_ptr<const Vocabulary>& vocab) const;
  // Builds the token tables of every node for `vocab` now, so that no mask
  // call builds one (call it off the engine thread, after compiling).
  // Idempotent and thread-safe; returns the same table tokenTable() does.
  std::shared_ptr<TokenTable> prepare(const std::shared_ptr<const Vocabulary>& vocab) const;
  // Whether prepare() has completed for `vocab` (a mask costs no table build).
  bool prepared(const std::shared_ptr<const Vocabulary>& vocab) const;

  explicit Grammar(Automaton automaton) : automaton_(std::move(automaton)) {}

 private:
  Automaton automaton_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<const Vocabulary*, std::shared_ptr<TokenTable>>> tables_;
};

}  // namespace lg::text::grammar

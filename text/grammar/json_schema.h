// JSON Schema -> grammar rules (internal to text/grammar). One compiler per
// schema document (its $ref targets resolve inside it); several compilers may
// share one AutomatonBuilder (tool calls) and its JSON value rules.
// Coverage and refusals: docs/grammar.md.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "text/grammar/automaton_builder.h"

namespace lg::text::grammar {

using Json = nlohmann::ordered_json;

// Rules shared by every schema of one builder: JSON values of any kind.
class JsonRules {
 public:
  JsonRules(AutomatonBuilder& b, const Limits& limits) : b_(b), limits_(limits) {}
  AutomatonBuilder::Frag ws();  // up to Limits::max_whitespace bytes of white space
  uint32_t anyValue();
  uint32_t anyObject();
  uint32_t string();  // a whole JSON string, any content
  uint32_t number();

 private:
  void build();
  AutomatonBuilder& b_;
  Limits limits_;
  bool built_ = false;
  uint32_t value_ = 0, object_ = 0, array_ = 0, string_ = 0, number_ = 0;
};

class SchemaCompiler {
 public:
  // path_prefix: prepended to error paths (tool calls: "/tools/2/parameters").
  SchemaCompiler(AutomatonBuilder& b, JsonRules& rules, const Json& root, const Limits& limits,
                 std::string path_prefix = "");
  // The rule of the whole document, or the error.
  std::variant<uint32_t, GrammarError> compile();

 private:
  using Frag = AutomatonBuilder::Frag;
  uint32_t ruleFor(const Json& schema, const std::string& path, int depth);
  Frag schemaFrag(const Json& schema, const std::string& path, int depth);
  Frag typed(const std::string& type, const Json& s, const std::string& path, int depth);
  Frag stringFrag(const Json& s, const std::string& path);
  Frag integerFrag(const Json& s, const std::string& path);
  Frag numberFrag(const Json& s, const std::string& path);
  Frag arrayFrag(const Json& s, const std::string& path, int depth);
  Frag objectFrag(const Json& s, const std::string& path, int depth);
  Frag literalValue(const Json& v);
  std::optional<Json> mergeAllOf(const Json& s, const std::string& path);
  const Json* resolveRef(const std::string& ref, const std::string& path);
  Frag fail(std::string keyword, const std::string& path, std::string message);
  bool failed() const { return error_.has_value(); }

  AutomatonBuilder& b_;
  JsonRules& rules_;
  const Json& root_;
  Limits limits_;
  std::string prefix_;
  std::map<std::string, uint32_t> by_text_;  // canonical text of a subschema -> its rule
  std::optional<GrammarError> error_;
};


}  // namespace lg::text::grammar

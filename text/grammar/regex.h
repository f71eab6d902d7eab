// A regular-expression subset (ECMA-262 syntax, as JSON Schema's `pattern`
// and vLLM's structured_outputs.regex use) compiled to automaton fragments
// over UTF-8 bytes. Supported: literals, escapes (\d \w \s and negations,
// \n \t \r \f \v \0 \xHH \uHHHH \u{H..}, escaped punctuation), classes with
// ranges and negation, `.`, groups ((...), (?:...), (?<name>...)),
// alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms: same language),
// ^ and $ at the ends. Refused with an error: lookaround, backreferences, word
// boundaries, anchors elsewhere, flags.
// Internal to text/grammar.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/grammar/automaton_builder.h"

namespace lg::text::grammar {

struct CodeRange {
  uint32_t lo, hi;
};
using CharSet = std::vector<CodeRange>;  // sorted, disjoint, no surrogates

enum class CharEncoding : uint8_t {
  kRaw,         // the characters' UTF-8 bytes
  kJsonString,  // inside a JSON string literal: `"`, `\` and controls escaped
};

// Fragment matching one character of `set`, encoded.
AutomatonBuilder::Frag charSetFrag(AutomatonBuilder& b, const CharSet& set, CharEncoding enc);

// Any one character of a JSON string's content (any escape allowed).
AutomatonBuilder::Frag jsonStringChar(AutomatonBuilder& b);

// Compiles `re`. search: JSON Schema semantics (matches anywhere unless
// anchored by ^/$); otherwise the whole text must match. Error: message only
// (the caller names keyword and path).
std::optional<std::string> compileRegex(AutomatonBuilder& b, std::string_view re, CharEncoding enc, bool search,
                                        AutomatonBuilder::Frag* out);

}  // namespace lg::text::grammar

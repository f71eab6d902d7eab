// Lexer for the chat template Jinja subset.
//
// Reproduces Jinja2's lexer as configured by transformers (trim_blocks=True,
// lstrip_blocks=True, default delimiters): newline normalization and the
// dropped trailing newline, `-`/`+` whitespace control, comments, and the
// expression token rules (Python-style string escapes, numbers with `_`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace lg::text::jinja {

enum class TokenType : uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;  // data text, name, unescaped string, operator spelling
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Tokenizes template source (which must be valid UTF-8).
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace lg::text::jinja

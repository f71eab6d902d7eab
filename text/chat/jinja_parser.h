// Parser for the chat template Jinja subset: Jinja2's grammar and operator
// precedence for the supported statements and expressions. Anything outside
// the subset is an Unimplemented error naming the construct and its line;
// invalid syntax is InvalidArgument with the line.
#pragma once

#include <string_view>

#include "common/status.h"
#include "text/chat/jinja_ast.h"

namespace lg::text::jinja {

// Nesting limits keep parsing and evaluation recursion shallow.
inline constexpr int kMaxExprDepth = 64;
inline constexpr int kMaxBlockDepth = 64;
inline constexpr int kMaxExprTreeDepth = 256;

Result<TemplateAst> parseTemplate(std::string_view source);

}  // namespace lg::text::jinja

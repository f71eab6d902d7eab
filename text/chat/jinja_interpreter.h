// Executes a parsed chat template against a set of variables.
//
// Scoping follows Jinja2: `if` shares its scope, each for-loop iteration gets
// a fresh scope (assignments inside do not survive the iteration), and
// namespace() objects are the way to carry state out of a loop.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "text/chat/jinja_ast.h"
#include "text/chat/jinja_value.h"

namespace lg::text::jinja {

// Renders `ast` with the given top-level variables under `limits` (a
// RenderBudget is installed on the calling thread for the duration). The
// result's trusted ranges cover the bytes that came from trusted strings.
// `copied` and `iterations`, when given, receive what the render spent.
Result<StrRep> renderTemplate(const TemplateAst& ast, const std::vector<std::pair<std::string, Value>>& variables,
                              const RenderLimits& limits = {}, uint64_t* copied = nullptr,
                              int64_t* iterations = nullptr);

}  // namespace lg::text::jinja

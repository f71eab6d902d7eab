// Built-in filters, tests, global functions and methods of the chat template
// subset, with Jinja2 / Python semantics (see docs/chat-template.md).
//
// Names are resolved at load time (lookupFilter, lookupTest, ...), so a
// template using anything outside the subset fails to load instead of
// failing, or silently diverging, on some request later.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "text/chat/jinja_value.h"

namespace lg::text::jinja {

// Bounds that keep a render cheap whatever the request holds, besides the
// per-render RenderLimits (string size, bytes copied, loop iterations).
inline constexpr int64_t kMaxRange = 100000;                  // Jinja2 sandbox's MAX_RANGE
inline constexpr size_t kMaxListItems = 1000000;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

enum class FilterId : int {
  kLength,
  kTrim,
  kToJson,
  kFirst,
  kLast,
  kJoin,
  kLower,
  kUpper,
  kReplace,
  kDefault,
  kString,
  kItems,
  kList,
  kInt,
  kFloat,
  kAbs,
  kCapitalize,
  kReverse,
  kSafe,
};

enum class TestId : int {
  kDefined,
  kUndefined,
  kNone,
  kBoolean,
  kFalse,
  kTrue,
  kInteger,
  kFloat,
  kNumber,
  kString,
  kMapping,
  kIterable,
  kSequence,
  kCallable,
  kSameAs,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kEven,
  kOdd,
  kDivisibleBy,
  kLower,
  kUpper,
};

std::optional<FilterId> lookupFilter(std::string_view name);
std::optional<TestId> lookupTest(std::string_view name);
// Global functions callable by name: namespace, range, dict, raise_exception.
std::optional<Builtin> lookupGlobalFunction(std::string_view name);
// Whether `name` is a method some supported type has (checked for every
// `x.name(...)` call at load time).
bool isSupportedMethodName(std::string_view name);

Result<Value> applyFilter(FilterId id, const Value& subject, const CallArgs& args);
Result<bool> applyTest(TestId id, const Value& subject, const CallArgs& args);
Result<Value> callBuiltin(const CallableData& fn, const CallArgs& args);

// Jinja2 sandbox getattr (`obj.name`) and getitem (`obj[key]`): missing
// members are Undefined; only Undefined itself is an error to look into.
Result<Value> getAttribute(const Value& obj, std::string_view name);
Result<Value> getItem(const Value& obj, const Value& key);
// obj[start:stop:step] on a list, tuple or string.
Result<Value> getSlice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The error Jinja2 raises when an Undefined is used (printed, added, called...).
Status undefinedError(const Value& v);

}  // namespace lg::text::jinja

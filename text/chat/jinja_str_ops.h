// Python str operations over trust-carrying strings (internal to text/chat).
// Every result keeps the trust of the bytes it was built from.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "text/chat/jinja_value.h"

namespace lg::text::jinja {

enum class StripSide : uint8_t { kBoth, kLeft, kRight };

// str.strip/lstrip/rstrip; chars == nullopt strips Python whitespace.
Value pyStrip(const Value& s, std::optional<std::string_view> chars, StripSide side);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs.
Result<Value> pySplit(const Value& s, std::optional<std::string_view> sep, int64_t maxsplit, bool from_right);
// str.replace(old, new, count); count < 0 replaces all.
Result<Value> pyReplace(const Value& s, const Value& old_value, const Value& new_value, int64_t count);
enum class CaseMap : uint8_t { kLower, kUpper, kCapitalize };
Value pyCaseMap(const Value& s, CaseMap mode);
// str.find (code point index or -1) and str.count.
int64_t pyFind(std::string_view s, std::string_view sub);
int64_t pyCount(std::string_view s, std::string_view sub);
// Byte offset of code point index i (clamped to the end).
size_t byteOffsetOfCodePoint(std::string_view s, size_t i);

}  // namespace lg::text::jinja

// Translation of Oniguruma regular expressions (the dialect of `tokenizers`'
// Split patterns: ONIG_SYNTAX_ONIGURUMA, no options, UTF-8) into PCRE2
// patterns that match exactly the same strings.
//
// The dialects differ in ways that silently change matches, so nothing is
// passed through on trust:
//   - every character-class escape (\s \d \w \h, \p{..}, their negations) and
//     every bracket class becomes an explicit list of code point ranges taken
//     from LatentGate's Unicode 16.0 tables (the version of the reference's
//     Oniguruma; PCRE2 10.42 carries 14.0, and its \s also takes U+180E);
//   - \h is a hex digit and \v a vertical tab in Oniguruma;
//   - ^ and $ are line anchors in Oniguruma (\n only), spelled out as
//     lookarounds; \b \B use Oniguruma's \w; '.' excludes only \n;
//   - {,n} means {0,n}; \uHHHH is a code point.
// Constructs whose Oniguruma meaning has no exact PCRE2 rendering here (inline
// options, backreferences, \K \R \X, absent groups, callouts, POSIX brackets,
// class intersection or nesting, {n}? and {n,m}+, \xHH above 7F which is a raw
// byte in Oniguruma, ...) are Unimplemented errors naming the construct.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace lg::text {

// Returns a PCRE2 pattern for PCRE2_UTF mode (no PCRE2_UCP needed: the output
// uses no Unicode-dependent escapes).
Result<std::string> translateOnigurumaPattern(std::string_view pattern);

// A PCRE2 pattern matching `literal` exactly (for Split's String patterns).
std::string literalPattern(std::string_view literal);

}  // namespace lg::text

// UTF-8 and Python-compatible character helpers for the chat template engine.
//
// Jinja2 runs on Python str, which indexes, strips, splits and case-maps by code
// point with Unicode rules. These helpers reproduce the parts the supported
// template subset needs, over UTF-8 bytes. Input is assumed to be valid UTF-8
// (JSON strings and template source are validated before they get here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/utf8.h"

namespace lg::text::jinja {

// UTF-8 itself (decodeAt, append, isValid, countCodePoints) is common/utf8.h.

// Python str.isspace() (also what str.split()/strip() and re's \s use).
bool isPyWhitespace(char32_t cp);
// Python str.isprintable() approximation: false for controls, format
// characters, separators other than ' ', private use and surrogates.
bool isPyPrintable(char32_t cp);

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
// Other scripts are returned unchanged (documented limitation).
char32_t toLowerCp(char32_t cp);
char32_t toUpperCp(char32_t cp);
// Full mappings as Python's str.lower()/upper() apply them, including the
// unconditional one-to-many cases (ß -> SS, İ -> i̇, ligatures).
void appendLower(std::string& out, char32_t cp);
void appendUpper(std::string& out, char32_t cp);

}  // namespace lg::text::jinja

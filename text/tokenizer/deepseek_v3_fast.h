// Hand-written pre-tokenizer for DeepSeek V3's exact pre_tokenizer:
//   Sequence[ Split(\p{N}{1,3}, Isolated),
//             Split([\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+, Isolated),
//             Split([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
//                   |[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//                   | ?[\p{P}\p{S}]+[\r\n]*
//                   |\s*[\r\n]+
//                   |\s+(?!\S)
//                   |\s+, Isolated),
//             ByteLevel(add_prefix_space=false, use_regex=false) ]
// It gives the same pieces as the general PCRE2 path (see docs/tokenizer.md
// for the argument, tests/text/tokenizer/fast_path_test.cc for the checks)
// in one pass without a regex engine.
//
// Thread-safety: stateless.
#pragma once

#include <string_view>

#include "common/status.h"
#include "text/tokenizer/pre_tokenizer.h"

namespace lg::text {

// The three Split patterns, verbatim as in DeepSeek V3's tokenizer.json.
extern const std::string_view kDeepSeekV3Patterns[3];

// Calls sink(piece) for each pre-token of `text` (valid UTF-8) in order.
Status deepSeekV3PreTokenize(std::string_view text, PieceCallback sink);

}  // namespace lg::text

// Exact decimal text <-> integers in a fixed unit, for money: no floating
// point anywhere between a price a person typed and the cost a client reads.
//
//   parseFixedDecimal("0.028", 6)          == 28000      (0.028 x 10^6)
//   formatFixedDecimal(1792000, 12)        == "0.000001792"
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg {

// A signed 128-bit integer, for sums of money that may pass 2^63. (GCC and
// Clang's extension; __extension__ keeps -Wpedantic quiet about it.)
__extension__ typedef __int128 Int128;

// `text` x 10^scale as an integer: digits with at most one '.', no sign, no
// exponent, no spaces ("12", "0.028", ".5", "3."). Digits past `scale` after
// the point must be zeros (anything else would round: an error). Values above
// `max` are errors. scale: 0..18.
Result<int64_t> parseFixedDecimal(std::string_view text, int scale, int64_t max);

// value / 10^scale as decimal text, exact, with trailing fractional zeros
// trimmed: "0" for zero, "1" for 10^scale, "-0.5" for -5 x 10^(scale-1).
// scale: 0..30.
std::string formatFixedDecimal(Int128 value, int scale);

// The same rounded toward zero to `digits` fractional digits, zeros kept
// ("0.00" for a value under a cent at digits 2): for display only.
std::string formatFixedDecimalTruncated(Int128 value, int scale, int digits);

}  // namespace lg

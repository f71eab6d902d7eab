#include "common/decimal.h"

#include <algorithm>
#include <limits>

namespace lg {

namespace {
__extension__ typedef unsigned __int128 UInt128;
}  // namespace

Result<int64_t> parseFixedDecimal(std::string_view text, int scale, int64_t max) {
  if (scale < 0 || scale > 18) return invalidArgument("decimal scale out of range");
  const auto quoted = [&] { return "\"" + std::string(text.substr(0, 40)) + (text.size() > 40 ? "...\"" : "\""); };
  if (text.empty()) return invalidArgument("expected a decimal number, got an empty string");
  const size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() && frac.empty()) return invalidArgument("expected a decimal number, got " + quoted());
  for (std::string_view part : {whole, frac}) {
    if (!std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return invalidArgument("expected a decimal number such as \"0.028\" (digits and one point), got " + quoted());
    }
  }
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
  if (static_cast<int>(frac.size()) > scale) {
    return invalidArgument(quoted() + " has more than " + std::to_string(scale) +
                           " digits after the point (it cannot be held exactly)");
  }
  Int128 v = 0;
  const Int128 limit = max;
  for (char c : whole) {
    v = v * 10 + (c - '0');
    if (v > limit) return invalidArgument(quoted() + " is too large");  // v only grows
  }
  for (int i = 0; i < scale; ++i) {
    v = v * 10 + (i < static_cast<int>(frac.size()) ? frac[i] - '0' : 0);
    if (v > limit) return invalidArgument(quoted() + " is too large");
  }
  return static_cast<int64_t>(v);
}

namespace {

std::string digitsOf(UInt128 v) {
  if (v == 0) return "0";
  std::string out;
  while (v > 0) {
    out += static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Sign, whole digits, and exactly `scale` fractional digits.
void split(Int128 value, int scale, bool* negative, std::string* whole, std::string* frac) {
  *negative = value < 0;
  const UInt128 mag = *negative ? static_cast<UInt128>(-(value + 1)) + 1 : value;
  UInt128 unit = 1;
  for (int i = 0; i < scale; ++i) unit *= 10;
  *whole = digitsOf(mag / unit);
  std::string f = digitsOf(mag % unit);
  *frac = std::string(static_cast<size_t>(scale) - std::min(f.size(), static_cast<size_t>(scale)), '0') + f;
  if (scale == 0) frac->clear();
}

}  // namespace

std::string formatFixedDecimal(Int128 value, int scale) {
  bool negative = false;
  std::string whole, frac;
  split(value, scale, &negative, &whole, &frac);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  std::string out = negative ? "-" : "";
  out += whole;
  if (!frac.empty()) out += "." + frac;
  return out;
}

std::string formatFixedDecimalTruncated(Int128 value, int scale, int digits) {
  bool negative = false;
  std::string whole, frac;
  split(value, scale, &negative, &whole, &frac);
  frac.resize(static_cast<size_t>(digits), '0');
  const bool zero = whole == "0" && frac.find_first_not_of('0') == std::string::npos;
  std::string out = negative && !zero ? "-" : "";
  out += whole;
  if (digits > 0) out += "." + frac;
  return out;
}

}  // namespace lg

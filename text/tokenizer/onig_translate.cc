#include "text/tokenizer/onig_translate.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <vector>

#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"

namespace lg::text {
namespace {

using unicode::RangeList;

// Oniguruma's limit on repeat counts is 100000; PCRE2's is 65535.
constexpr unsigned kMaxRepeat = 65535;

RangeList normalize(RangeList r) {
  std::sort(r.begin(), r.end());
  RangeList out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

void addAll(RangeList& to, const RangeList& from) { to.insert(to.end(), from.begin(), from.end()); }

// Per-category range lists, computed in one pass over the code space.
const std::array<RangeList, unicode::kCategoryCount>& categoryRanges() {
  static const auto kRanges = [] {
    std::array<RangeList, unicode::kCategoryCount> out;
    const unicode::Table& t = unicode::table();
    for (char32_t cp = 0; cp <= unicode::kMaxCodePoint; ++cp) {
      RangeList& r = out[t.category(cp)];
      if (!r.empty() && r.back().second + 1 == cp) {
        r.back().second = cp;
      } else {
        r.emplace_back(cp, cp);
      }
    }
    return out;
  }();
  return kRanges;
}

RangeList categorySet(unicode::CategoryMask mask) {
  RangeList out;
  for (int c = 0; c < unicode::kCategoryCount; ++c) {
    if ((mask >> c) & 1) addAll(out, categoryRanges()[static_cast<size_t>(c)]);
  }
  return normalize(std::move(out));
}

const RangeList& whiteSpaceSet() {
  static const RangeList kSet =
      unicode::rangesWhere([](char32_t cp, const unicode::Table& t) { return t.isWhiteSpace(cp); });
  return kSet;
}
const RangeList& alphabeticSet() {
  static const RangeList kSet =
      unicode::rangesWhere([](char32_t cp, const unicode::Table& t) { return t.isAlphabetic(cp); });
  return kSet;
}
const RangeList& wordSet() {
  static const RangeList kSet =
      unicode::rangesWhere([](char32_t cp, const unicode::Table&) { return unicode::isOnigWord(cp); });
  return kSet;
}

std::string hex(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(cp));
  return buf;
}

// A set as a PCRE2 bracket class. Surrogates cannot occur in valid UTF-8 text
// and are not allowed in a UTF-mode pattern, so they are cut out.
std::string renderSet(const RangeList& set) {
  std::string body;
  for (auto [lo, hi] : set) {
    std::pair<char32_t, char32_t> parts[2] = {{lo, hi}, {1, 0}};
    if (lo <= 0xdfff && hi >= 0xd800) {
      parts[0] = {lo, 0xd7ff};
      parts[1] = {0xe000, hi};
    }
    for (auto [a, b] : parts) {
      if (a > b) continue;
      body += hex(a);
      if (b > a) body += "-" + hex(b);
    }
  }
  if (body.empty()) return "(?!)";
  return "[" + body + "]";
}

std::string renderLiteral(char32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
    return std::string(1, static_cast<char>(cp));
  }
  return hex(cp);
}

bool isHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// What one escape sequence stands for.
struct Escape {
  enum Kind { kChar, kSet, kAssertion } kind = kChar;
  char32_t ch = 0;
  RangeList set;
  std::string assertion;  // PCRE2 text for anchors
};

class Translator {
 public:
  explicit Translator(std::string_view pattern) : p_(pattern) {}

  Result<std::string> run() {
    if (auto bad = utf8::firstInvalid(p_)) {
      return invalidArgument("regex is not valid UTF-8 at byte " + std::to_string(*bad));
    }
    while (pos_ < p_.size()) {
      LG_RETURN_IF_ERROR(step());
    }
    if (!groups_.empty()) return invalidArgument("regex has an unclosed '(': " + quoted());
    return out_;
  }

 private:
  enum class Last { kNone, kAtom, kQuantifier, kAssertion };

  std::string quoted() const { return "'" + std::string(p_) + "'"; }
  Status unsupported(std::string_view what) const {
    return unimplemented("regex construct " + std::string(what) + " is not supported (in " + quoted() + ")");
  }
  Status malformed(std::string_view what) const {
    return invalidArgument("invalid regex: " + std::string(what) + " (in " + quoted() + ")");
  }

  char32_t nextChar(size_t* len) const { return utf8::decode(p_.data() + pos_, len); }

  Status step() {
    const char c = p_[pos_];
    switch (c) {
      case '\\': {
        ++pos_;
        LG_ASSIGN_OR_RETURN(Escape e, parseEscape(/*in_class=*/false));
        if (e.kind == Escape::kAssertion) {
          out_ += e.assertion;
          last_ = Last::kAssertion;
        } else {
          out_ += e.kind == Escape::kChar ? renderLiteral(e.ch) : renderSet(e.set);
          last_ = Last::kAtom;
        }
        return Status::ok();
      }
      case '[': {
        LG_ASSIGN_OR_RETURN(RangeList set, parseClass());
        out_ += renderSet(set);
        last_ = Last::kAtom;
        return Status::ok();
      }
      case '(':
        return openGroup();
      case ')': {
        if (groups_.empty()) return malformed("unmatched ')'");
        const bool repeatable = groups_.back();
        groups_.pop_back();
        out_ += ')';
        ++pos_;
        last_ = repeatable ? Last::kAtom : Last::kAssertion;
        return Status::ok();
      }
      case '|':
        out_ += '|';
        ++pos_;
        last_ = Last::kNone;
        return Status::ok();
      case '*':
      case '+':
      case '?':
        return simpleQuantifier();
      case '{':
        return interval();
      case '.':
        out_ += "[^\\n]";
        ++pos_;
        last_ = Last::kAtom;
        return Status::ok();
      case '^':
        // Oniguruma: at the start of the string, or after a \n that is not the
        // last character.
        out_ += "(?:\\A|(?<=\\n)(?!\\z))";
        ++pos_;
        last_ = Last::kAssertion;
        return Status::ok();
      case '$':
        // Oniguruma: before any \n, and at the end of the string.
        out_ += "(?=\\n|\\z)";
        ++pos_;
        last_ = Last::kAssertion;
        return Status::ok();
      default: {
        size_t len = 0;
        const char32_t cp = nextChar(&len);
        pos_ += len;
        out_ += renderLiteral(cp);
        last_ = Last::kAtom;
        return Status::ok();
      }
    }
  }

  Status openGroup() {
    ++pos_;  // '('
    if (pos_ < p_.size() && p_[pos_] == '*') return unsupported("'(*' (callout)");
    if (pos_ >= p_.size() || p_[pos_] != '?') {
      groups_.push_back(true);
      out_ += "(?:";  // captures do not matter for splitting
      last_ = Last::kNone;
      return Status::ok();
    }
    const std::string_view rest = p_.substr(pos_ + 1);
    auto starts = [&](std::string_view s) { return rest.substr(0, s.size()) == s; };
    if (starts(":") || starts(">")) {
      out_ += starts(":") ? "(?:" : "(?>";
      pos_ += 2;
      groups_.push_back(true);
    } else if (starts("=") || starts("!")) {
      out_ += starts("=") ? "(?=" : "(?!";
      pos_ += 2;
      groups_.push_back(false);
    } else if (starts("<=") || starts("<!")) {
      out_ += starts("<=") ? "(?<=" : "(?<!";
      pos_ += 3;
      groups_.push_back(false);
    } else if (starts("<") || starts("'")) {
      // Named group: only the grouping matters.
      const char close = starts("<") ? '>' : '\'';
      const size_t end = p_.find(close, pos_ + 2);
      if (end == std::string_view::npos) return malformed("unterminated group name");
      for (size_t k = pos_ + 2; k < end; ++k) {
        const char ch = p_[k];
        if (!(isHex(ch) || (ch >= 'g' && ch <= 'z') || (ch >= 'G' && ch <= 'Z') || ch == '_')) {
          return unsupported("group name with '" + std::string(1, ch) + "'");
        }
      }
      out_ += "(?:";
      pos_ = end + 1;
      groups_.push_back(true);
    } else if (starts("#")) {
      const size_t end = p_.find(')', pos_);
      if (end == std::string_view::npos) return malformed("unterminated comment group");
      pos_ = end + 1;
      return Status::ok();  // a comment changes nothing, not even `last_`
    } else if (starts("~")) {
      return unsupported("'(?~' (absent group)");
    } else if (starts("(")) {
      return unsupported("'(?(' (conditional)");
    } else if (starts("{")) {
      return unsupported("'(?{' (callout)");
    } else {
      return unsupported("inline options '(?" + std::string(rest.substr(0, 1)) + "'");
    }
    last_ = Last::kNone;
    return Status::ok();
  }

  Status checkTarget() const {
    switch (last_) {
      case Last::kAtom:
        return Status::ok();
      case Last::kNone:
        return malformed("quantifier without a target");
      case Last::kQuantifier:
        return unsupported("stacked quantifiers");
      case Last::kAssertion:
        return unsupported("quantified assertion");
    }
    return Status::ok();
  }

  Status simpleQuantifier() {
    LG_RETURN_IF_ERROR(checkTarget());
    out_ += p_[pos_++];
    if (pos_ < p_.size() && (p_[pos_] == '?' || p_[pos_] == '+')) out_ += p_[pos_++];  // lazy, possessive
    last_ = Last::kQuantifier;
    return Status::ok();
  }

  std::optional<unsigned> number(size_t* at) const {
    size_t k = *at;
    unsigned value = 0;
    while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') {
      value = std::min<unsigned>(value * 10 + static_cast<unsigned>(p_[k] - '0'), 1000000);
      ++k;
    }
    if (k == *at) return std::nullopt;
    *at = k;
    return value;
  }

  Status interval() {
    // {n} {n,} {n,m} {,m}; anything else is a literal '{' in Oniguruma.
    size_t k = pos_ + 1;
    const std::optional<unsigned> low = number(&k);
    std::optional<unsigned> high;
    bool comma = false;
    if (k < p_.size() && p_[k] == ',') {
      comma = true;
      ++k;
      high = number(&k);
    }
    const bool valid = k < p_.size() && p_[k] == '}' && (low || high) && !(comma && !low && !high);
    if (!valid) {
      out_ += "\\{";
      ++pos_;
      last_ = Last::kAtom;
      return Status::ok();
    }
    LG_RETURN_IF_ERROR(checkTarget());
    const unsigned lo = low.value_or(0);
    if (lo > kMaxRepeat || (high && *high > kMaxRepeat)) return unsupported("repeat count above 65535");
    if (high && *high < lo) return unsupported("{n,m} with n > m (possessive in Oniguruma)");
    pos_ = k + 1;
    const bool fixed = !comma;
    if (fixed) {
      out_ += "{" + std::to_string(lo) + "}";
    } else if (high) {
      out_ += "{" + std::to_string(lo) + "," + std::to_string(*high) + "}";
    } else {
      out_ += "{" + std::to_string(lo) + ",}";
    }
    if (pos_ < p_.size() && p_[pos_] == '?') {
      if (fixed) return unsupported("'{n}?' (an optional fixed repeat in Oniguruma)");
      out_ += '?';
      ++pos_;
    } else if (pos_ < p_.size() && p_[pos_] == '+') {
      return unsupported("'{n,m}+' (a repeat of a repeat in Oniguruma)");
    }
    last_ = Last::kQuantifier;
    return Status::ok();
  }

  Result<RangeList> property(bool negated) {
    // At the character after \p or \P.
    if (pos_ >= p_.size() || p_[pos_] != '{') return malformed("\\p without '{'");
    const size_t end = p_.find('}', pos_);
    if (end == std::string_view::npos) return malformed("unterminated \\p{");
    std::string_view name = p_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.remove_prefix(1);
    }
    RangeList set;
    if (auto mask = unicode::categoryMaskByName(name)) {
      set = categorySet(*mask);
    } else if (name == "Alphabetic") {
      set = alphabeticSet();
    } else if (name == "White_Space") {
      set = whiteSpaceSet();
    } else {
      return unsupported("property \\p{" + std::string(name) + "}");
    }
    return negated ? unicode::complement(set) : set;
  }

  Result<char32_t> hexValue(size_t min_digits, size_t max_digits, bool braced) {
    size_t k = pos_;
    char32_t value = 0;
    while (k < p_.size() && k - pos_ < max_digits && isHex(p_[k])) {
      const char ch = p_[k];
      value = value * 16 + static_cast<char32_t>(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
      ++k;
    }
    if (k - pos_ < min_digits) return malformed("too few hex digits");
    if (braced) {
      if (k >= p_.size() || p_[k] != '}') return unsupported("\\x{...} other than one code point");
      ++k;
    }
    pos_ = k;
    if (value > unicode::kMaxCodePoint || (value >= 0xd800 && value <= 0xdfff)) {
      return malformed("escape names no Unicode scalar value");
    }
    return value;
  }

  // At the character after '\'.
  Result<Escape> parseEscape(bool in_class) {
    if (pos_ >= p_.size()) return malformed("trailing '\\'");
    Escape e;
    const char c = p_[pos_];
    auto charEscape = [&](char32_t ch) {
      ++pos_;
      e.ch = ch;
      return e;
    };
    auto setEscape = [&](RangeList set, bool negated) {
      ++pos_;
      e.kind = Escape::kSet;
      e.set = negated ? unicode::complement(set) : std::move(set);
      return e;
    };
    auto assertion = [&](std::string text) -> Result<Escape> {
      if (in_class) return unsupported("'\\" + std::string(1, c) + "' inside a bracket class");
      ++pos_;
      e.kind = Escape::kAssertion;
      e.assertion = std::move(text);
      return e;
    };
    const RangeList hex_digits = {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
    switch (c) {
      case 't': return charEscape('\t');
      case 'n': return charEscape('\n');
      case 'r': return charEscape('\r');
      case 'f': return charEscape('\f');
      case 'a': return charEscape('\a');
      case 'e': return charEscape(0x1b);
      case 'v': return charEscape(0x0b);
      case 'd': return setEscape(categorySet(unicode::bit(unicode::kNd)), false);
      case 'D': return setEscape(categorySet(unicode::bit(unicode::kNd)), true);
      case 's': return setEscape(whiteSpaceSet(), false);
      case 'S': return setEscape(whiteSpaceSet(), true);
      case 'w': return setEscape(wordSet(), false);
      case 'W': return setEscape(wordSet(), true);
      case 'h': return setEscape(hex_digits, false);
      case 'H': return setEscape(hex_digits, true);
      case 'p':
      case 'P': {
        ++pos_;
        LG_ASSIGN_OR_RETURN(e.set, property(c == 'P'));
        e.kind = Escape::kSet;
        return e;
      }
      case 'x': {
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] == '{') {
          ++pos_;
          LG_ASSIGN_OR_RETURN(e.ch, hexValue(1, 8, /*braced=*/true));
          return e;
        }
        LG_ASSIGN_OR_RETURN(e.ch, hexValue(1, 2, /*braced=*/false));
        if (e.ch > 0x7f) return unsupported("\\xHH above 7F (a raw byte in Oniguruma)");
        return e;
      }
      case 'u': {
        ++pos_;
        LG_ASSIGN_OR_RETURN(e.ch, hexValue(4, 4, /*braced=*/false));
        return e;
      }
      case 'b': {
        if (in_class) return charEscape(0x08);
        const std::string w = renderSet(wordSet());
        return assertion("(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))");
      }
      case 'B': {
        const std::string w = renderSet(wordSet());
        return assertion("(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))");
      }
      case 'A': return assertion("\\A");
      case 'z': return assertion("\\z");
      case 'Z': return assertion("\\Z");
      case 'G': return assertion("\\G");
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      return unsupported("escape '\\" + std::string(1, c) + "'");
    }
    size_t len = 0;
    e.ch = nextChar(&len);  // an escaped punctuation or non-ASCII character is itself
    pos_ += len;
    return e;
  }

  // At '['. Returns the set of code points the bracket class matches.
  Result<RangeList> parseClass() {
    ++pos_;
    bool negated = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    if (pos_ < p_.size() && p_[pos_] == ']') return unsupported("']' first in a bracket class");
    RangeList set;
    while (true) {
      if (pos_ >= p_.size()) return malformed("unterminated bracket class");
      const char c = p_[pos_];
      if (c == ']') {
        ++pos_;
        break;
      }
      if (c == '[') return unsupported("'[' inside a bracket class (nested class or POSIX bracket)");
      if (c == '&' && pos_ + 1 < p_.size() && p_[pos_ + 1] == '&') return unsupported("'&&' (class intersection)");
      LG_ASSIGN_OR_RETURN(Escape lo, classItem());
      const bool range = pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']';
      if (lo.kind == Escape::kSet) {
        if (range) return unsupported("a range starting at a class escape");
        addAll(set, lo.set);
        continue;
      }
      if (!range) {
        set.emplace_back(lo.ch, lo.ch);
        continue;
      }
      ++pos_;  // '-'
      if (p_[pos_] == '[') return unsupported("'[' inside a bracket class (nested class or POSIX bracket)");
      LG_ASSIGN_OR_RETURN(Escape hi, classItem());
      if (hi.kind == Escape::kSet) return unsupported("a range ending at a class escape");
      if (hi.ch < lo.ch) return malformed("empty range in bracket class");
      set.emplace_back(lo.ch, hi.ch);
    }
    set = normalize(std::move(set));
    return negated ? unicode::complement(set) : set;
  }

  Result<Escape> classItem() {
    if (p_[pos_] == '\\') {
      ++pos_;
      return parseEscape(/*in_class=*/true);
    }
    Escape e;
    size_t len = 0;
    e.ch = nextChar(&len);
    pos_ += len;
    return e;
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::string out_;
  Last last_ = Last::kNone;
  std::vector<bool> groups_;  // open groups: repeatable once closed?
};

}  // namespace

Result<std::string> translateOnigurumaPattern(std::string_view pattern) { return Translator(pattern).run(); }

std::string literalPattern(std::string_view literal) {
  std::string out;
  for (size_t i = 0; i < literal.size();) {
    size_t len = 0;
    out += renderLiteral(utf8::decode(literal.data() + i, &len));
    i += len;
  }
  return out;
}

}  // namespace lg::text

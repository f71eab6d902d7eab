#include "text/grammar/regex.h"

#include <algorithm>
#include <memory>

namespace lg::text::grammar {

namespace {

using Frag = AutomatonBuilder::Frag;
constexpr uint32_t kMaxCode = 0x10FFFF;

CharSet normalize(CharSet s) {
  // Sort, merge, remove surrogates.
  std::sort(s.begin(), s.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  CharSet merged;
  for (CodeRange r : s) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  CharSet out;
  for (CodeRange r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

CharSet complement(const CharSet& s) {
  CharSet out;
  uint32_t next = 0;
  for (CodeRange r : s) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCode) out.push_back({next, kMaxCode});
  return normalize(out);
}

CharSet intersect(const CharSet& a, const CharSet& b) {
  CharSet out;
  for (CodeRange x : a) {
    for (CodeRange y : b) {
      const uint32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return normalize(out);
}

bool contains(const CharSet& s, uint32_t c) {
  for (CodeRange r : s) {
    if (r.lo <= c && c <= r.hi) return true;
  }
  return false;
}

int encodeUtf8(uint32_t c, uint8_t* out) {
  if (c < 0x80) {
    out[0] = static_cast<uint8_t>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  return 4;
}

// Splits [lo, hi] (no surrogates inside) into runs whose UTF-8 encodings are
// products of byte ranges.
void utf8Split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      utf8Split(lo, max, out);
      utf8Split(max + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8Split(lo, lo | m, out);
        utf8Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8Split(lo, (hi & ~m) - 1, out);
        utf8Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = encodeUtf8(lo, a);
  encodeUtf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

Frag utf8Frag(AutomatonBuilder& b, const CharSet& set) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (CodeRange r : set) utf8Split(r.lo, r.hi, seqs);
  std::vector<Frag> alts;
  for (const auto& seq : seqs) {
    Frag f = b.empty();
    for (auto [lo, hi] : seq) f = b.seq(f, b.range(lo, hi));
    alts.push_back(f);
  }
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

Frag hexDigit(AutomatonBuilder& b) { return b.alt({b.range('0', '9'), b.range('a', 'f'), b.range('A', 'F')}); }
Frag hexOf(AutomatonBuilder& b, uint32_t v) {
  const char c = "0123456789abcdef"[v & 15];
  if (c >= 'a') return b.alt({b.range(static_cast<uint8_t>(c), static_cast<uint8_t>(c)),
                              b.range(static_cast<uint8_t>(c - 32), static_cast<uint8_t>(c - 32))});
  return b.range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
}

// ---- parser ----

struct Re {
  enum class Kind : uint8_t { kSet, kSeq, kAlt, kRepeat } kind = Kind::kSeq;
  CharSet set;
  std::vector<Re> kids;
  int64_t min = 0, max = 0;
};

const CharSet& digitSet() {
  static const CharSet s{{'0', '9'}};
  return s;
}
const CharSet& wordSet() {
  static const CharSet s = normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return s;
}
const CharSet& spaceSet() {
  static const CharSet s = normalize({{9, 13},
                                      {' ', ' '},
                                      {0xA0, 0xA0},
                                      {0x1680, 0x1680},
                                      {0x2000, 0x200A},
                                      {0x2028, 0x2029},
                                      {0x202F, 0x202F},
                                      {0x205F, 0x205F},
                                      {0x3000, 0x3000},
                                      {0xFEFF, 0xFEFF}});
  return s;
}

class Parser {
 public:
  explicit Parser(std::string_view s) {
    // Decode UTF-8 into code points (invalid bytes are an error).
    for (size_t i = 0; i < s.size();) {
      const auto c0 = static_cast<uint8_t>(s[i]);
      uint32_t c;
      int n;
      if (c0 < 0x80) {
        c = c0, n = 1;
      } else if ((c0 & 0xE0) == 0xC0) {
        c = c0 & 0x1F, n = 2;
      } else if ((c0 & 0xF0) == 0xE0) {
        c = c0 & 0x0F, n = 3;
      } else if ((c0 & 0xF8) == 0xF0) {
        c = c0 & 0x07, n = 4;
      } else {
        error_ = "the pattern is not valid UTF-8";
        return;
      }
      if (i + static_cast<size_t>(n) > s.size()) {
        error_ = "the pattern is not valid UTF-8";
        return;
      }
      for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + static_cast<size_t>(k)]) & 0x3F);
      cps_.push_back(c);
      i += static_cast<size_t>(n);
    }
  }

  std::optional<std::string> parse(Re* out, bool* anchored_start, bool* anchored_end) {
    if (error_) return error_;
    *anchored_start = !cps_.empty() && cps_[0] == '^';
    if (*anchored_start) pos_ = 1;
    size_t end = cps_.size();
    *anchored_end = false;
    if (end > pos_ && cps_[end - 1] == '$') {
      size_t backslashes = 0;
      for (size_t k = end - 1; k > pos_ && cps_[k - 1] == '\\'; --k) ++backslashes;
      if (backslashes % 2 == 0) {
        *anchored_end = true;
        --end;
      }
    }
    end_ = end;
    *out = alternation();
    if (!error_ && pos_ != end_) error_ = "unbalanced ')' at offset " + std::to_string(pos_);
    return error_;
  }

 private:
  bool more() const { return pos_ < end_; }
  uint32_t peek() const { return cps_[pos_]; }

  Re alternation() {
    Re alt;
    alt.kind = Re::Kind::kAlt;
    alt.kids.push_back(sequence());
    while (!error_ && more() && peek() == '|') {
      ++pos_;
      alt.kids.push_back(sequence());
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Re sequence() {
    Re seq;
    seq.kind = Re::Kind::kSeq;
    while (!error_ && more() && peek() != '|' && peek() != ')') {
      Re atom = this->atom();
      if (error_) break;
      quantifier(atom);
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  void quantifier(Re& atom) {
    while (more() && !error_) {
      int64_t min, max;
      const uint32_t c = peek();
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{') {
        const size_t save = pos_;
        ++pos_;
        auto number = [&](int64_t* v) {
          if (!more() || peek() < '0' || peek() > '9') return false;
          *v = 0;
          while (more() && peek() >= '0' && peek() <= '9') {
            *v = *v * 10 + (peek() - '0');
            if (*v > 100000) *v = 100000;
            ++pos_;
          }
          return true;
        };
        if (!number(&min)) {
          pos_ = save;  // a literal '{'
          return;
        }
        max = min;
        if (more() && peek() == ',') {
          ++pos_;
          if (!number(&max)) max = -1;
        }
        if (!more() || peek() != '}') {
          pos_ = save;
          return;
        }
        ++pos_;
        if (max >= 0 && max < min) {
          error_ = "quantifier {" + std::to_string(min) + "," + std::to_string(max) + "} out of order";
          return;
        }
      } else {
        return;
      }
      if (more() && peek() == '?') ++pos_;  // lazy: the same language
      if (more() && peek() == '+') {
        error_ = "possessive quantifiers are not supported";
        return;
      }
      Re rep;
      rep.kind = Re::Kind::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
  }

  Re setRe(CharSet s) {
    Re r;
    r.kind = Re::Kind::kSet;
    r.set = normalize(std::move(s));
    return r;
  }

  Re atom() {
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          ++pos_;
          if (more() && peek() == ':') {
            ++pos_;
          } else if (more() && peek() == '<' && pos_ + 1 < end_ && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
            while (more() && peek() != '>') ++pos_;
            if (more()) ++pos_;
          } else {
            error_ = "lookaround and group flags are not supported";
            return {};
          }
        }
        Re inner = alternation();
        if (error_) return {};
        if (!more() || peek() != ')') {
          error_ = "missing ')'";
          return {};
        }
        ++pos_;
        return inner;
      }
      case '[':
        return classAtom();
      case '.':
        return setRe(complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
      case '\\':
        return escapeAtom(false);
      case '^':
      case '$':
        error_ = "anchors are supported only at the start and end of the pattern";
        return {};
      case '*':
      case '+':
      case '?':
        error_ = "nothing to repeat at offset " + std::to_string(pos_ - 1);
        return {};
      case ')':
        error_ = "unbalanced ')'";
        return {};
      default:
        return setRe({{c, c}});
    }
  }

  bool hexN(int n, uint32_t* v) {
    *v = 0;
    for (int i = 0; i < n; ++i) {
      if (!more()) return false;
      const uint32_t c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return false;
      }
      *v = *v * 16 + d;
      ++pos_;
    }
    return true;
  }

  // After a backslash. in_class: inside [...] (\b is backspace there).
  Re escapeAtom(bool in_class) {
    if (!more()) {
      error_ = "trailing backslash";
      return {};
    }
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'd': return setRe(digitSet());
      case 'D': return setRe(complement(digitSet()));
      case 'w': return setRe(wordSet());
      case 'W': return setRe(complement(wordSet()));
      case 's': return setRe(spaceSet());
      case 'S': return setRe(complement(spaceSet()));
      case 'n': return setRe({{'\n', '\n'}});
      case 'r': return setRe({{'\r', '\r'}});
      case 't': return setRe({{'\t', '\t'}});
      case 'f': return setRe({{'\f', '\f'}});
      case 'v': return setRe({{'\v', '\v'}});
      case '0': return setRe({{0, 0}});
      case 'b':
        if (in_class) return setRe({{8, 8}});
        error_ = "word boundaries (\\b) are not supported";
        return {};
      case 'B':
        error_ = "word boundaries (\\B) are not supported";
        return {};
      case 'x': {
        uint32_t v;
        if (!hexN(2, &v)) {
          error_ = "bad \\x escape";
          return {};
        }
        return setRe({{v, v}});
      }
      case 'u': {
        uint32_t v;
        if (more() && peek() == '{') {
          ++pos_;
          v = 0;
          size_t digits = 0;
          uint32_t d;
          while (more() && peek() != '}' && hexN(1, &d)) v = v * 16 + d, ++digits;
          if (!more() || peek() != '}' || digits == 0 || v > kMaxCode) {
            error_ = "bad \\u{...} escape";
            return {};
          }
          ++pos_;
        } else if (!hexN(4, &v)) {
          error_ = "bad \\u escape";
          return {};
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
          error_ = "surrogate escapes are not supported";
          return {};
        }
        return setRe({{v, v}});
      }
      default:
        if ((c >= '1' && c <= '9') || c == 'k') {
          error_ = "backreferences are not supported";
          return {};
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          error_ = std::string("unsupported escape \\") + static_cast<char>(c);
          return {};
        }
        return setRe({{c, c}});
    }
  }

  Re classAtom() {
    bool negate = false;
    if (more() && peek() == '^') negate = true, ++pos_;
    CharSet set;
    bool first = true;
    while (true) {
      if (!more()) {
        error_ = "missing ']'";
        return {};
      }
      if (peek() == ']' && !first) break;
      first = false;
      CharSet lo_set;
      uint32_t lo;
      bool single = true;
      if (peek() == '\\') {
        ++pos_;
        Re e = escapeAtom(true);
        if (error_) return {};
        lo_set = e.set;
        single = e.set.size() == 1 && e.set[0].lo == e.set[0].hi;
        lo = single ? e.set[0].lo : 0;
      } else {
        lo = peek();
        ++pos_;
        lo_set = {{lo, lo}};
      }
      if (single && pos_ + 1 < end_ && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (peek() == '\\') {
          ++pos_;
          Re e = escapeAtom(true);
          if (error_) return {};
          if (e.set.size() != 1 || e.set[0].lo != e.set[0].hi) {
            error_ = "bad class range";
            return {};
          }
          hi = e.set[0].lo;
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) {
          error_ = "class range out of order";
          return {};
        }
        set.push_back({lo, hi});
      } else {
        set.insert(set.end(), lo_set.begin(), lo_set.end());
      }
    }
    ++pos_;  // ']'
    set = normalize(set);
    return setRe(negate ? complement(set) : set);
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0, end_ = 0;
  std::optional<std::string> error_;
};

Frag emit(AutomatonBuilder& b, const Re& re, CharEncoding enc) {
  switch (re.kind) {
    case Re::Kind::kSet:
      return charSetFrag(b, re.set, enc);
    case Re::Kind::kSeq: {
      Frag f = b.empty();
      for (const Re& k : re.kids) f = b.seq(f, emit(b, k, enc));
      return f;
    }
    case Re::Kind::kAlt: {
      std::vector<Frag> alts;
      for (const Re& k : re.kids) alts.push_back(emit(b, k, enc));
      return b.alt(alts);
    }
    case Re::Kind::kRepeat:
      return b.repeat([&] { return emit(b, re.kids[0], enc); }, re.min, re.max);
  }
  return b.never();
}

}  // namespace

Frag charSetFrag(AutomatonBuilder& b, const CharSet& set, CharEncoding enc) {
  if (set.empty()) return b.never();
  if (enc == CharEncoding::kRaw) return utf8Frag(b, set);
  std::vector<Frag> alts;
  const CharSet plain = intersect(set, normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCode}}));
  if (!plain.empty()) alts.push_back(utf8Frag(b, plain));
  if (contains(set, '"')) alts.push_back(b.literal("\\\""));
  if (contains(set, '\\')) alts.push_back(b.literal("\\\\"));
  if (contains(set, '/')) alts.push_back(b.literal("\\/"));
  static constexpr std::pair<uint32_t, const char*> kShort[] = {
      {8, "\\b"}, {9, "\\t"}, {10, "\\n"}, {12, "\\f"}, {13, "\\r"}};
  for (auto [c, esc] : kShort) {
    if (contains(set, c)) alts.push_back(b.literal(esc));
  }
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (contains(set, c)) alts.push_back(b.seq({b.literal("\\u00"), hexOf(b, c >> 4), hexOf(b, c & 15)}));
  }
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

Frag jsonStringChar(AutomatonBuilder& b) {
  std::vector<Frag> alts;
  alts.push_back(utf8Frag(b, normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCode}})));
  Frag simple = b.empty();
  {
    std::vector<Frag> e;
    for (char c : std::string_view("\"\\/bfnrt")) e.push_back(b.literal(std::string(1, c)));
    simple = b.seq(b.literal("\\"), b.alt(e));
  }
  alts.push_back(simple);
  // \uXXXX outside the surrogates, or a surrogate pair.
  auto hex = [&] { return hexDigit(b); };
  Frag not_d = b.alt({b.range('0', '9'), b.range('a', 'c'), b.range('A', 'C'), b.range('e', 'f'), b.range('E', 'F')});
  Frag bmp1 = b.seq({b.literal("\\u"), not_d, hex(), hex(), hex()});
  Frag bmp2 = b.seq({b.literal("\\u"), b.alt({b.literal("d"), b.literal("D")}), b.range('0', '7'), hex(), hex()});
  Frag pair = b.seq({b.literal("\\u"), b.alt({b.literal("d"), b.literal("D")}),
                     b.alt({b.range('8', '9'), b.range('a', 'b'), b.range('A', 'B')}), hex(), hex(),
                     b.literal("\\u"), b.alt({b.literal("d"), b.literal("D")}),
                     b.alt({b.range('c', 'f'), b.range('C', 'F')}), hex(), hex()});
  alts.push_back(bmp1);
  alts.push_back(bmp2);
  alts.push_back(pair);
  return b.alt(alts);
}

std::optional<std::string> compileRegex(AutomatonBuilder& b, std::string_view re, CharEncoding enc, bool search,
                                        Frag* out) {
  Parser parser(re);
  Re ast;
  bool anchored_start = false, anchored_end = false;
  if (auto err = parser.parse(&ast, &anchored_start, &anchored_end)) return err;
  Frag f = emit(b, ast, enc);
  if (search) {
    const CharSet any{{0, 0xD7FF}, {0xE000, kMaxCode}};
    if (!anchored_start) f = b.seq(b.star(charSetFrag(b, any, enc)), f);
    if (!anchored_end) f = b.seq(f, b.star(charSetFrag(b, any, enc)));
  }
  *out = f;
  return std::nullopt;
}

}  // namespace lg::text::grammar

#include "text/chat/jinja_lexer.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "text/chat/unicode_util.h"

namespace lg::text::jinja {
namespace {

Status syntaxError(int line, const std::string& message) {
  return invalidArgument("template syntax error at line " + std::to_string(line) + ": " + message);
}

// Jinja2 normalizes \r\n and \r to \n and, without keep_trailing_newline,
// drops one trailing newline.
std::string normalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length in bytes of the Python-whitespace run at s[pos].
size_t whitespaceRun(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    size_t next = p;
    if (!isPyWhitespace(utf8::decodeAt(s, next))) break;
    p = next;
  }
  return p - pos;
}

// Python str.rstrip() with no arguments.
std::string_view pyRstrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
    size_t p = begin;
    if (!isPyWhitespace(utf8::decodeAt(s, p))) break;
    end = begin;
  }
  return s.substr(0, end);
}

int countNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Matches `(\d+_)*\d+` at pos; returns its length (0 if none).
size_t matchDigitGroups(std::string_view s, size_t pos) {
  size_t p = pos;
  if (p >= s.size() || !isDigit(s[p])) return 0;
  while (true) {
    while (p < s.size() && isDigit(s[p])) ++p;
    if (p + 1 < s.size() && s[p] == '_' && isDigit(s[p + 1])) {
      ++p;
      continue;
    }
    return p - pos;
  }
}

// Jinja2's float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
size_t matchFloat(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return 0;
  const size_t int_len = matchDigitGroups(s, pos);
  if (int_len == 0) return 0;
  const size_t after_int = pos + int_len;
  // Alternative 1: optional fraction, then a mandatory exponent.
  size_t p = after_int;
  if (p < s.size() && s[p] == '.') {
    const size_t frac = matchDigitGroups(s, p + 1);
    if (frac > 0) p += 1 + frac;
  }
  if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
    size_t q = p + 1;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    const size_t exp = matchDigitGroups(s, q);
    if (exp > 0) return q + exp - pos;
  }
  // Alternative 2: a fraction without exponent.
  if (after_int < s.size() && s[after_int] == '.') {
    const size_t frac = matchDigitGroups(s, after_int + 1);
    if (frac > 0) return after_int + 1 + frac - pos;
  }
  return 0;
}

bool isHexDigit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// Jinja2's integer_re (case-insensitive):
// 0b(_?[0-1])+ | 0o(_?[0-7])+ | 0x(_?[\da-f])+ | [1-9](_?\d)* | 0(_?0)*
size_t matchInteger(std::string_view s, size_t pos, int* base) {
  auto run = [&](size_t p, auto&& digit_ok) {
    size_t q = p;
    while (true) {
      if (q < s.size() && digit_ok(s[q])) {
        ++q;
      } else if (q + 1 < s.size() && s[q] == '_' && digit_ok(s[q + 1])) {
        q += 2;
      } else {
        return q;
      }
    }
  };
  if (pos >= s.size() || !isDigit(s[pos])) return 0;
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char k = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos + 1])));
    struct Prefix {
      char letter;
      int base;
      bool (*ok)(char);
    };
    static const Prefix kPrefixes[] = {
        {'b', 2, [](char c) { return c == '0' || c == '1'; }},
        {'o', 8, [](char c) { return c >= '0' && c <= '7'; }},
        {'x', 16, [](char c) { return isHexDigit(c); }},
    };
    for (const Prefix& prefix : kPrefixes) {
      if (k != prefix.letter) continue;
      const size_t end = run(pos + 2, prefix.ok);
      if (end > pos + 2) {
        *base = prefix.base;
        return end - pos;
      }
    }
  }
  *base = 10;
  if (s[pos] == '0') return run(pos + 1, [](char c) { return c == '0'; }) - pos;
  return run(pos + 1, [](char c) { return isDigit(c); }) - pos;
}

// Python's "unicode-escape" decoding of a string literal body, applied (as
// Jinja2 does) after encoding non-ASCII characters with backslashreplace.
Status unescapeString(std::string_view body, int line, std::string* out) {
  auto appendBackslashReplaced = [&](char32_t cp) {
    char buf[16];
    if (cp < 0x100) {
      std::snprintf(buf, sizeof(buf), "x%02x", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof(buf), "u%04x", static_cast<unsigned>(cp));
    } else {
      std::snprintf(buf, sizeof(buf), "U%08x", static_cast<unsigned>(cp));
    }
    *out += buf;
  };
  auto appendCp = [&](char32_t cp) -> Status {
    if (cp > 0x10FFFF) return syntaxError(line, "invalid \\U escape in string literal");
    if (cp >= 0xD800 && cp <= 0xDFFF) return syntaxError(line, "string literal contains a lone surrogate");
    utf8::append(*out, cp);
    return Status::ok();
  };
  size_t i = 0;
  while (i < body.size()) {
    const char c = body[i];
    if (c != '\\') {
      out->push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= body.size()) return syntaxError(line, "string literal ends with a backslash");
    const char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        if (i + n > body.size()) return syntaxError(line, std::string("truncated \\") + e + " escape");
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const char h = body[i + k];
          if (!isHexDigit(h)) return syntaxError(line, std::string("truncated \\") + e + " escape");
          cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                            : std::tolower(h) - 'a' + 10);
        }
        i += n;
        LG_RETURN_IF_ERROR(appendCp(cp));
        break;
      }
      case 'N':
        return unimplemented("\\N{...} escapes in string literals (line " + std::to_string(line) + ")");
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k, ++i) {
            cp = cp * 8 + static_cast<char32_t>(body[i] - '0');
          }
          LG_RETURN_IF_ERROR(appendCp(cp));
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // backslashreplace turned the character into \xNN / \uNNNN text, and
          // the escaped backslash before it kept that text literal.
          size_t p = i - 1;
          const char32_t cp = utf8::decodeAt(body, p);
          out->push_back('\\');
          appendBackslashReplaced(cp);
          i = p;
        } else {
          out->push_back('\\');  // unknown escapes stay as written
          out->push_back(e);
        }
    }
  }
  return Status::ok();
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) LG_RETURN_IF_ERROR(lexRoot());
    push(TokenType::kEof, "");
    return std::move(tokens_);
  }

 private:
  void push(TokenType type, std::string value) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  void advance(size_t n) {
    line_ += countNewlines(std::string_view(src_).substr(pos_, n));
    pos_ += n;
  }

  // Data up to the next tag, then the tag itself.
  Status lexRoot() {
    const std::string_view s = src_;
    size_t tag = pos_;
    char kind = 0;
    while (true) {
      tag = s.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= s.size()) {
        tag = std::string_view::npos;
        break;
      }
      const char k = s[tag + 1];
      if (k == '{' || k == '%' || k == '#') {
        kind = k;
        break;
      }
      ++tag;
    }
    if (tag == std::string_view::npos) {
      if (pos_ < s.size()) push(TokenType::kData, std::string(s.substr(pos_)));
      advance(s.size() - pos_);
      line_starting_ = !s.empty() && s.back() == '\n';
      return Status::ok();
    }
    const char sign = tag + 2 < s.size() && (s[tag + 2] == '-' || s[tag + 2] == '+') ? s[tag + 2] : 0;
    std::string_view text = s.substr(pos_, tag - pos_);
    if (sign == '-') {
      text = pyRstrip(text);
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: drop spaces/tabs between the line start and the tag.
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool only_blank = true;
        for (size_t i = l_pos; i < text.size() && only_blank; ++i) only_blank = text[i] == ' ' || text[i] == '\t';
        if (only_blank) text = text.substr(0, l_pos);
      }
    }
    const int data_line = line_;
    if (!text.empty()) {
      push(TokenType::kData, std::string(text));
      tokens_.back().line = data_line;
    }
    advance(tag - pos_);
    const size_t open_len = sign ? 3 : 2;
    if (kind == '#') {
      advance(open_len);
      return lexComment();
    }
    if (kind == '%') {
      // {% raw %} switches the lexer into a mode this subset does not have.
      size_t p = pos_ + open_len;
      p += whitespaceRun(s, p);
      if (s.substr(p, 3) == "raw") {
        size_t q = p + 3;
        q += whitespaceRun(s, q);
        if (s.substr(q, 2) == "%}" || s.substr(q, 3) == "-%}") {
          return unimplemented("{% raw %} blocks (line " + std::to_string(line_) + ")");
        }
      }
    }
    advance(open_len);
    push(kind == '%' ? TokenType::kBlockBegin : TokenType::kVariableBegin, "");
    return lexTag(kind == '%');
  }

  Status lexComment() {
    const std::string_view s = src_;
    const int start_line = line_;
    const size_t end = s.find("#}", pos_);
    if (end == std::string_view::npos) {
      // Jinja2 only notices a missing `#}` when text follows the opening.
      if (pos_ >= s.size()) return Status::ok();
      return syntaxError(start_line, "missing end of comment tag");
    }
    const char sign = end > pos_ && (s[end - 1] == '-' || s[end - 1] == '+') ? s[end - 1] : 0;
    advance(end + 2 - pos_);
    finishTagEnd(sign, /*trim_newline=*/true);
    return Status::ok();
  }

  // After a tag end: `-` eats following whitespace, a plain block/comment
  // end eats one newline (trim_blocks), `+` keeps everything.
  void finishTagEnd(char sign, bool trim_newline) {
    const std::string_view s = src_;
    if (sign == '-') {
      advance(whitespaceRun(s, pos_));
    } else if (sign != '+' && trim_newline && pos_ < s.size() && s[pos_] == '\n') {
      advance(1);
    }
    line_starting_ = pos_ > 0 && s[pos_ - 1] == '\n';
  }

  Status lexTag(bool block) {
    const std::string_view s = src_;
    const int start_line = line_;
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) {
        return syntaxError(start_line, block ? "unexpected end of template, expected '%}'"
                                             : "unexpected end of template, expected '}}'");
      }
      if (balance.empty()) {
        const std::string_view close = block ? "%}" : "}}";
        if (s.substr(pos_, 2) == close) {
          advance(2);
          push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "");
          finishTagEnd(0, block);
          return Status::ok();
        }
        if ((s[pos_] == '-' || (block && s[pos_] == '+')) && s.substr(pos_ + 1, 2) == close) {
          const char sign = s[pos_];
          advance(3);
          push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "");
          finishTagEnd(sign, block);
          return Status::ok();
        }
      }
      if (const size_t ws = whitespaceRun(s, pos_); ws > 0) {
        advance(ws);
        continue;
      }
      if (const size_t n = matchFloat(s, pos_); n > 0) {
        std::string text;
        for (char c : s.substr(pos_, n)) {
          if (c != '_') text.push_back(c);
        }
        push(TokenType::kFloat, text);
        tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
        advance(n);
        continue;
      }
      int base = 10;
      if (const size_t n = matchInteger(s, pos_, &base); n > 0) {
        std::string digits;
        for (char c : s.substr(pos_ + (base == 10 ? 0 : 2), n - (base == 10 ? 0 : 2))) {
          if (c != '_') digits.push_back(c);
        }
        errno = 0;
        const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
          return unimplemented("integer literal larger than 64 bits (line " + std::to_string(line_) + ")");
        }
        push(TokenType::kInteger, std::string(s.substr(pos_, n)));
        tokens_.back().int_value = static_cast<int64_t>(v);
        advance(n);
        continue;
      }
      const char c = s[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (pos_ + n < s.size() &&
               (std::isalnum(static_cast<unsigned char>(s[pos_ + n])) || s[pos_ + n] == '_')) {
          ++n;
        }
        push(TokenType::kName, std::string(s.substr(pos_, n)));
        advance(n);
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s.size() && s[p] != c) p += s[p] == '\\' ? 2 : 1;
        if (p >= s.size()) return syntaxError(line_, "unterminated string literal");
        std::string value;
        const int line = line_;
        LG_RETURN_IF_ERROR(unescapeString(s.substr(pos_ + 1, p - pos_ - 1), line, &value));
        push(TokenType::kString, std::move(value));
        advance(p + 1 - pos_);
        continue;
      }
      static const char* const kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : kTwoCharOps) {
        if (s.substr(pos_, 2) == op) {
          push(TokenType::kOperator, op);
          advance(2);
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
        } else if (c == ')' || c == ']' || c == '}') {
          if (balance.empty()) return syntaxError(line_, std::string("unexpected '") + c + "'");
          if (balance.back() != c) {
            return syntaxError(line_, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
          }
          balance.pop_back();
        }
        push(TokenType::kOperator, std::string(1, c));
        advance(1);
        continue;
      }
      size_t p = pos_;
      utf8::decodeAt(s, p);
      return syntaxError(line_, "unexpected character '" + std::string(s.substr(pos_, p - pos_)) + "'");
    }
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  if (!utf8::isValid(source)) return invalidArgument("chat template is not valid UTF-8");
  Lexer lexer(normalizeNewlines(source));
  return lexer.run();
}

}  // namespace lg::text::jinja

#include "text/chat/jinja_str_ops.h"

#include <algorithm>

#include "text/chat/jinja_builtins.h"
#include "text/chat/unicode_util.h"

namespace lg::text::jinja {
namespace {

bool inCharSet(char32_t cp, std::optional<std::string_view> chars) {
  if (!chars) return isPyWhitespace(cp);
  size_t p = 0;
  while (p < chars->size()) {
    if (utf8::decodeAt(*chars, p) == cp) return true;
  }
  return false;
}

size_t prevCodePointStart(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return b;
}

}  // namespace

size_t byteOffsetOfCodePoint(std::string_view s, size_t i) {
  size_t pos = 0;
  while (i > 0 && pos < s.size()) {
    utf8::decodeAt(s, pos);
    --i;
  }
  return pos;
}

Value pyStrip(const Value& s, std::optional<std::string_view> chars, StripSide side) {
  const std::string_view text = s.str();
  size_t begin = 0, end = text.size();
  if (side != StripSide::kRight) {
    while (begin < end) {
      size_t p = begin;
      if (!inCharSet(utf8::decodeAt(text, p), chars)) break;
      begin = p;
    }
  }
  if (side != StripSide::kLeft) {
    while (end > begin) {
      const size_t b = prevCodePointStart(text, end);
      size_t p = b;
      if (!inCharSet(utf8::decodeAt(text, p), chars)) break;
      end = b;
    }
  }
  if (begin == 0 && end == text.size()) return s;
  StrBuilder out;
  out.appendSub(s, begin, end);
  return out.finish();
}

Result<Value> pySplit(const Value& s, std::optional<std::string_view> sep, int64_t maxsplit, bool from_right) {
  const std::string_view text = s.str();
  if (sep && sep->empty()) return invalidArgument("empty separator");
  std::vector<std::pair<size_t, size_t>> pieces;  // byte ranges, in text order
  // The scan, and each piece's range and Value, are charged as they come; a
  // refused piece is not stored (the loop runs on without allocating).
  chargeBytes(text.size());
  RenderBudget* budget = RenderBudget::current();
  auto add = [&](size_t b, size_t e) {
    if (budget == nullptr || budget->admitBytes(sizeof(std::pair<size_t, size_t>) + sizeof(Value))) {
      pieces.emplace_back(b, e);
    }
  };
  auto isWs = [&](size_t pos, size_t* next) {
    size_t p = pos;
    const bool ws = isPyWhitespace(utf8::decodeAt(text, p));
    *next = p;
    return ws;
  };
  if (!sep) {
    if (!from_right) {
      size_t pos = 0, next = 0;
      int64_t splits = 0;
      while (pos < text.size()) {
        while (pos < text.size() && isWs(pos, &next)) pos = next;
        if (pos >= text.size()) break;
        if (maxsplit >= 0 && splits >= maxsplit) {
          add(pos, text.size());  // the rest, trailing whitespace kept
          break;
        }
        const size_t start = pos;
        while (pos < text.size() && !isWs(pos, &next)) pos = next;
        add(start, pos);
        ++splits;
      }
    } else {
      size_t end = text.size(), next = 0;
      int64_t splits = 0;
      while (end > 0) {
        while (end > 0 && isWs(prevCodePointStart(text, end), &next)) end = prevCodePointStart(text, end);
        if (end == 0) break;
        if (maxsplit >= 0 && splits >= maxsplit) {
          add(0, end);
          break;
        }
        size_t start = end;
        while (start > 0 && !isWs(prevCodePointStart(text, start), &next)) start = prevCodePointStart(text, start);
        add(start, end);
        end = start;
        ++splits;
      }
      std::reverse(pieces.begin(), pieces.end());
    }
  } else if (!from_right) {
    size_t pos = 0;
    int64_t splits = 0;
    while (true) {
      const size_t hit = (maxsplit >= 0 && splits >= maxsplit) ? std::string_view::npos : text.find(*sep, pos);
      if (hit == std::string_view::npos) {
        add(pos, text.size());
        break;
      }
      add(pos, hit);
      pos = hit + sep->size();
      ++splits;
    }
  } else {
    size_t end = text.size();
    int64_t splits = 0;
    while (true) {
      size_t hit = std::string_view::npos;
      if (!(maxsplit >= 0 && splits >= maxsplit) && end >= sep->size()) hit = text.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) {
        add(0, end);
        break;
      }
      add(hit + sep->size(), end);
      end = hit;
      ++splits;
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  std::vector<Value> items;
  items.reserve(pieces.size());
  for (const auto& [b, e] : pieces) {
    StrBuilder piece;
    piece.appendSub(s, b, e);
    items.push_back(piece.finish());
  }
  return Value::list(std::move(items));
}

Result<Value> pyReplace(const Value& s, const Value& old_value, const Value& new_value, int64_t count) {
  const std::string_view text = s.str(), old_text = old_value.str();
  StrBuilder out;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    size_t pos = 0;
    while (true) {
      if (count < 0 || done < count) {
        out.appendStr(new_value);
        ++done;
      }
      LG_JINJA_RETURN_IF_REFUSED(budgetOk());
      if (pos >= text.size()) break;
      const size_t start = pos;
      utf8::decodeAt(text, pos);
      out.appendSub(s, start, pos);
    }
    return out.finish();
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.appendSub(s, pos, hit);
    out.appendStr(new_value);
    LG_JINJA_RETURN_IF_REFUSED(budgetOk());
    pos = hit + old_text.size();
    ++done;
  }
  out.appendSub(s, pos, text.size());
  return out.finish();
}

Value pyCaseMap(const Value& s, CaseMap mode) {
  const std::string_view text = s.str();
  StrBuilder out;
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = utf8::decodeAt(text, pos);
    std::string encoded;
    if (mode == CaseMap::kLower || (mode == CaseMap::kCapitalize && !first)) {
      appendLower(encoded, cp);
    } else {
      appendUpper(encoded, cp);
    }
    first = false;
    // Each output character takes the trust of the character it came from.
    bool trusted = false;
    forEachTrustRun(s, start, pos, [&](size_t, size_t, bool t) { trusted = t; });
    out.append(encoded, trusted);
  }
  return out.finish();
}

int64_t pyFind(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8::countCodePoints(s.substr(0, hit)));
}

int64_t pyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8::countCodePoints(s)) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

}  // namespace lg::text::jinja

#include "text/chat/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "text/chat/jinja_str_ops.h"
#include "text/chat/unicode_util.h"

namespace lg::text::jinja {
namespace {

struct NamedFilter {
  std::string_view name;
  FilterId id;
};
constexpr NamedFilter kFilters[] = {
    {"length", FilterId::kLength}, {"count", FilterId::kLength},   {"trim", FilterId::kTrim},
    {"tojson", FilterId::kToJson}, {"first", FilterId::kFirst},    {"last", FilterId::kLast},
    {"join", FilterId::kJoin},     {"lower", FilterId::kLower},    {"upper", FilterId::kUpper},
    {"replace", FilterId::kReplace}, {"default", FilterId::kDefault}, {"d", FilterId::kDefault},
    {"string", FilterId::kString}, {"items", FilterId::kItems},    {"list", FilterId::kList},
    {"int", FilterId::kInt},       {"float", FilterId::kFloat},    {"abs", FilterId::kAbs},
    {"capitalize", FilterId::kCapitalize}, {"reverse", FilterId::kReverse}, {"safe", FilterId::kSafe},
};

struct NamedTest {
  std::string_view name;
  TestId id;
};
constexpr NamedTest kTests[] = {
    {"defined", TestId::kDefined}, {"undefined", TestId::kUndefined}, {"none", TestId::kNone},
    {"boolean", TestId::kBoolean}, {"false", TestId::kFalse},         {"true", TestId::kTrue},
    {"integer", TestId::kInteger}, {"float", TestId::kFloat},         {"number", TestId::kNumber},
    {"string", TestId::kString},   {"mapping", TestId::kMapping},     {"iterable", TestId::kIterable},
    {"sequence", TestId::kSequence}, {"callable", TestId::kCallable}, {"sameas", TestId::kSameAs},
    {"eq", TestId::kEq},           {"equalto", TestId::kEq},          {"==", TestId::kEq},
    {"ne", TestId::kNe},           {"!=", TestId::kNe},               {"lt", TestId::kLt},
    {"lessthan", TestId::kLt},     {"<", TestId::kLt},                {"le", TestId::kLe},
    {"<=", TestId::kLe},           {"gt", TestId::kGt},               {"greaterthan", TestId::kGt},
    {">", TestId::kGt},            {"ge", TestId::kGe},               {">=", TestId::kGe},
    {"in", TestId::kIn},           {"even", TestId::kEven},           {"odd", TestId::kOdd},
    {"divisibleby", TestId::kDivisibleBy}, {"lower", TestId::kLower}, {"upper", TestId::kUpper},
};

struct NamedMethod {
  std::string_view name;
  Builtin id;
};
constexpr NamedMethod kStrMethods[] = {
    {"split", Builtin::kStrSplit},       {"rsplit", Builtin::kStrRsplit},   {"strip", Builtin::kStrStrip},
    {"lstrip", Builtin::kStrLstrip},     {"rstrip", Builtin::kStrRstrip},   {"startswith", Builtin::kStrStartswith},
    {"endswith", Builtin::kStrEndswith}, {"replace", Builtin::kStrReplace}, {"lower", Builtin::kStrLower},
    {"upper", Builtin::kStrUpper},       {"capitalize", Builtin::kStrCapitalize}, {"find", Builtin::kStrFind},
    {"count", Builtin::kStrCount},       {"join", Builtin::kStrJoin},
};
constexpr NamedMethod kDictMethods[] = {
    {"get", Builtin::kDictGet}, {"items", Builtin::kDictItems}, {"keys", Builtin::kDictKeys},
    {"values", Builtin::kDictValues},
};

// Dict methods that mutate: the immutable sandbox refuses them.
constexpr std::string_view kUnsafeDictMethods[] = {"pop", "popitem", "clear", "update", "setdefault"};

Status typeError(const std::string& message) { return invalidArgument(message); }

// Binds positional and keyword arguments to parameter names, Python style.
Status bindArgs(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params,
                std::vector<std::optional<Value>>* out) {
  out->assign(params.size(), std::nullopt);
  if (args.positional.size() > params.size()) {
    return typeError(std::string(fn) + "() takes at most " + std::to_string(params.size()) + " arguments (" +
                     std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) (*out)[i] = args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    size_t index = 0;
    for (std::string_view p : params) {
      if (p == name) break;
      ++index;
    }
    if (index == params.size()) return typeError(std::string(fn) + "() got an unexpected keyword argument '" + name + "'");
    if ((*out)[index]) return typeError(std::string(fn) + "() got multiple values for argument '" + name + "'");
    (*out)[index] = value;
  }
  return Status::ok();
}

Result<Value> toStrValue(const Value& v) {
  if (v.isString()) return v;
  StrBuilder b;
  LG_RETURN_IF_ERROR(appendPyStr(v, b));
  return b.finish();
}

Result<int64_t> requireInt(const Value& v, std::string_view what) {
  if (v.kind() == ValueKind::kInt || v.kind() == ValueKind::kBool) return v.intValue();
  return typeError(std::string(what) + ": an integer is required, got '" + std::string(v.typeName()) + "'");
}

Result<std::string_view> requireStr(const Value& v, std::string_view what) {
  if (v.isString()) return v.str();
  return typeError(std::string(what) + ": expected a string, got '" + std::string(v.typeName()) + "'");
}

Result<size_t> pyLen(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return size_t{0};
    case ValueKind::kString:
      chargeBytes(v.str().size());
      return utf8::countCodePoints(v.str());
    case ValueKind::kList: return listSize(v);
    case ValueKind::kDict: return dictSize(v);
    case ValueKind::kLoop: return v.loopData()->items->size();
    default: return typeError("object of type '" + std::string(v.typeName()) + "' has no len()");
  }
}

Result<Value> filterJoin(const Value& subject, const Value& sep, const std::optional<Value>& attribute) {
  LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(subject));
  LG_ASSIGN_OR_RETURN(Value sep_str, toStrValue(sep));
  StrBuilder out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.appendStr(sep_str);
    Value item = items[i];
    if (attribute && !attribute->isNone()) {
      LG_ASSIGN_OR_RETURN(Value name, toStrValue(*attribute));
      std::string_view path = name.str();
      while (true) {
        const size_t dot = path.find('.');
        const std::string_view part = path.substr(0, dot);
        const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
        LG_ASSIGN_OR_RETURN(item, getItem(item, numeric ? Value::integer(std::atoll(std::string(part).c_str()), true)
                                                        : Value::string(std::string(part), true)));
        if (dot == std::string_view::npos) break;
        path.remove_prefix(dot + 1);
      }
    }
    LG_RETURN_IF_ERROR(appendPyStr(item, out));
    LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  }
  return out.finish();
}

Result<Value> filterToJson(const Value& subject, const CallArgs& args) {
  std::vector<std::optional<Value>> a;
  LG_RETURN_IF_ERROR(bindArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonDumpOptions o;
  if (a[0]) o.ensure_ascii = a[0]->truthy();
  if (a[1] && !a[1]->isNone()) {
    o.has_indent = true;
    if (a[1]->isString()) {
      o.indent = std::string(a[1]->str());
    } else {
      LG_ASSIGN_OR_RETURN(int64_t n, requireInt(*a[1], "tojson indent"));
      if (n > 1024) return invalidArgument("tojson indent too large");
      o.indent.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
    o.item_separator = ",";
  }
  if (a[2] && !a[2]->isNone()) {
    if (!a[2]->isList() || listSize(*a[2]) != 2 || !listAt(*a[2], 0).isString() || !listAt(*a[2], 1).isString()) {
      return typeError("tojson separators must be a pair of strings");
    }
    o.item_separator = std::string(listAt(*a[2], 0).str());
    o.key_separator = std::string(listAt(*a[2], 1).str());
  }
  if (a[3]) o.sort_keys = a[3]->truthy();
  StrBuilder out;
  LG_RETURN_IF_ERROR(appendJsonDump(subject, o, out));
  LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  return out.finish();
}

// Python int(str): optional sign, digits with single underscores, whitespace around.
std::optional<int64_t> parsePyInt(std::string_view s) {
  Value v = pyStrip(Value::string(std::string(s), false), std::nullopt, StripSide::kBoth);
  std::string_view t = v.str();
  bool neg = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    t.remove_prefix(1);
  }
  if (t.empty() || t.front() == '_' || t.back() == '_') return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (t[i + 1] == '_') return std::nullopt;
      continue;
    }
    if (t[i] < '0' || t[i] > '9') return std::nullopt;
    digits.push_back(t[i]);
  }
  errno = 0;
  const long long n = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return neg ? -n : n;
}

std::optional<double> parsePyFloat(std::string_view s) {
  Value v = pyStrip(Value::string(std::string(s), false), std::nullopt, StripSide::kBoth);
  const std::string t(v.str());
  if (t.empty() || t.find('_') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

}  // namespace

std::optional<FilterId> lookupFilter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (f.name == name) return f.id;
  }
  return std::nullopt;
}

std::optional<TestId> lookupTest(std::string_view name) {
  for (const auto& t : kTests) {
    if (t.name == name) return t.id;
  }
  return std::nullopt;
}

std::optional<Builtin> lookupGlobalFunction(std::string_view name) {
  if (name == "namespace") return Builtin::kNamespace;
  if (name == "range") return Builtin::kRange;
  if (name == "dict") return Builtin::kDict;
  if (name == "raise_exception") return Builtin::kRaiseException;
  return std::nullopt;
}

bool isSupportedMethodName(std::string_view name) {
  for (const auto& m : kStrMethods) {
    if (m.name == name) return true;
  }
  for (const auto& m : kDictMethods) {
    if (m.name == name) return true;
  }
  return name == "cycle";
}

Status undefinedError(const Value& v) {
  const std::string& hint = v.undefinedHint();
  return invalidArgument(hint.empty() ? "undefined value used" : hint);
}

Result<Value> getAttribute(const Value& obj, std::string_view name) {
  const std::string missing =
      "'" + std::string(obj.typeName()) + " object' has no attribute '" + std::string(name.substr(0, 64)) + "'";
  switch (obj.kind()) {
    case ValueKind::kUndefined:
      return undefinedError(obj);
    case ValueKind::kString:
      for (const auto& m : kStrMethods) {
        if (m.name == name) return Value::callable(m.id, obj);
      }
      return Value::undefined(missing);
    case ValueKind::kDict: {
      for (const auto& m : kDictMethods) {
        if (m.name == name) return Value::callable(m.id, obj);
      }
      for (std::string_view unsafe : kUnsafeDictMethods) {
        if (unsafe == name) return Value::undefined("access to attribute '" + std::string(name) + "' of 'dict' object is unsafe");
      }
      Value out;
      if (dictGet(obj, name, &out)) return out;
      return Value::undefined(missing);
    }
    case ValueKind::kNamespace:
      if (Value* v = obj.namespaceData()->find(name)) return *v;
      return Value::undefined(missing);
    case ValueKind::kLoop: {
      const LoopData& l = *obj.loopData();
      const auto n = static_cast<int64_t>(l.items->size());
      const auto i = static_cast<int64_t>(l.index0);
      if (name == "index0") return Value::integer(i, true);
      if (name == "index") return Value::integer(i + 1, true);
      if (name == "revindex") return Value::integer(n - i, true);
      if (name == "revindex0") return Value::integer(n - i - 1, true);
      if (name == "first") return Value::boolean(i == 0, true);
      if (name == "last") return Value::boolean(i == n - 1, true);
      if (name == "length") return Value::integer(n, true);
      if (name == "depth") return Value::integer(1, true);
      if (name == "depth0") return Value::integer(0, true);
      if (name == "previtem") return i > 0 ? (*l.items)[l.index0 - 1] : Value::undefined("there is no previous item");
      if (name == "nextitem") return i + 1 < n ? (*l.items)[l.index0 + 1] : Value::undefined("there is no next item");
      if (name == "cycle") return Value::callable(Builtin::kLoopCycle, obj);
      return Value::undefined(missing);
    }
    default:
      return Value::undefined(missing);
  }
}

Result<Value> getItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case ValueKind::kUndefined:
      return undefinedError(obj);
    case ValueKind::kDict: {
      if (key.isString()) {
        Value out;
        if (dictGet(obj, key.str(), &out)) return out;
        return getAttribute(obj, key.str());
      }
      return Value::undefined("'dict object' has no attribute " + std::string(key.typeName()));
    }
    case ValueKind::kList:
    case ValueKind::kString: {
      if (key.kind() == ValueKind::kInt || key.kind() == ValueKind::kBool) {
        if (obj.isString()) chargeBytes(obj.str().size());
        const size_t n = obj.isList() ? listSize(obj) : utf8::countCodePoints(obj.str());
        int64_t i = key.intValue();
        if (i < 0) i += static_cast<int64_t>(n);
        if (i < 0 || i >= static_cast<int64_t>(n)) {
          return Value::undefined("'" + std::string(obj.typeName()) + " object' has no element " +
                                  std::to_string(key.intValue()));
        }
        if (obj.isList()) return listAt(obj, static_cast<size_t>(i));
        const std::string_view s = obj.str();
        const size_t b = byteOffsetOfCodePoint(s, static_cast<size_t>(i));
        size_t e = b;
        utf8::decodeAt(s, e);
        StrBuilder out;
        out.appendSub(obj, b, e);
        return out.finish();
      }
      if (key.isString()) return getAttribute(obj, key.str());
      return Value::undefined("'" + std::string(obj.typeName()) + " object' has no element of type " +
                              std::string(key.typeName()));
    }
    default:
      if (key.isString()) return getAttribute(obj, key.str());
      return Value::undefined("'" + std::string(obj.typeName()) + " object' is not subscriptable");
  }
}

Result<Value> getSlice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.isUndefined()) return undefinedError(obj);
  if (!obj.isList() && !obj.isString()) {
    return Value::undefined("'" + std::string(obj.typeName()) + " object' is not subscriptable");
  }
  // Jinja2 turns a TypeError from a bad slice bound into Undefined, except
  // for an Undefined bound, which is an error.
  bool bad_bound = false;
  auto bound = [&](const Value& v) -> Result<std::optional<int64_t>> {
    if (v.isUndefined()) return invalidArgument("slice indices must be integers or None");
    if (v.isNone()) return std::optional<int64_t>();
    if (v.kind() == ValueKind::kInt || v.kind() == ValueKind::kBool) return std::optional<int64_t>(v.intValue());
    bad_bound = true;
    return std::optional<int64_t>();
  };
  LG_ASSIGN_OR_RETURN(auto b, bound(start));
  LG_ASSIGN_OR_RETURN(auto e, bound(stop));
  LG_ASSIGN_OR_RETURN(auto st, bound(step));
  if (bad_bound) return Value::undefined("slice indices must be integers or None");
  const int64_t stp = st.value_or(1);
  if (stp == 0) return invalidArgument("slice step cannot be zero");
  const bool is_str = obj.isString();
  if (is_str) chargeBytes(obj.str().size());  // the code point count and walk below
  LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  const auto n = static_cast<int64_t>(is_str ? utf8::countCodePoints(obj.str()) : listSize(obj));
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = stp < 0 ? -1 : 0;
    } else if (x >= n) {
      x = stp < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = clamp(b, stp < 0 ? n - 1 : 0);
  const int64_t hi = clamp(e, stp < 0 ? -1 : n);
  // A step longer than the sequence picks at most its first element: clamping
  // it keeps the index arithmetic below from overflowing.
  const int64_t step_abs = std::min<int64_t>(stp == INT64_MIN ? INT64_MAX : (stp < 0 ? -stp : stp), n + 1);
  const int64_t count = stp > 0 ? (hi > lo ? (hi - lo + step_abs - 1) / step_abs : 0)
                                : (lo > hi ? (lo - hi + step_abs - 1) / step_abs : 0);
  if (!is_str) {
    LG_JINJA_RETURN_IF_REFUSED(chargeItems(static_cast<size_t>(count)));
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) {
      items.push_back(listAt(obj, static_cast<size_t>(stp > 0 ? lo + k * step_abs : lo - k * step_abs)));
    }
    return Value::list(std::move(items), obj.isTuple());
  }
  // Strings: one pass over the code points (already charged as a scan), the
  // picked ones appended with their trust; no per-code-point tables.
  const std::string_view s = obj.str();
  StrBuilder out;
  if (count == 0) return out.finish();
  if (stp == 1) {
    const size_t begin = byteOffsetOfCodePoint(s, static_cast<size_t>(lo));
    const size_t end = begin + byteOffsetOfCodePoint(s.substr(begin), static_cast<size_t>(hi - lo));
    out.appendSub(obj, begin, end);
    return out.finish();
  }
  if (stp > 0) {
    size_t pos = 0;
    for (int64_t i = 0; i < hi && pos < s.size(); ++i) {
      const size_t begin = pos;
      utf8::decodeAt(s, pos);
      if (i >= lo && (i - lo) % step_abs == 0) out.appendSub(obj, begin, pos);
    }
  } else {
    size_t end = s.size();
    for (int64_t i = n - 1; i > hi && end > 0; --i) {
      size_t begin = end - 1;
      while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
      if (i <= lo && (lo - i) % step_abs == 0) out.appendSub(obj, begin, end);
      end = begin;
    }
  }
  LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  return out.finish();
}

Result<Value> applyFilter(FilterId id, const Value& subject, const CallArgs& args) {
  std::vector<std::optional<Value>> a;
  switch (id) {
    case FilterId::kLength: {
      LG_RETURN_IF_ERROR(bindArgs("length", args, {}, &a));
      LG_ASSIGN_OR_RETURN(size_t n, pyLen(subject));
      return Value::integer(static_cast<int64_t>(n), subject.isString() ? allBytesTrusted(subject) : deepTrusted(subject));
    }
    case FilterId::kTrim: {
      LG_RETURN_IF_ERROR(bindArgs("trim", args, {"chars"}, &a));
      LG_ASSIGN_OR_RETURN(Value s, toStrValue(subject));
      std::optional<std::string_view> chars;
      if (a[0] && !a[0]->isNone()) {
        LG_ASSIGN_OR_RETURN(chars, requireStr(*a[0], "trim"));
      }
      return pyStrip(s, chars, StripSide::kBoth);
    }
    case FilterId::kToJson:
      return filterToJson(subject, args);
    case FilterId::kFirst:
    case FilterId::kLast: {
      LG_RETURN_IF_ERROR(bindArgs(id == FilterId::kFirst ? "first" : "last", args, {}, &a));
      LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(subject));
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      return id == FilterId::kFirst ? items.front() : items.back();
    }
    case FilterId::kJoin: {
      LG_RETURN_IF_ERROR(bindArgs("join", args, {"d", "attribute"}, &a));
      return filterJoin(subject, a[0] ? *a[0] : Value::string("", true), a[1]);
    }
    case FilterId::kLower:
    case FilterId::kUpper:
    case FilterId::kCapitalize: {
      LG_RETURN_IF_ERROR(bindArgs("lower", args, {}, &a));
      LG_ASSIGN_OR_RETURN(Value s, toStrValue(subject));
      return pyCaseMap(s, id == FilterId::kLower ? CaseMap::kLower
                                                 : (id == FilterId::kUpper ? CaseMap::kUpper : CaseMap::kCapitalize));
    }
    case FilterId::kReplace: {
      LG_RETURN_IF_ERROR(bindArgs("replace", args, {"old", "new", "count"}, &a));
      if (!a[0] || !a[1]) return typeError("replace() missing required arguments 'old' and 'new'");
      LG_ASSIGN_OR_RETURN(Value s, toStrValue(subject));
      LG_ASSIGN_OR_RETURN(Value old_value, toStrValue(*a[0]));
      LG_ASSIGN_OR_RETURN(Value new_value, toStrValue(*a[1]));
      int64_t count = -1;
      if (a[2] && !a[2]->isNone()) {
        LG_ASSIGN_OR_RETURN(count, requireInt(*a[2], "replace count"));
      }
      return pyReplace(s, old_value, new_value, count);
    }
    case FilterId::kDefault: {
      LG_RETURN_IF_ERROR(bindArgs("default", args, {"default_value", "boolean"}, &a));
      const bool boolean = a[1] && a[1]->truthy();
      if (subject.isUndefined() || (boolean && !subject.truthy())) return a[0] ? *a[0] : Value::string("", true);
      return subject;
    }
    case FilterId::kString:
      LG_RETURN_IF_ERROR(bindArgs("string", args, {}, &a));
      return toStrValue(subject);
    case FilterId::kItems: {
      LG_RETURN_IF_ERROR(bindArgs("items", args, {}, &a));
      if (subject.isUndefined()) return Value::list({});
      if (!subject.isDict()) return typeError("Can only get item pairs from a mapping.");
      LG_JINJA_RETURN_IF_REFUSED(chargeItems(3 * dictSize(subject)));
      std::vector<Value> pairs;
      dictForEach(subject, [&](const Value& k, const Value& v) { pairs.push_back(Value::list({k, v}, true)); });
      return Value::list(std::move(pairs));
    }
    case FilterId::kList: {
      LG_RETURN_IF_ERROR(bindArgs("list", args, {}, &a));
      LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(subject));
      return Value::list(std::move(items));
    }
    case FilterId::kInt: {
      LG_RETURN_IF_ERROR(bindArgs("int", args, {"default", "base"}, &a));
      if (subject.isUndefined()) return undefinedError(subject);  // int(Undefined) raises
      const Value dflt = a[0] ? *a[0] : Value::integer(0, true);
      if (a[1] && !(a[1]->kind() == ValueKind::kInt && a[1]->intValue() == 10)) {
        return unimplemented("the int filter's base argument");
      }
      switch (subject.kind()) {
        case ValueKind::kBool:
        case ValueKind::kInt:
          return Value::integer(subject.intValue(), subject.trusted());
        case ValueKind::kFloat: {
          const double d = subject.floatValue();
          if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) return invalidArgument("cannot convert float to integer");
          return Value::integer(static_cast<int64_t>(std::trunc(d)), subject.trusted());
        }
        case ValueKind::kString: {
          if (auto n = parsePyInt(subject.str())) return Value::integer(*n, allBytesTrusted(subject));
          if (auto d = parsePyFloat(subject.str())) {
            if (std::isnan(*d) || std::isinf(*d) || std::fabs(*d) >= 9.2e18) return invalidArgument("cannot convert float to integer");
            return Value::integer(static_cast<int64_t>(std::trunc(*d)), allBytesTrusted(subject));
          }
          return dflt;
        }
        default:
          return dflt;
      }
    }
    case FilterId::kFloat: {
      LG_RETURN_IF_ERROR(bindArgs("float", args, {"default"}, &a));
      if (subject.isUndefined()) return undefinedError(subject);
      const Value dflt = a[0] ? *a[0] : Value::floating(0.0, true);
      if (subject.isNumber()) return Value::floating(subject.floatValue(), subject.trusted());
      if (subject.isString()) {
        if (auto d = parsePyFloat(subject.str())) return Value::floating(*d, allBytesTrusted(subject));
      }
      return dflt;
    }
    case FilterId::kAbs:
      LG_RETURN_IF_ERROR(bindArgs("abs", args, {}, &a));
      if (subject.kind() == ValueKind::kFloat) return Value::floating(std::fabs(subject.floatValue()), subject.trusted());
      if (subject.kind() == ValueKind::kInt || subject.kind() == ValueKind::kBool) {
        if (subject.intValue() == INT64_MIN) return invalidArgument("integer overflow");
        return Value::integer(std::llabs(subject.intValue()), subject.trusted());
      }
      return typeError("bad operand type for abs(): '" + std::string(subject.typeName()) + "'");
    case FilterId::kReverse: {
      LG_RETURN_IF_ERROR(bindArgs("reverse", args, {}, &a));
      LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(subject));
      LG_JINJA_RETURN_IF_REFUSED(chargeItems(items.size()));
      if (subject.isString()) {
        StrBuilder out;
        for (auto it = items.rbegin(); it != items.rend(); ++it) out.appendStr(*it);
        return out.finish();
      }
      return Value::list(std::vector<Value>(items.rbegin(), items.rend()));
    }
    case FilterId::kSafe:
      LG_RETURN_IF_ERROR(bindArgs("safe", args, {}, &a));
      return subject;
  }
  return internalError("unknown filter");
}

Result<bool> applyTest(TestId id, const Value& v, const CallArgs& args) {
  std::vector<std::optional<Value>> a;
  const ValueKind k = v.kind();
  auto needArg = [&](std::string_view name) -> Status {
    LG_RETURN_IF_ERROR(bindArgs(name, args, {"other"}, &a));
    if (!a[0]) return typeError(std::string(name) + "() missing required argument");
    return Status::ok();
  };
  switch (id) {
    case TestId::kDefined: return k != ValueKind::kUndefined;
    case TestId::kUndefined: return k == ValueKind::kUndefined;
    case TestId::kNone: return k == ValueKind::kNone;
    case TestId::kBoolean: return k == ValueKind::kBool;
    case TestId::kFalse: return k == ValueKind::kBool && !v.boolValue();
    case TestId::kTrue: return k == ValueKind::kBool && v.boolValue();
    case TestId::kInteger: return k == ValueKind::kInt;
    case TestId::kFloat: return k == ValueKind::kFloat;
    case TestId::kNumber: return v.isNumber();
    case TestId::kString: return k == ValueKind::kString;
    case TestId::kMapping: return k == ValueKind::kDict;
    case TestId::kIterable:
      return k == ValueKind::kString || k == ValueKind::kList || k == ValueKind::kDict || k == ValueKind::kUndefined ||
             k == ValueKind::kLoop;
    case TestId::kSequence:
      return k == ValueKind::kString || k == ValueKind::kList || k == ValueKind::kDict || k == ValueKind::kUndefined;
    case TestId::kCallable: return k == ValueKind::kCallable || k == ValueKind::kUndefined;
    case TestId::kSameAs: {
      LG_RETURN_IF_ERROR(needArg("sameas"));
      const Value& o = *a[0];
      if (k != o.kind()) return false;
      if (k == ValueKind::kNone) return true;
      if (k == ValueKind::kBool) return v.boolValue() == o.boolValue();
      if (k == ValueKind::kInt) return v.intValue() == o.intValue() && v.intValue() >= -5 && v.intValue() <= 256;
      if (k == ValueKind::kNamespace) return v.namespaceData() == o.namespaceData();
      return false;
    }
    case TestId::kEq: LG_RETURN_IF_ERROR(needArg("eq")); return pyEquals(v, *a[0]);
    case TestId::kNe: LG_RETURN_IF_ERROR(needArg("ne")); return !pyEquals(v, *a[0]);
    case TestId::kLt: LG_RETURN_IF_ERROR(needArg("lt")); return pyLess(v, *a[0]);
    case TestId::kGt: LG_RETURN_IF_ERROR(needArg("gt")); return pyLess(*a[0], v);
    case TestId::kLe: {
      LG_RETURN_IF_ERROR(needArg("le"));
      LG_ASSIGN_OR_RETURN(bool gt, pyLess(*a[0], v));
      return !gt;
    }
    case TestId::kGe: {
      LG_RETURN_IF_ERROR(needArg("ge"));
      LG_ASSIGN_OR_RETURN(bool lt, pyLess(v, *a[0]));
      return !lt;
    }
    case TestId::kIn: {
      LG_RETURN_IF_ERROR(needArg("in"));
      const Value& seq = *a[0];
      if (seq.isString()) {
        if (!v.isString()) return typeError("'in <string>' requires string as left operand");
        chargeBytes(seq.str().size());
        return seq.str().find(v.str()) != std::string_view::npos;
      }
      if (seq.isDict()) {
        Value ignored;
        return v.isString() && dictGet(seq, v.str(), &ignored);
      }
      LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq));
      for (const Value& item : items) {
        if (pyEquals(item, v)) return true;
      }
      return false;
    }
    case TestId::kEven:
    case TestId::kOdd: {
      LG_RETURN_IF_ERROR(bindArgs("even", args, {}, &a));
      LG_ASSIGN_OR_RETURN(int64_t n, requireInt(v, "even/odd"));
      return (((n % 2) + 2) % 2 == 0) == (id == TestId::kEven);
    }
    case TestId::kDivisibleBy: {
      LG_RETURN_IF_ERROR(needArg("divisibleby"));
      LG_ASSIGN_OR_RETURN(int64_t n, requireInt(v, "divisibleby"));
      LG_ASSIGN_OR_RETURN(int64_t d, requireInt(*a[0], "divisibleby"));
      if (d == 0) return invalidArgument("integer division or modulo by zero");
      if (d == -1) return true;
      return n % d == 0;
    }
    case TestId::kLower:
    case TestId::kUpper: {
      LG_RETURN_IF_ERROR(bindArgs("lower", args, {}, &a));
      LG_ASSIGN_OR_RETURN(Value s, toStrValue(v));
      const std::string_view text = s.str();
      chargeBytes(text.size());
      bool cased = false;
      size_t p = 0;
      while (p < text.size()) {
        const char32_t cp = utf8::decodeAt(text, p);
        const bool is_lower = toUpperCp(cp) != cp, is_upper = toLowerCp(cp) != cp;
        if ((id == TestId::kLower && is_upper) || (id == TestId::kUpper && is_lower)) return false;
        cased = cased || is_lower || is_upper;
      }
      return cased;
    }
  }
  return internalError("unknown test");
}

}  // namespace lg::text::jinja

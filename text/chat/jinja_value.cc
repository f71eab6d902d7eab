#include "text/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/chat/unicode_util.h"

namespace lg::text::jinja {

using nlohmann::json;

namespace {

const std::string& emptyString() {
  static const std::string kEmpty;
  return kEmpty;
}

Status tooDeep() { return invalidArgument("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels"); }

// The longest string the installed budget allows (no limit without one).
size_t maxStringBytes() {
  const RenderBudget* b = detail::t_render_budget;
  return b != nullptr ? b->limits().max_output_bytes : SIZE_MAX;
}

}  // namespace

namespace detail {
thread_local RenderBudget* t_render_budget = nullptr;
}  // namespace detail

// ---- Render budget -----------------------------------------------------------------

RenderBudget::RenderBudget(const RenderLimits& limits)
    : limits_(limits),
      previous_(detail::t_render_budget),
      string_room_(limits.max_output_bytes),
      copy_room_(limits.max_copied_bytes) {
  detail::t_render_budget = this;
}

RenderBudget::~RenderBudget() { detail::t_render_budget = previous_; }

Status RenderBudget::stringTooLong(uint64_t size) const {
  return resourceExhausted("chat template render exceeded max_output_bytes: a string of " + std::to_string(size) +
                           " bytes is over the limit of " + std::to_string(limits_.max_output_bytes));
}

Status RenderBudget::copiedTooMuch(uint64_t total) const {
  return resourceExhausted("chat template render exceeded max_copied_bytes: its string and list operations would copy, "
                           "allocate or scan " + std::to_string(total) + " bytes, over the limit of " +
                           std::to_string(limits_.max_copied_bytes));
}

void RenderBudget::fail(Status error) {
  if (!error_.isOk()) return;
  error_ = std::move(error);
  string_room_ = 0;
  copy_room_ = copied_;
}

bool RenderBudget::admitStringSlow(size_t size, size_t add, size_t extra) {
  if (!error_.isOk()) return false;
  if (add > limits_.max_output_bytes || size > limits_.max_output_bytes - add) {
    fail(stringTooLong(static_cast<uint64_t>(size) + add));
    return false;
  }
  return admitBytes(static_cast<uint64_t>(add) + extra);
}

bool RenderBudget::admitBytesSlow(uint64_t bytes) {
  if (!error_.isOk()) return false;
  fail(copiedTooMuch(copied_ + std::min<uint64_t>(bytes, UINT64_MAX - copied_)));
  return false;
}

bool RenderBudget::precheck(uint64_t size, uint64_t copy) {
  if (!error_.isOk()) return false;
  if (size > limits_.max_output_bytes) {
    fail(stringTooLong(size));
    return false;
  }
  if (copy > copy_room_ - copied_) {
    fail(copiedTooMuch(copied_ + std::min<uint64_t>(copy, UINT64_MAX - copied_)));
    return false;
  }
  return true;
}

bool RenderBudget::countIteration() {
  if (!error_.isOk()) return false;
  if (++iterations_ > limits_.max_loop_iterations) {
    fail(resourceExhausted("chat template render exceeded max_loop_iterations: more than " +
                           std::to_string(limits_.max_loop_iterations) + " loop iterations"));
    return false;
  }
  return true;
}

Status budgetStatus() {
  const RenderBudget* b = detail::t_render_budget;
  return b != nullptr ? b->status() : Status::ok();
}

bool chargeItems(size_t n) {
  RenderBudget* b = detail::t_render_budget;
  if (b == nullptr || n == 0) return true;
  if (n > UINT64_MAX / sizeof(Value)) return b->precheck(0, UINT64_MAX);
  return b->admitBytes(static_cast<uint64_t>(n) * sizeof(Value));
}

// ---- Construction ---------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none(bool trusted) {
  Value v;
  v.kind_ = ValueKind::kNone;
  v.trusted_ = trusted;
  return v;
}

Value Value::boolean(bool b, bool trusted) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.trusted_ = trusted;
  v.u_.b = b;
  return v;
}

Value Value::integer(int64_t i, bool trusted) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.trusted_ = trusted;
  v.u_.i = i;
  return v;
}

Value Value::floating(double d, bool trusted) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.trusted_ = trusted;
  v.u_.f = d;
  return v;
}

Value Value::string(std::string text, bool trusted) {
  auto rep = std::make_shared<StrRep>();
  rep->text = std::move(text);
  if (trusted && !rep->text.empty()) rep->trusted.push_back({0, rep->text.size()});
  return string(std::move(rep));
}

Value Value::string(std::shared_ptr<const StrRep> rep) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.ptr_ = std::const_pointer_cast<StrRep>(std::move(rep));
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  Value v;
  v.kind_ = ValueKind::kList;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::range(std::vector<Value> items, int64_t start, int64_t stop, int64_t step) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->range = true;
  data->range_start = start;
  data->range_stop = stop;
  data->range_step = step;
  Value v;
  v.kind_ = ValueKind::kList;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  auto data = std::make_shared<DictData>();
  data->items = std::move(items);
  Value v;
  v.kind_ = ValueKind::kDict;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::namespaceObject(std::shared_ptr<NamespaceData> ns) {
  Value v;
  v.kind_ = ValueKind::kNamespace;
  v.trusted_ = true;
  v.ptr_ = std::move(ns);
  return v;
}

Value Value::callable(Builtin id) { return callable(id, Value()); }

Value Value::callable(Builtin id, Value self) {
  auto data = std::make_shared<CallableData>();
  data->id = id;
  data->self = std::move(self);
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::loop(std::shared_ptr<LoopData> loop) {
  Value v;
  v.kind_ = ValueKind::kLoop;
  v.trusted_ = true;
  v.ptr_ = std::move(loop);
  return v;
}

Value Value::fromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return none(false);
    case nlohmann::json::value_t::boolean:
      return boolean(j.get<bool>(), false);
    case nlohmann::json::value_t::number_integer:
      return integer(j.get<int64_t>(), false);
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      // Python keeps big integers exact; int64 cannot, so the rare value above
      // INT64_MAX degrades to a float (documented).
      if (u <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(u), false);
      return floating(static_cast<double>(u), false);
    }
    case nlohmann::json::value_t::number_float:
      return floating(j.get<double>(), false);
    case nlohmann::json::value_t::string: {
      Value v;
      v.kind_ = ValueKind::kString;
      v.json_ = &j;
      return v;
    }
    case nlohmann::json::value_t::array: {
      Value v;
      v.kind_ = ValueKind::kList;
      v.json_ = &j;
      return v;
    }
    case nlohmann::json::value_t::object: {
      Value v;
      v.kind_ = ValueKind::kDict;
      v.json_ = &j;
      return v;
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  return none(false);
}

bool Value::isTuple() const {
  return kind_ == ValueKind::kList && json_ == nullptr && static_cast<const ListData*>(ptr_.get())->is_tuple;
}

const std::vector<ByteRange>* Value::strTrusted() const {
  if (kind_ != ValueKind::kString || json_ != nullptr) return nullptr;
  const auto* rep = static_cast<const StrRep*>(ptr_.get());
  return rep->trusted.empty() ? nullptr : &rep->trusted;
}

const std::string& Value::undefinedHint() const {
  if (kind_ != ValueKind::kUndefined || !ptr_) return emptyString();
  return *static_cast<const std::string*>(ptr_.get());
}

const ListData* Value::listData() const {
  return kind_ == ValueKind::kList && json_ == nullptr ? static_cast<const ListData*>(ptr_.get()) : nullptr;
}
const DictData* Value::dictData() const {
  return kind_ == ValueKind::kDict && json_ == nullptr ? static_cast<const DictData*>(ptr_.get()) : nullptr;
}
NamespaceData* Value::namespaceData() const {
  return kind_ == ValueKind::kNamespace ? static_cast<NamespaceData*>(ptr_.get()) : nullptr;
}
const CallableData* Value::callableData() const {
  return kind_ == ValueKind::kCallable ? static_cast<const CallableData*>(ptr_.get()) : nullptr;
}
LoopData* Value::loopData() const {
  return kind_ == ValueKind::kLoop ? static_cast<LoopData*>(ptr_.get()) : nullptr;
}

StrRep* Value::uniqueStr() {
  if (kind_ != ValueKind::kString || json_ != nullptr || ptr_.use_count() != 1) return nullptr;
  return static_cast<StrRep*>(ptr_.get());
}

ListData* Value::uniqueList() {
  if (kind_ != ValueKind::kList || json_ != nullptr || ptr_.use_count() != 1) return nullptr;
  auto* data = static_cast<ListData*>(ptr_.get());
  return data->range ? nullptr : data;
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return u_.b;
    case ValueKind::kInt:
      return u_.i != 0;
    case ValueKind::kFloat:
      return u_.f != 0.0;
    case ValueKind::kString:
      return !str().empty();
    case ValueKind::kList:
      return listSize(*this) != 0;
    case ValueKind::kDict:
      return dictSize(*this) != 0;
    default:
      return true;
  }
}

std::string_view Value::typeName() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "str";
    case ValueKind::kList: return isTuple() ? "tuple" : "list";
    case ValueKind::kDict: return "dict";
    case ValueKind::kNamespace: return "Namespace";
    case ValueKind::kCallable: return "builtin_function_or_method";
    case ValueKind::kLoop: return "LoopContext";
  }
  return "object";
}

Value* NamespaceData::find(std::string_view name) {
  for (auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

// ---- Collections ------------------------------------------------------------------

size_t listSize(const Value& v) {
  if (v.json() != nullptr) return v.json()->size();
  const ListData* d = v.listData();
  return d ? d->items.size() : 0;
}

Value listAt(const Value& v, size_t i) {
  if (v.json() != nullptr) return Value::fromJson((*v.json())[i]);
  return v.listData()->items[i];
}

size_t dictSize(const Value& v) {
  if (v.json() != nullptr) return v.json()->size();
  const DictData* d = v.dictData();
  return d ? d->items.size() : 0;
}

bool dictGet(const Value& v, std::string_view key, Value* out) {
  if (const json* j = v.json(); j != nullptr && j->is_object()) {
    auto it = j->find(key);
    if (it == j->end()) return false;
    *out = Value::fromJson(*it);
    return true;
  }
  if (const DictData* d = v.dictData()) {
    // Later duplicates win, as in a Python dict literal.
    for (auto it = d->items.rbegin(); it != d->items.rend(); ++it) {
      if (it->first.str() == key) {
        *out = it->second;
        return true;
      }
    }
  }
  return false;
}

void dictForEach(const Value& v, const std::function<void(const Value&, const Value&)>& fn) {
  if (const json* j = v.json(); j != nullptr && j->is_object()) {
    for (auto it = j->begin(); it != j->end(); ++it) {
      fn(Value::string(it.key(), false), Value::fromJson(*it));
    }
    return;
  }
  if (const DictData* d = v.dictData()) {
    // A key repeated in a literal keeps its first position and last value.
    for (size_t i = 0; i < d->items.size(); ++i) {
      bool seen = false;
      for (size_t k = 0; k < i && !seen; ++k) seen = d->items[k].first.str() == d->items[i].first.str();
      if (seen) continue;
      Value value;
      dictGet(v, d->items[i].first.str(), &value);
      fn(d->items[i].first, value);
    }
  }
}

Result<std::vector<Value>> iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return out;
    case ValueKind::kList: {
      const size_t n = listSize(v);
      LG_JINJA_RETURN_IF_REFUSED(chargeItems(n));
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) out.push_back(listAt(v, i));
      return out;
    }
    case ValueKind::kDict:
      LG_JINJA_RETURN_IF_REFUSED(chargeItems(dictSize(v)));
      out.reserve(dictSize(v));
      dictForEach(v, [&](const Value& k, const Value&) { out.push_back(k); });
      return out;
    case ValueKind::kString: {
      const std::string_view s = v.str();
      LG_JINJA_RETURN_IF_REFUSED(chargeItems(utf8::countCodePoints(s)));
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t begin = pos;
        utf8::decodeAt(s, pos);
        StrBuilder b;
        b.appendSub(v, begin, pos);
        out.push_back(b.finish());
      }
      return out;
    }
    default:
      return invalidArgument("'" + std::string(v.typeName()) + "' object is not iterable");
  }
}

// ---- Strings with trust ------------------------------------------------------------

StrBuilder StrBuilder::take(Value&& s) {
  StrBuilder out;
  if (StrRep* rep = s.uniqueStr()) {
    out.rep_ = std::move(*rep);  // sole owner: continue its buffer, no copy
  } else {
    out.appendStr(s);
  }
  s = Value();
  return out;
}

void StrBuilder::append(std::string_view s, bool trusted) {
  if (s.empty()) return;
  const size_t begin = rep_.text.size();
  const bool extends = !rep_.trusted.empty() && rep_.trusted.back().end == begin;
  if (RenderBudget* budget = detail::t_render_budget) {
    if (!budget->admitString(begin, s.size(), trusted && !extends ? sizeof(ByteRange) : 0)) return;
  }
  rep_.text.append(s);
  if (!trusted) return;
  if (extends) {
    rep_.trusted.back().end = rep_.text.size();
  } else {
    rep_.trusted.push_back({begin, rep_.text.size()});
  }
}

void forEachTrustRun(const Value& s, size_t begin, size_t end,
                     const std::function<void(size_t, size_t, bool)>& fn) {
  if (begin >= end) return;
  const std::vector<ByteRange>* trusted = s.strTrusted();
  if (trusted == nullptr) {
    fn(begin, end, false);
    return;
  }
  size_t pos = begin;
  for (const ByteRange& r : *trusted) {
    if (r.end <= pos) continue;
    if (r.begin >= end) break;
    const size_t tb = std::max(r.begin, pos);
    const size_t te = std::min(r.end, end);
    if (tb > pos) fn(pos, tb, false);
    fn(tb, te, true);
    pos = te;
  }
  if (pos < end) fn(pos, end, false);
}

void StrBuilder::appendSub(const Value& s, size_t begin, size_t end) {
  const std::string_view text = s.str();
  forEachTrustRun(s, begin, end, [&](size_t b, size_t e, bool t) { append(text.substr(b, e - b), t); });
}

Value StrBuilder::finish() {
  auto rep = std::make_shared<StrRep>(std::move(rep_));
  rep_ = StrRep();
  return Value::string(std::move(rep));
}

bool allBytesTrusted(const Value& s) {
  const std::vector<ByteRange>* trusted = s.strTrusted();
  if (s.str().empty()) return true;
  return trusted != nullptr && trusted->size() == 1 && trusted->front().begin == 0 &&
         trusted->front().end == s.str().size();
}

bool deepTrusted(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return false;
  switch (v.kind()) {
    case ValueKind::kString:
      return allBytesTrusted(v);
    case ValueKind::kList: {
      if (v.json() != nullptr) return false;  // request data
      for (const Value& item : v.listData()->items) {
        if (!deepTrusted(item, depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      if (v.json() != nullptr) return false;
      for (const auto& [k, item] : v.dictData()->items) {
        if (!deepTrusted(k, depth + 1) || !deepTrusted(item, depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
    case ValueKind::kLoop:
    case ValueKind::kCallable:
    case ValueKind::kUndefined:
      return true;
    default:
      return v.trusted();
  }
}

std::string pyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!s.empty() && s[0] == '-') {
    out.push_back('-');
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  const int decpt = exp + 1;
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= ndigits) {
      out += digits;
      out.append(static_cast<size_t>(decpt - ndigits), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += ebuf;
  }
  return out;
}

namespace {

void appendHexEscape(std::string& out, char32_t cp) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
  }
  out += buf;
}

// Python repr(str): the quoted, escaped text. Trust is decided by the caller.
// Escapes make it up to 4 times longer than `s`: it stops once longer than
// the budget's string limit (the append that follows then refuses it).
std::string pyStrRepr(std::string_view s) {
  const size_t max_bytes = maxStringBytes();
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size() && out.size() <= max_bytes) {
    const size_t begin = pos;
    const char32_t cp = utf8::decodeAt(s, pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!isPyPrintable(cp)) {
      appendHexEscape(out, cp);
    } else {
      out.append(s.substr(begin, pos - begin));
    }
  }
  out += quote;
  return out;
}

}  // namespace

Status appendPyStr(const Value& v, StrBuilder& out) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return Status::ok();
    case ValueKind::kString:
      out.appendStr(v);
      return Status::ok();
    default:
      return appendPyRepr(v, out, 0);
  }
}

Status appendPyRepr(const Value& v, StrBuilder& out, int depth) {
  if (depth > kMaxValueDepth) return tooDeep();
  // Containers render with one trust for the whole text: trusted only when
  // everything inside is (their punctuation is then template-made too).
  switch (v.kind()) {
    case ValueKind::kUndefined:
      out.append("Undefined", true);  // repr(); str() of Undefined is empty
      return Status::ok();
    case ValueKind::kNone:
      out.append("None", v.trusted());
      return Status::ok();
    case ValueKind::kBool:
      out.append(v.boolValue() ? "True" : "False", v.trusted());
      return Status::ok();
    case ValueKind::kInt:
      out.append(std::to_string(v.intValue()), v.trusted());
      return Status::ok();
    case ValueKind::kFloat:
      out.append(pyFloatRepr(v.floatValue()), v.trusted());
      return Status::ok();
    case ValueKind::kString:
      out.append(pyStrRepr(v.str()), allBytesTrusted(v));
      return Status::ok();
    case ValueKind::kList: {
      const bool trusted = deepTrusted(v, depth);
      if (const ListData* d = v.listData(); d != nullptr && d->range) {
        std::string text = "range(" + std::to_string(d->range_start) + ", " + std::to_string(d->range_stop);
        if (d->range_step != 1) text += ", " + std::to_string(d->range_step);
        out.append(text + ")", trusted);
        return Status::ok();
      }
      const bool tuple = v.isTuple();
      const size_t n = listSize(v);
      out.append(tuple ? "(" : "[", trusted);
      for (size_t i = 0; i < n; ++i) {
        if (i > 0) out.append(", ", trusted);
        StrBuilder item;
        LG_RETURN_IF_ERROR(appendPyRepr(listAt(v, i), item, depth + 1));
        Value s = item.finish();
        out.append(s.str(), trusted);
      }
      if (tuple && n == 1) out.append(",", trusted);
      out.append(tuple ? ")" : "]", trusted);
      return Status::ok();
    }
    case ValueKind::kDict: {
      const bool trusted = deepTrusted(v, depth);
      out.append("{", trusted);
      bool first = true;
      Status status;
      dictForEach(v, [&](const Value& k, const Value& item) {
        if (!status.isOk()) return;
        if (!first) out.append(", ", trusted);
        first = false;
        out.append(pyStrRepr(k.str()), trusted);
        out.append(": ", trusted);
        StrBuilder b;
        status = appendPyRepr(item, b, depth + 1);
        out.append(b.finish().str(), trusted);
      });
      LG_RETURN_IF_ERROR(status);
      out.append("}", trusted);
      return Status::ok();
    }
    case ValueKind::kNamespace: {
      StrBuilder attrs;
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [k, item] : v.namespaceData()->attrs) items.emplace_back(Value::string(k, true), item);
      LG_RETURN_IF_ERROR(appendPyRepr(Value::dict(std::move(items)), attrs, depth + 1));
      Value s = attrs.finish();
      const bool trusted = allBytesTrusted(s);
      out.append("<Namespace ", trusted);
      out.append(s.str(), trusted);
      out.append(">", trusted);
      return Status::ok();
    }
    case ValueKind::kLoop: {
      const LoopData* loop = v.loopData();
      out.append("<LoopContext " + std::to_string(loop->index0 + 1) + "/" + std::to_string(loop->items->size()) + ">",
                 true);
      return Status::ok();
    }
    case ValueKind::kCallable:
      return invalidArgument("cannot convert a function to a string");
  }
  return Status::ok();
}

// ---- JSON dump (Python json.dumps) ---------------------------------------------------

namespace {

// Stops early once `out` is longer than `limit` (the caller then fails).
void appendJsonString(std::string& out, std::string_view s, bool ensure_ascii, size_t limit) {
  out += '"';
  size_t pos = 0;
  while (pos < s.size() && out.size() <= limit) {
    const size_t begin = pos;
    const char32_t cp = utf8::decodeAt(s, pos);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.append(s.substr(begin, pos - begin));
    }
  }
  out += '"';
}

// `limit`: the longest string the render allows; the dump is refused as soon
// as it grows past it, before the budget sees it (it is charged when appended).
Status dumpJson(const Value& v, const JsonDumpOptions& o, int depth, size_t limit, std::string& out) {
  if (depth > kMaxValueDepth) return tooDeep();
  if (out.size() > limit) {
    return resourceExhausted("chat template render exceeded max_output_bytes: tojson output over the limit of " +
                             std::to_string(limit) + " bytes");
  }
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < level && out.size() <= limit; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case ValueKind::kNone:
      out += "null";
      return Status::ok();
    case ValueKind::kBool:
      out += v.boolValue() ? "true" : "false";
      return Status::ok();
    case ValueKind::kInt:
      out += std::to_string(v.intValue());
      return Status::ok();
    case ValueKind::kFloat: {
      const double d = v.floatValue();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += pyFloatRepr(d);
      }
      return Status::ok();
    }
    case ValueKind::kString:
      appendJsonString(out, v.str(), o.ensure_ascii, limit);
      return Status::ok();
    case ValueKind::kList: {
      const size_t n = listSize(v);
      if (n == 0) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < n; ++i) {
        if (i > 0) out += o.item_separator;
        newline(depth + 1);
        LG_RETURN_IF_ERROR(dumpJson(listAt(v, i), o, depth + 1, limit, out));
      }
      newline(depth);
      out += ']';
      return Status::ok();
    }
    case ValueKind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      dictForEach(v, [&](const Value& k, const Value& item) { items.emplace_back(k, item); });
      if (items.empty()) {
        out += "{}";
        return Status::ok();
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first.str() < b.first.str(); });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += o.item_separator;
        newline(depth + 1);
        appendJsonString(out, items[i].first.str(), o.ensure_ascii, limit);
        out += o.key_separator;
        LG_RETURN_IF_ERROR(dumpJson(items[i].second, o, depth + 1, limit, out));
      }
      newline(depth);
      out += '}';
      return Status::ok();
    }
    default:
      return invalidArgument("Object of type " + std::string(v.typeName()) + " is not JSON serializable");
  }
}

}  // namespace

Status appendJsonDump(const Value& v, const JsonDumpOptions& options, StrBuilder& out) {
  std::string text;
  const size_t limit = maxStringBytes();
  LG_RETURN_IF_ERROR(dumpJson(v, options, 0, limit, text));
  if (text.size() > limit) {
    return resourceExhausted("chat template render exceeded max_output_bytes: tojson output over the limit of " +
                             std::to_string(limit) + " bytes");
  }
  out.append(text, deepTrusted(v));
  LG_JINJA_RETURN_IF_REFUSED(budgetOk());
  return Status::ok();
}

// ---- Python operators ---------------------------------------------------------------

namespace {

// Exact int/float comparison as Python does it (no rounding of the int).
int compareIntFloat(int64_t i, double f) {
  if (std::isnan(f)) return 2;  // unordered
  if (f >= 9.3e18) return -1;
  if (f <= -9.3e18) return 1;
  const double fi = std::floor(f);
  const auto fl = static_cast<int64_t>(fi);
  if (i < fl) return -1;
  if (i > fl) return 1;
  return f > fi ? -1 : 0;
}

int compareNumbers(const Value& a, const Value& b) {
  const bool af = a.kind() == ValueKind::kFloat, bf = b.kind() == ValueKind::kFloat;
  if (!af && !bf) {
    const int64_t x = a.intValue(), y = b.intValue();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (af && bf) {
    const double x = a.floatValue(), y = b.floatValue();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (af) {
    const int c = compareIntFloat(b.intValue(), a.floatValue());
    return c == 2 ? 2 : -c;
  }
  return compareIntFloat(a.intValue(), b.floatValue());
}

}  // namespace

bool pyEquals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return false;
  if (a.isNumber() && b.isNumber()) return compareNumbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      if (a.str().size() != b.str().size()) return false;
      chargeBytes(a.str().size());
      return a.str() == b.str();
    case ValueKind::kList: {
      if (a.isTuple() != b.isTuple()) return false;
      const size_t n = listSize(a);
      if (n != listSize(b)) return false;
      for (size_t i = 0; i < n; ++i) {
        if (!pyEquals(listAt(a, i), listAt(b, i), depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      if (dictSize(a) != dictSize(b)) return false;
      bool equal = true;
      dictForEach(a, [&](const Value& k, const Value& item) {
        if (!equal) return;
        Value other;
        equal = dictGet(b, k.str(), &other) && pyEquals(item, other, depth + 1);
      });
      return equal;
    }
    case ValueKind::kNamespace:
      return a.namespaceData() == b.namespaceData();
    case ValueKind::kLoop:
      return a.loopData() == b.loopData();
    default:
      return false;
  }
}

Result<bool> pyLess(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return tooDeep();
  if (a.isNumber() && b.isNumber()) return compareNumbers(a, b) == -1;
  if (a.isString() && b.isString()) {
    chargeBytes(std::min(a.str().size(), b.str().size()));
    return a.str() < b.str();
  }
  if (a.isList() && b.isList() && a.isTuple() == b.isTuple()) {
    const size_t n = std::min(listSize(a), listSize(b));
    for (size_t i = 0; i < n; ++i) {
      Value x = listAt(a, i), y = listAt(b, i);
      if (!pyEquals(x, y, depth + 1)) return pyLess(x, y, depth + 1);
    }
    return listSize(a) < listSize(b);
  }
  return invalidArgument("'<' not supported between instances of '" + std::string(a.typeName()) + "' and '" +
                         std::string(b.typeName()) + "'");
}

}  // namespace lg::text::jinja

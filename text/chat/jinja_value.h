// Runtime values of the chat template interpreter.
//
// A Value mirrors the Python object Jinja2 would see: Undefined, None, bool,
// int, float, str, list/tuple, dict, Namespace, a bound built-in function or
// a loop context. Values are immutable (the sandbox forbids mutating lists and
// dicts) except Namespace attributes, so copies share their payload.
//
// Request data is not copied into Values: a message dict, list or string is a
// pointer into the caller's nlohmann::json, which must outlive the render.
//
// Trust: every string carries the byte ranges that came from the template
// itself (or the bos/eos variables); scalars carry one trusted bit. Operations
// derive the trust of their results from their operands (see StrBuilder).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "text/prompt_text.h"

namespace lg::text::jinja {

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list or tuple (template-built or a JSON array)
  kDict,  // template-built dict or a JSON object
  kNamespace,
  kCallable,
  kLoop,
};

// Built-in functions a Callable value can stand for. Methods are bound to
// their receiver (Value::callableSelf()).
enum class Builtin : uint8_t {
  kNamespace,
  kRange,
  kDict,
  kRaiseException,
  kStrSplit,
  kStrRsplit,
  kStrStrip,
  kStrLstrip,
  kStrRstrip,
  kStrStartswith,
  kStrEndswith,
  kStrReplace,
  kStrLower,
  kStrUpper,
  kStrCapitalize,
  kStrFind,
  kStrCount,
  kStrJoin,
  kDictGet,
  kDictItems,
  kDictKeys,
  kDictValues,
  kLoopCycle,
};

struct StrRep {
  std::string text;
  std::vector<ByteRange> trusted;  // sorted, disjoint, non-empty, within text
};

class Value;
struct ListData;
struct DictData;
struct NamespaceData;
struct CallableData;
struct LoopData;

class Value {
 public:
  Value() = default;  // Undefined

  static Value undefined(std::string hint = {});
  static Value none(bool trusted = false);
  static Value boolean(bool b, bool trusted = false);
  static Value integer(int64_t i, bool trusted = false);
  static Value floating(double d, bool trusted = false);
  static Value string(std::string text, bool trusted);
  static Value string(std::shared_ptr<const StrRep> rep);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  // range(start, stop, step): a list that prints as Python's range object.
  static Value range(std::vector<Value> items, int64_t start, int64_t stop, int64_t step);
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value namespaceObject(std::shared_ptr<NamespaceData> ns);
  static Value callable(Builtin id);
  static Value callable(Builtin id, Value self);
  static Value loop(std::shared_ptr<LoopData> loop);
  // Wraps a JSON node without copying it; `j` must outlive the Value.
  static Value fromJson(const nlohmann::json& j);

  ValueKind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == ValueKind::kUndefined; }
  bool isNone() const { return kind_ == ValueKind::kNone; }
  bool isString() const { return kind_ == ValueKind::kString; }
  bool isList() const { return kind_ == ValueKind::kList; }
  bool isDict() const { return kind_ == ValueKind::kDict; }
  // bool, int or float (Python's numbers.Number; bool is an int subclass).
  bool isNumber() const {
    return kind_ == ValueKind::kBool || kind_ == ValueKind::kInt || kind_ == ValueKind::kFloat;
  }
  bool isTuple() const;

  // Scalar provenance: true for template literals and values derived only from them.
  bool trusted() const { return trusted_; }
  bool boolValue() const { return u_.b; }
  int64_t intValue() const { return kind_ == ValueKind::kBool ? (u_.b ? 1 : 0) : u_.i; }
  double floatValue() const { return kind_ == ValueKind::kFloat ? u_.f : static_cast<double>(intValue()); }

  // kString: the text, and its trusted ranges (nullptr when wholly untrusted).
  std::string_view str() const;
  const std::vector<ByteRange>* strTrusted() const;

  // kUndefined: what was looked up, for error messages.
  const std::string& undefinedHint() const;

  // kList / kDict: the JSON node backing it, or nullptr for template-built ones.
  const nlohmann::json* json() const { return json_; }
  const ListData* listData() const;
  const DictData* dictData() const;
  NamespaceData* namespaceData() const;
  const CallableData* callableData() const;
  LoopData* loopData() const;

  // Python truthiness.
  bool truthy() const;
  // Python's type name, for error messages ("str", "dict", "NoneType", ...).
  std::string_view typeName() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  bool trusted_ = false;
  union {
    bool b;
    int64_t i;
    double f;
  } u_{};
  const nlohmann::json* json_ = nullptr;
  std::shared_ptr<void> ptr_;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  // A range() result: iterates like a list but prints as range(start, stop[, step]).
  bool range = false;
  int64_t range_start = 0, range_stop = 0, range_step = 1;
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // keys are strings, insertion order
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* find(std::string_view name);
};

struct CallableData {
  Builtin id;
  Value self;
};

struct LoopData {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
};

// ---- Collections ------------------------------------------------------------

size_t listSize(const Value& v);
Value listAt(const Value& v, size_t i);  // precondition: i < listSize(v)
size_t dictSize(const Value& v);
// Looks up a string key; returns false when absent.
bool dictGet(const Value& v, std::string_view key, Value* out);
// Calls fn(key, value) in iteration order (JSON objects: nlohmann's key order).
void dictForEach(const Value& v, const std::function<void(const Value&, const Value&)>& fn);

// Python iter(): list items, dict keys, string characters, nothing for
// Undefined. Other types are an error ("'int' object is not iterable").
Result<std::vector<Value>> iterate(const Value& v);

// ---- Strings with trust ------------------------------------------------------

class StrBuilder {
 public:
  void append(std::string_view s, bool trusted);
  // Appends bytes [begin, end) of string value `s` with their trust.
  void appendSub(const Value& s, size_t begin, size_t end);
  void appendStr(const Value& s) { appendSub(s, 0, s.str().size()); }
  size_t size() const { return rep_.text.size(); }
  Value finish();
  // Moves the text and trusted ranges out (for the final prompt).
  StrRep release() { return std::move(rep_); }

 private:
  StrRep rep_;
};

// Calls fn(begin, end, trusted) for the trust runs of s's bytes [begin, end).
void forEachTrustRun(const Value& s, size_t begin, size_t end,
                     const std::function<void(size_t, size_t, bool)>& fn);
// Whether every byte of s is trusted (and it is non-empty or empty-trusted).
bool allBytesTrusted(const Value& s);

// Python str(v) appended to out. kMaxDepth guards nested containers.
Status appendPyStr(const Value& v, StrBuilder& out);
// Python repr(v).
Status appendPyRepr(const Value& v, StrBuilder& out, int depth = 0);
// Python float.__repr__.
std::string pyFloatRepr(double d);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // per level, when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
Status appendJsonDump(const Value& v, const JsonDumpOptions& options, StrBuilder& out);

// Whether every string and scalar reachable from v is trusted.
bool deepTrusted(const Value& v, int depth = 0);

// ---- Python operators -----------------------------------------------------------

bool pyEquals(const Value& a, const Value& b, int depth = 0);
// a < b; error when the types are not orderable.
Result<bool> pyLess(const Value& a, const Value& b, int depth = 0);

inline constexpr int kMaxValueDepth = 256;

}  // namespace lg::text::jinja

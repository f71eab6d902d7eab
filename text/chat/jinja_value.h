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
//
// Cost: every byte a string operation writes (and every list item or trusted
// range it allocates) is charged to the RenderBudget of the render running on
// the thread, which refuses the write once a limit is reached. A string that
// only one Value owns is appended to in place (StrBuilder::take), so
// `ns.s = ns.s + x` in a loop is linear, not quadratic.
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
  std::string_view str() const {
    if (kind_ != ValueKind::kString) return {};
    if (json_ != nullptr) return json_->get_ref<const std::string&>();
    return static_cast<const StrRep*>(ptr_.get())->text;
  }
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

  // The string or list payload when this Value is its only owner (a temporary
  // result, or a variable's value moved out of its slot), so that it may be
  // extended in place; nullptr otherwise (shared, JSON-backed, a range()).
  StrRep* uniqueStr();
  ListData* uniqueList();

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

// ---- Render budget -------------------------------------------------------------

// Per-render bounds (ChatRenderOptions in chat_template.h documents them).
struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;
  uint64_t max_copied_bytes = uint64_t{64} << 20;
  int64_t max_loop_iterations = 250000;
};

// What one render has spent. Constructing it installs it as the budget of the
// calling thread until it is destroyed; every StrBuilder write, list
// allocation and loop iteration on that thread is charged to it. The first
// limit exceeded is remembered (status()) and every later charge is refused,
// so nothing is copied or allocated past a limit; the interpreter checks
// status() after each expression and statement and fails the render with it.
// Outside a render (no budget installed) nothing is charged.
class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  static RenderBudget* current();  // inline, below

  // A string is about to grow from `size` by `add` bytes (`extra` more bytes of
  // bookkeeping, e.g. a new trusted range): charges add + extra; false, with
  // the error recorded, when the string would exceed max_output_bytes or the
  // render would exceed max_copied_bytes.
  bool admitString(size_t size, size_t add, size_t extra = 0) {
    // Fast path inline (a render makes hundreds of these); the limits in
    // string_room_/copy_room_ drop to 0 once anything has been refused.
    if (add <= string_room_ && size <= string_room_ - add && add + extra <= copy_room_ - copied_) {
      copied_ += add + extra;
      return true;
    }
    return admitStringSlow(size, add, extra);
  }
  // Charges `bytes` of other allocation (list items, Value copies).
  bool admitBytes(uint64_t bytes) {
    if (bytes <= copy_room_ - copied_) {
      copied_ += bytes;
      return true;
    }
    return admitBytesSlow(bytes);
  }
  // Checks, without charging, that a string of `size` bytes may be built and
  // that `copy` more bytes fit the copy budget: used before building results
  // whose size is known in advance, so that they are refused before any work.
  bool precheck(uint64_t size, uint64_t copy);
  // Counts one loop iteration; false past max_loop_iterations.
  bool countIteration();

  const Status& status() const { return error_; }
  bool exhausted() const { return !error_.isOk(); }
  uint64_t copied() const { return copied_; }
  int64_t iterations() const { return iterations_; }
  const RenderLimits& limits() const { return limits_; }

 private:
  bool admitStringSlow(size_t size, size_t add, size_t extra);
  bool admitBytesSlow(uint64_t bytes);
  void fail(Status error);
  Status stringTooLong(uint64_t size) const;
  Status copiedTooMuch(uint64_t total) const;

  RenderLimits limits_;
  RenderBudget* previous_;
  // limits_.max_output_bytes / max_copied_bytes until a refusal, then 0 (and
  // copy_room_ = copied_) so that every later fast-path check fails.
  size_t string_room_;
  uint64_t copy_room_;
  uint64_t copied_ = 0;
  int64_t iterations_ = 0;
  Status error_;
};

namespace detail {
extern thread_local RenderBudget* t_render_budget;
}  // namespace detail
inline RenderBudget* RenderBudget::current() { return detail::t_render_budget; }

// The installed budget's status (ok when none is installed).
Status budgetStatus();
// Whether no limit has been exceeded (cheap: no Status copy on the hot path).
inline bool budgetOk() {
  const RenderBudget* b = RenderBudget::current();
  return b == nullptr || !b->exhausted();
}
// Charges n list items (sizeof(Value) each); false when refused.
[[nodiscard]] bool chargeItems(size_t n);

// Returns budgetStatus() from the enclosing function when `ok` is false.
#define LG_JINJA_RETURN_IF_REFUSED(ok)                                           \
  do {                                                                          \
    if (!(ok)) return ::lg::text::jinja::budgetStatus();                        \
  } while (0)
// Charges `bytes` of allocation, or of a full scan of a string (a search, a
// code point count, a comparison): reading costs like copying, so a template
// that searches an ever-growing string on each iteration is bounded too.
// The error, if any, is left in the budget for the interpreter to report.
inline void chargeBytes(uint64_t bytes) {
  if (RenderBudget* b = RenderBudget::current(); b != nullptr) (void)b->admitBytes(bytes);
}

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
  StrBuilder() = default;
  // A builder that continues `s`: its payload is moved in when `s` is its only
  // owner (no copy), else its bytes and trust are copied (and charged).
  static StrBuilder take(Value&& s);

  // Appends unless the render budget refuses it (then nothing is written and
  // budgetStatus() says why).
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

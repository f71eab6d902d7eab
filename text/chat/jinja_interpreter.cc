#include "text/chat/jinja_interpreter.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "text/chat/jinja_builtins.h"

namespace lg::text::jinja {
namespace {

Status atLine(const Status& s, int line) {
  if (s.isOk()) return s;
  // Keep the first (innermost) line only.
  if (s.message().rfind("line ", 0) == 0 || s.message().rfind("template syntax error", 0) == 0) return s;
  return Status(s.code(), "line " + std::to_string(line) + ": " + s.message());
}

Status typeError(std::string_view op, const Value& a, const Value& b) {
  return invalidArgument("unsupported operand type(s) for " + std::string(op) + ": '" + std::string(a.typeName()) +
                         "' and '" + std::string(b.typeName()) + "'");
}

Status overflow() { return invalidArgument("integer overflow (the engine uses 64-bit integers)"); }

// Python's float floor division and modulo.
void floatDivmod(double vx, double wx, double* floordiv, double* modulo) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *modulo = mod;
}

Result<Value> repeat(const Value& seq, int64_t n, bool trusted) {
  if (n <= 0) return seq.isString() ? Value::string("", trusted) : Value::list({}, seq.isTuple());
  if (seq.isString()) {
    // Refused before anything is built when the result is over a limit.
    const uint64_t len = seq.str().size();
    const uint64_t total = len == 0 ? 0 : (static_cast<uint64_t>(n) > UINT64_MAX / len ? UINT64_MAX : len * static_cast<uint64_t>(n));
    if (RenderBudget* budget = RenderBudget::current()) LG_JINJA_RETURN_IF_REFUSED(budget->precheck(total, total));
    StrBuilder out;
    for (int64_t i = 0; i < n && !seq.str().empty(); ++i) {
      out.appendStr(seq);
      LG_JINJA_RETURN_IF_REFUSED(budgetOk());
    }
    return out.finish();
  }
  const size_t len = listSize(seq);
  if (static_cast<uint64_t>(n) > kMaxListItems || len * static_cast<uint64_t>(n) > kMaxListItems) {
    return invalidArgument("list result longer than " + std::to_string(kMaxListItems) + " items");
  }
  LG_JINJA_RETURN_IF_REFUSED(chargeItems(len * static_cast<size_t>(n)));
  std::vector<Value> items;
  items.reserve(len * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < len; ++k) items.push_back(listAt(seq, k));
  }
  return Value::list(std::move(items), seq.isTuple());
}

// `a` is taken by value: when the caller hands over the only reference (a
// temporary, or a variable's value moved out by a self-append), `a + b`
// extends a's string or list in place instead of copying it.
Result<Value> binaryOp(BinaryOp op, Value a, const Value& b) {
  if (a.isUndefined()) return undefinedError(a);
  if (b.isUndefined()) return undefinedError(b);
  const bool trusted = a.trusted() && b.trusted();
  const bool ints = (a.kind() == ValueKind::kInt || a.kind() == ValueKind::kBool) &&
                    (b.kind() == ValueKind::kInt || b.kind() == ValueKind::kBool);
  const bool nums = a.isNumber() && b.isNumber();
  switch (op) {
    case BinaryOp::kAdd: {
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.intValue(), b.intValue(), &r)) return overflow();
        return Value::integer(r, trusted);
      }
      if (nums) return Value::floating(a.floatValue() + b.floatValue(), trusted);
      if (a.isString() && b.isString()) {
        const uint64_t total = static_cast<uint64_t>(a.str().size()) + b.str().size();
        if (RenderBudget* budget = RenderBudget::current()) {
          // The bytes this `+` will copy: b, and a too unless it is extended in place.
          LG_JINJA_RETURN_IF_REFUSED(budget->precheck(total, a.uniqueStr() != nullptr ? b.str().size() : total));
        }
        StrBuilder out = StrBuilder::take(std::move(a));
        out.appendStr(b);
        LG_JINJA_RETURN_IF_REFUSED(budgetOk());
        return out.finish();
      }
      if (a.isList() && b.isList() && a.isTuple() == b.isTuple()) {
        const size_t na = listSize(a), nb = listSize(b);
        if (na + nb > kMaxListItems) return invalidArgument("list result too long");
        if (ListData* own = a.uniqueList()) {
          LG_JINJA_RETURN_IF_REFUSED(chargeItems(nb));
          for (size_t i = 0; i < nb; ++i) own->items.push_back(listAt(b, i));
          return a;
        }
        LG_JINJA_RETURN_IF_REFUSED(chargeItems(na + nb));
        std::vector<Value> items;
        items.reserve(na + nb);
        for (size_t i = 0; i < na; ++i) items.push_back(listAt(a, i));
        for (size_t i = 0; i < nb; ++i) items.push_back(listAt(b, i));
        return Value::list(std::move(items), a.isTuple());
      }
      if (a.isString()) {
        return invalidArgument("can only concatenate str (not \"" + std::string(b.typeName()) + "\") to str");
      }
      return typeError("+", a, b);
    }
    case BinaryOp::kSub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.intValue(), b.intValue(), &r)) return overflow();
        return Value::integer(r, trusted);
      }
      if (nums) return Value::floating(a.floatValue() - b.floatValue(), trusted);
      return typeError("-", a, b);
    case BinaryOp::kMul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.intValue(), b.intValue(), &r)) return overflow();
        return Value::integer(r, trusted);
      }
      if (nums) return Value::floating(a.floatValue() * b.floatValue(), trusted);
      if ((a.isString() || a.isList()) && (b.kind() == ValueKind::kInt || b.kind() == ValueKind::kBool)) {
        return repeat(a, b.intValue(), trusted);
      }
      if ((b.isString() || b.isList()) && (a.kind() == ValueKind::kInt || a.kind() == ValueKind::kBool)) {
        return repeat(b, a.intValue(), trusted);
      }
      return typeError("*", a, b);
    case BinaryOp::kDiv:
      if (!nums) return typeError("/", a, b);
      if (b.floatValue() == 0.0) return invalidArgument("division by zero");
      if (ints) return Value::floating(static_cast<double>(a.intValue()) / static_cast<double>(b.intValue()), trusted);
      return Value::floating(a.floatValue() / b.floatValue(), trusted);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (op == BinaryOp::kMod && a.isString()) return unimplemented("printf-style string formatting with %");
      if (!nums) return typeError(op == BinaryOp::kMod ? "%" : "//", a, b);
      if (b.floatValue() == 0.0) return invalidArgument("integer division or modulo by zero");
      if (ints) {
        const int64_t x = a.intValue(), y = b.intValue();
        if (x == INT64_MIN && y == -1) {
          if (op == BinaryOp::kMod) return Value::integer(0, trusted);
          return overflow();
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          q -= 1;
        }
        return Value::integer(op == BinaryOp::kMod ? r : q, trusted);
      }
      double fd, md;
      floatDivmod(a.floatValue(), b.floatValue(), &fd, &md);
      return Value::floating(op == BinaryOp::kMod ? md : fd, trusted);
    }
    case BinaryOp::kPow: {
      if (!nums) return typeError("** or pow()", a, b);
      if (ints && b.intValue() >= 0) {
        int64_t base = a.intValue(), e = b.intValue(), r = 1;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(r, base, &r)) return overflow();
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
        }
        return Value::integer(r, trusted);
      }
      const double x = a.floatValue(), y = b.floatValue();
      if (x == 0.0 && y < 0) return invalidArgument("0.0 cannot be raised to a negative power");
      if (x < 0 && std::floor(y) != y) return unimplemented("complex results of **");
      const double r = std::pow(x, y);
      if (std::isinf(r) && !std::isinf(x) && !std::isinf(y)) return invalidArgument("numerical result out of range");
      return Value::floating(r, trusted);
    }
  }
  return internalError("unknown operator");
}

class Renderer {
 public:
  Renderer(const TemplateAst& ast, const std::vector<std::pair<std::string, Value>>& variables,
           const RenderLimits& limits)
      : ast_(ast), budget_(limits) {
    frames_.emplace_back();
    for (const auto& [name, value] : variables) {
      for (size_t slot = 0; slot < ast.names.size(); ++slot) {
        if (ast.names[slot] == name) frames_.back().emplace_back(static_cast<int>(slot), value);
      }
    }
    for (size_t slot = 0; slot < ast.names.size(); ++slot) {
      if (ast.names[slot] == "loop") loop_slot_ = static_cast<int>(slot);
    }
    outputs_.emplace_back();
  }

  const RenderBudget& budget() const { return budget_; }

  Result<StrRep> run() {
    LG_RETURN_IF_ERROR(execList(ast_.body));
    if (budget_.exhausted()) return budget_.status();
    return outputs_.back().release();
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::vector<std::pair<int, Value>>;

  const Value* lookup(int slot) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      for (auto it = f->rbegin(); it != f->rend(); ++it) {
        if (it->first == slot) return &it->second;
      }
    }
    return nullptr;
  }

  void assign(int slot, Value v) {
    for (auto& [s, existing] : frames_.back()) {
      if (s == slot) {
        existing = std::move(v);
        return;
      }
    }
    frames_.back().emplace_back(slot, std::move(v));
  }

  Status bindTargets(const Stmt& s, Value v) {
    if (!s.unpack) {
      assign(s.targets.front(), std::move(v));
      return Status::ok();
    }
    LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.size() != s.targets.size()) {
      return invalidArgument(items.size() > s.targets.size()
                                 ? "too many values to unpack (expected " + std::to_string(s.targets.size()) + ")"
                                 : "not enough values to unpack (expected " + std::to_string(s.targets.size()) +
                                       ", got " + std::to_string(items.size()) + ")");
    }
    for (size_t i = 0; i < items.size(); ++i) assign(s.targets[i], std::move(items[i]));
    return Status::ok();
  }

  Status emit(const Value& v) {
    LG_RETURN_IF_ERROR(appendPyStr(v, outputs_.back()));
    if (budget_.exhausted()) return budget_.status();
    return Status::ok();
  }

  Status execList(const StmtList& list) {
    for (const auto& s : list) {
      LG_RETURN_IF_ERROR(atLine(exec(*s), s->line));
      if (flow_ != Flow::kNormal) return Status::ok();
    }
    return Status::ok();
  }

  Status exec(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kData:
        outputs_.back().append(s.text, true);
        if (budget_.exhausted()) return budget_.status();
        return Status::ok();
      case StmtKind::kOutput: {
        if (s.expr->kind == ExprKind::kBinary && static_cast<BinaryOp>(s.expr->op) == BinaryOp::kAdd) {
          return emitSum(*s.expr);
        }
        LG_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        return emit(v);
      }
      case StmtKind::kIf:
        for (const IfBranch& branch : s.branches) {
          LG_ASSIGN_OR_RETURN(Value test, eval(*branch.test));
          if (test.truthy()) return execList(branch.body);
        }
        return execList(s.else_body);
      case StmtKind::kFor:
        return execFor(s);
      case StmtKind::kSet: {
        if (!s.unpack && mayAppend(*s.expr)) {
          if (Value* own = ownSlot(s.targets.front())) {
            LG_ASSIGN_OR_RETURN(std::optional<Value> appended, selfAppend(*s.expr, own, [&](const Expr& leaf) {
              return leaf.kind == ExprKind::kName && leaf.slot == s.targets.front();
            }));
            if (appended) {
              assign(s.targets.front(), std::move(*appended));
              return Status::ok();
            }
          }
        }
        LG_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        return bindTargets(s, std::move(v));
      }
      case StmtKind::kSetAttr: {
        const Value* target = lookup(s.targets.front());
        if (target == nullptr || target->kind() != ValueKind::kNamespace) {
          return invalidArgument("cannot assign attribute on non-namespace object");
        }
        NamespaceData* ns = target->namespaceData();
        if (Value* own = mayAppend(*s.expr) ? ns->find(s.text) : nullptr) {
          LG_ASSIGN_OR_RETURN(std::optional<Value> appended, selfAppend(*s.expr, own, [&](const Expr& leaf) {
            return leaf.kind == ExprKind::kGetattr && leaf.name == s.text && leaf.args[0]->kind == ExprKind::kName &&
                   leaf.args[0]->slot == s.targets.front();
          }));
          if (appended) {
            // Evaluating the operands cannot add or remove attributes, so `own` is still valid.
            *own = std::move(*appended);
            return Status::ok();
          }
        }
        LG_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        if (Value* existing = ns->find(s.text)) {
          *existing = std::move(v);
        } else {
          ns->attrs.emplace_back(s.text, std::move(v));
        }
        return Status::ok();
      }
      case StmtKind::kSetBlock: {
        outputs_.emplace_back();
        Status status = execList(s.body);
        Value captured = outputs_.back().finish();
        outputs_.pop_back();
        LG_RETURN_IF_ERROR(status);
        assign(s.targets.front(), std::move(captured));
        return Status::ok();
      }
      case StmtKind::kBreak:
        flow_ = Flow::kBreak;
        return Status::ok();
      case StmtKind::kContinue:
        flow_ = Flow::kContinue;
        return Status::ok();
    }
    return internalError("unknown statement");
  }

  Status execFor(const Stmt& s) {
    LG_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
    LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable));
    if (s.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        LG_RETURN_IF_ERROR(countIteration());
        frames_.emplace_back();
        Status status = bindTargets(s, item);
        Result<Value> keep = status.isOk() ? eval(*s.filter) : Result<Value>(status);
        frames_.pop_back();
        if (!keep.isOk()) return keep.status();
        if (keep->truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
    auto loop = std::make_shared<LoopData>();
    loop->items = shared;
    const Value loop_value = Value::loop(loop);
    // Jinja2 runs the else block unless some iteration reached the end of the
    // body: an empty loop, but also one whose iterations all ended in
    // break/continue.
    bool completed_an_iteration = false;
    for (size_t i = 0; i < shared->size(); ++i) {
      LG_RETURN_IF_ERROR(countIteration());
      loop->index0 = i;
      // Each iteration starts from a fresh scope, as in Jinja2.
      frames_.emplace_back();
      if (loop_slot_ >= 0) assign(loop_slot_, loop_value);
      Status status = bindTargets(s, (*shared)[i]);
      if (status.isOk()) status = execList(s.body);
      frames_.pop_back();
      LG_RETURN_IF_ERROR(status);
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kNormal) completed_an_iteration = true;
      if (flow == Flow::kBreak) break;
    }
    if (!completed_an_iteration && !s.else_body.empty()) {
      frames_.emplace_back();
      Status status = execList(s.else_body);
      frames_.pop_back();
      return status;
    }
    return Status::ok();
  }

  // `{{ a + b + ... }}`: while the operands are strings they are written to
  // the output one after the other instead of being concatenated first (the
  // same bytes and trust, one copy instead of two). Operands are evaluated
  // left to right as Jinja2 does; the first operand that is not a string
  // turns the rest into ordinary `+` operations, so errors are unchanged.
  Status emitSum(const Expr& e) {
    constexpr size_t kMaxParts = 8;
    const Expr* nodes[kMaxParts];  // the `+` nodes, outermost first
    size_t n = 0;
    const Expr* leftmost = &e;
    while (leftmost->kind == ExprKind::kBinary && static_cast<BinaryOp>(leftmost->op) == BinaryOp::kAdd) {
      if (n == kMaxParts) {
        LG_ASSIGN_OR_RETURN(Value v, eval(e));
        return emit(v);
      }
      nodes[n++] = leftmost;
      leftmost = leftmost->args[0].get();
    }
    Value parts[kMaxParts + 1];
    size_t k = 0;
    Value acc;  // once an operand is not a string
    LG_ASSIGN_OR_RETURN(Value first, eval(*leftmost));
    bool strings = first.isString();
    if (strings) {
      parts[k++] = std::move(first);
    } else {
      acc = std::move(first);
    }
    for (size_t i = n; i-- > 0;) {
      const Expr& node = *nodes[i];
      LG_ASSIGN_OR_RETURN(Value rhs, eval(*node.args[1]));
      if (strings && rhs.isString()) {
        parts[k++] = std::move(rhs);
        continue;
      }
      if (strings) {
        StrBuilder joined = StrBuilder::take(std::move(parts[0]));
        for (size_t j = 1; j < k; ++j) joined.appendStr(parts[j]);
        if (budget_.exhausted()) return atLine(budget_.status(), node.line);
        acc = joined.finish();
        strings = false;
      }
      Result<Value> r = binaryOp(BinaryOp::kAdd, std::move(acc), rhs);
      if (!r.isOk()) return atLine(r.status(), node.line);
      acc = std::move(r).value();
    }
    if (!strings) return emit(acc);
    for (size_t j = 0; j < k; ++j) outputs_.back().appendStr(parts[j]);
    if (budget_.exhausted()) return atLine(budget_.status(), e.line);
    return Status::ok();
  }

  // A `+` or `~` expression: what selfAppend() may handle.
  static bool mayAppend(const Expr& e) {
    return e.kind == ExprKind::kConcat || (e.kind == ExprKind::kBinary && static_cast<BinaryOp>(e.op) == BinaryOp::kAdd);
  }

  Status countIteration() {
    if (!budget_.countIteration()) return budget_.status();
    return Status::ok();
  }

  // The slot of `slot` in the innermost frame, the one assign() writes: only
  // there may a self-append take the value out (an outer frame's variable is
  // shadowed by the assignment, not replaced).
  Value* ownSlot(int slot) {
    for (auto it = frames_.back().rbegin(); it != frames_.back().rend(); ++it) {
      if (it->first == slot) return &it->second;
    }
    return nullptr;
  }

  // `x = x + a + b ...` and `x = x ~ a ~ b ...` (and `ns.x = ns.x + ...`),
  // where `is_self(leaf)` recognizes the leftmost operand as the assignment's
  // own target, held in `*own`: the operands are evaluated first, then the
  // target's value is moved out of its slot, so that when nothing else refers
  // to it the string (or list) is extended in place: a loop accumulating text
  // this way costs the bytes appended, not the whole string each time.
  // Errors are those Jinja2 raises in its left-to-right order (operands have
  // no side effects, and the target lookup itself cannot fail). Returns
  // nullopt when the expression does not have that shape.
  template <typename IsSelf>
  Result<std::optional<Value>> selfAppend(const Expr& expr, Value* own, IsSelf&& is_self) {
    const bool concat = expr.kind == ExprKind::kConcat;
    std::vector<const Expr*> chain;  // concat: the node; add: the `+` nodes, innermost first
    std::vector<const Expr*> operands;
    if (concat) {
      if (expr.args.size() < 2 || !is_self(*expr.args[0])) return std::optional<Value>();
      for (size_t i = 1; i < expr.args.size(); ++i) operands.push_back(expr.args[i].get());
    } else {
      const Expr* e = &expr;
      while (e->kind == ExprKind::kBinary && static_cast<BinaryOp>(e->op) == BinaryOp::kAdd) {
        chain.push_back(e);
        e = e->args[0].get();
      }
      if (chain.empty() || !is_self(*e)) return std::optional<Value>();
      std::reverse(chain.begin(), chain.end());
      for (const Expr* node : chain) operands.push_back(node->args[1].get());
    }
    // Only strings and lists gain from this; anything else takes the plain path.
    if (!own->isString() && !(own->isList() && !concat)) return std::optional<Value>();
    std::vector<Value> values;
    Status pending;
    for (const Expr* operand : operands) {
      Result<Value> v = eval(*operand);
      if (!v.isOk()) {
        pending = v.status();
        break;
      }
      values.push_back(std::move(v).value());
    }
    Value acc = std::move(*own);
    *own = Value();
    if (concat) {
      StrBuilder out = StrBuilder::take(std::move(acc));
      for (const Value& v : values) {
        Status st = appendPyStr(v, out);
        if (st.isOk() && budget_.exhausted()) st = budget_.status();
        if (!st.isOk()) return atLine(st, expr.line);
      }
      if (!pending.isOk()) return pending;
      return std::optional<Value>(out.finish());
    }
    for (size_t i = 0; i < values.size(); ++i) {
      Result<Value> r = binaryOp(BinaryOp::kAdd, std::move(acc), values[i]);
      if (!r.isOk()) return atLine(r.status(), chain[i]->line);
      acc = std::move(r).value();
    }
    if (!pending.isOk()) return pending;
    return std::optional<Value>(std::move(acc));
  }

  Result<CallArgs> evalArgs(const Expr& e, size_t first) {
    CallArgs args;
    const size_t n_kw = e.kwnames.size();
    const size_t n_pos = e.args.size() - first - n_kw;
    for (size_t i = 0; i < n_pos; ++i) {
      LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[first + i]));
      args.positional.push_back(std::move(v));
    }
    for (size_t i = 0; i < n_kw; ++i) {
      LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[first + n_pos + i]));
      args.keyword.emplace_back(e.kwnames[i], std::move(v));
    }
    return args;
  }

  Result<bool> compare(CompareOp op, const Value& a, const Value& b) {
    switch (op) {
      case CompareOp::kEq: return pyEquals(a, b);
      case CompareOp::kNe: return !pyEquals(a, b);
      case CompareOp::kLt: return pyLess(a, b);
      case CompareOp::kGt: return pyLess(b, a);
      case CompareOp::kLe: {
        LG_ASSIGN_OR_RETURN(bool lt, pyLess(a, b));
        return lt || pyEquals(a, b);
      }
      case CompareOp::kGe: {
        LG_ASSIGN_OR_RETURN(bool gt, pyLess(b, a));
        return gt || pyEquals(a, b);
      }
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        CallArgs args;
        args.positional.push_back(b);
        LG_ASSIGN_OR_RETURN(bool in, applyTest(TestId::kIn, a, args));
        return op == CompareOp::kIn ? in : !in;
      }
    }
    return internalError("unknown comparison");
  }

  Result<Value> eval(const Expr& e) {
    Result<Value> r = evalInner(e);
    if (!r.isOk()) return atLine(r.status(), e.line);
    // A refused write leaves a truncated value behind: never let it be used.
    if (budget_.exhausted()) return budget_.status();
    return r;
  }

  Result<Value> evalInner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kConst:
        return e.value;
      case ExprKind::kName: {
        if (const Value* v = lookup(e.slot)) return *v;
        if (auto fn = lookupGlobalFunction(e.name)) return Value::callable(*fn);
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kGetattr: {
        LG_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
        return getAttribute(obj, e.name);
      }
      case ExprKind::kGetitem: {
        LG_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
        const Expr& key = *e.args[1];
        if (key.kind == ExprKind::kSlice) {
          Value parts[3];
          for (int i = 0; i < 3; ++i) {
            if (key.args[i]) {
              LG_ASSIGN_OR_RETURN(parts[i], eval(*key.args[i]));
            } else {
              parts[i] = Value::none(true);
            }
          }
          return getSlice(obj, parts[0], parts[1], parts[2]);
        }
        LG_ASSIGN_OR_RETURN(Value k, eval(key));
        return getItem(obj, k);
      }
      case ExprKind::kSlice:
        return internalError("slice outside a subscript");
      case ExprKind::kCall: {
        LG_ASSIGN_OR_RETURN(Value callee, eval(*e.args[0]));
        if (callee.isUndefined()) return undefinedError(callee);
        const CallableData* fn = callee.callableData();
        if (fn == nullptr) return invalidArgument("'" + std::string(callee.typeName()) + "' object is not callable");
        LG_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1));
        return callBuiltin(*fn, args);
      }
      case ExprKind::kFilter: {
        LG_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0]));
        LG_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1));
        return applyFilter(static_cast<FilterId>(e.op), subject, args);
      }
      case ExprKind::kTest: {
        LG_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0]));
        LG_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1));
        LG_ASSIGN_OR_RETURN(bool r, applyTest(static_cast<TestId>(e.op), subject, args));
        return Value::boolean(r, true);
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        if (v.isUndefined()) return undefinedError(v);
        const bool neg = e.kind == ExprKind::kNeg;
        if (v.kind() == ValueKind::kFloat) return Value::floating(neg ? -v.floatValue() : v.floatValue(), v.trusted());
        if (v.kind() == ValueKind::kInt || v.kind() == ValueKind::kBool) {
          if (neg && v.intValue() == INT64_MIN) return overflow();
          return Value::integer(neg ? -v.intValue() : v.intValue(), v.trusted());
        }
        return invalidArgument(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" +
                               std::string(v.typeName()) + "'");
      }
      case ExprKind::kNot: {
        LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        return Value::boolean(!v.truthy(), true);
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        LG_ASSIGN_OR_RETURN(Value left, eval(*e.args[0]));
        if (left.truthy() == (e.kind == ExprKind::kOr)) return left;
        return eval(*e.args[1]);
      }
      case ExprKind::kCondExpr: {
        LG_ASSIGN_OR_RETURN(Value test, eval(*e.args[0]));
        if (test.truthy()) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
      case ExprKind::kConcat: {
        StrBuilder out;
        for (size_t i = 0; i < e.args.size(); ++i) {
          LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
          if (i == 0 && v.isString()) {
            out = StrBuilder::take(std::move(v));  // in place when a temporary
          } else {
            LG_RETURN_IF_ERROR(appendPyStr(v, out));
          }
          if (budget_.exhausted()) return budget_.status();
        }
        return out.finish();
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        LG_JINJA_RETURN_IF_REFUSED(chargeItems(e.args.size()));
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& arg : e.args) {
          LG_ASSIGN_OR_RETURN(Value v, eval(*arg));
          items.push_back(std::move(v));
        }
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        LG_JINJA_RETURN_IF_REFUSED(chargeItems(e.args.size()));
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          LG_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
          if (!k.isString()) return unimplemented("dict keys that are not strings");
          LG_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
          items.emplace_back(std::move(k), std::move(v));
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::kBinary: {
        LG_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        LG_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
        return binaryOp(static_cast<BinaryOp>(e.op), std::move(a), b);
      }
      case ExprKind::kCompare: {
        LG_ASSIGN_OR_RETURN(Value left, eval(*e.args[0]));
        for (size_t i = 0; i < e.compare_ops.size(); ++i) {
          LG_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1]));
          LG_ASSIGN_OR_RETURN(bool ok, compare(e.compare_ops[i], left, right));
          if (!ok) return Value::boolean(false, true);
          left = std::move(right);
        }
        return Value::boolean(true, true);
      }
    }
    return internalError("unknown expression");
  }

  const TemplateAst& ast_;
  RenderBudget budget_;  // installed on this thread while the renderer lives
  std::vector<Frame> frames_;
  std::vector<StrBuilder> outputs_;
  int loop_slot_ = -1;
  Flow flow_ = Flow::kNormal;
};

}  // namespace

Result<StrRep> renderTemplate(const TemplateAst& ast, const std::vector<std::pair<std::string, Value>>& variables,
                              const RenderLimits& limits, uint64_t* copied, int64_t* iterations) {
  Renderer renderer(ast, variables, limits);
  Result<StrRep> out = renderer.run();
  if (copied != nullptr) *copied = renderer.budget().copied();
  if (iterations != nullptr) *iterations = renderer.budget().iterations();
  return out;
}

}  // namespace lg::text::jinja

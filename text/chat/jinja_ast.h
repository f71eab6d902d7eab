// Syntax tree of a parsed chat template (the Jinja subset).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/chat/jinja_value.h"

namespace lg::text::jinja {

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name, slot
  kGetattr,   // args[0].name
  kGetitem,   // args[0][args[1]]
  kSlice,     // start, stop, step in args (null when omitted); only as a Getitem key
  kCall,      // args[0](args[1..]) with kwnames naming the trailing keyword args
  kFilter,    // args[0] | filter(args[1..]); filter id in op
  kTest,      // args[0] is test(args[1..]); test id in op
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kNot,       // not args[0]
  kBinary,    // args[0] op args[1]; op is a BinaryOp
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (Python chaining)
  kAnd,
  kOr,
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  kConcat,    // args joined with ~
  kList,
  kTuple,
  kDict,      // args alternate key, value
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value value;              // kConst
  std::string name;         // kName, kGetattr, kFilter, kTest, kCall of a method/global (for messages)
  int slot = -1;            // kName: interned variable index
  int op = 0;               // BinaryOp, filter or test id
  int depth = 1;            // height of this subtree (bounded by kMaxExprTreeDepth)
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::string> kwnames;  // trailing keyword arguments of kCall/kFilter/kTest
  std::vector<CompareOp> compare_ops;
};

enum class StmtKind : uint8_t {
  kData,      // literal template text (trusted)
  kOutput,    // {{ expr }}
  kIf,        // branches; else_body
  kFor,       // targets, expr (iterable), filter, body, else_body
  kSet,       // targets = expr
  kSetAttr,   // namespace slot . attr = expr
  kSetBlock,  // {% set target %}body{% endset %}
  kBreak,
  kContinue,
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct IfBranch {
  std::unique_ptr<Expr> test;
  StmtList body;
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;              // kData; kSetAttr attribute name
  std::unique_ptr<Expr> expr;    // kOutput, kFor iterable, kSet value
  std::unique_ptr<Expr> filter;  // kFor `if` filter
  std::vector<int> targets;      // kFor/kSet/kSetBlock/kSetAttr variable slots
  bool unpack = false;           // targets came from a tuple (`a, b`)
  std::vector<IfBranch> branches;
  StmtList body;
  StmtList else_body;
};

struct TemplateAst {
  StmtList body;
  std::vector<std::string> names;  // slot -> variable name
};

}  // namespace lg::text::jinja

#include "text/chat/jinja_parser.h"

#include <initializer_list>

#include "text/chat/jinja_builtins.h"
#include "text/chat/jinja_lexer.h"

namespace lg::text::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;

// Statement tags Jinja2 knows but this subset does not implement.
constexpr std::string_view kUnsupportedTags[] = {"macro",   "call",  "filter",     "include", "import", "from",
                                                 "extends", "block", "with",       "autoescape", "print", "do",
                                                 "trans",   "pluralize", "endtrans"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<TemplateAst> run() {
    TemplateAst ast;
    LG_RETURN_IF_ERROR(subparse({}, &ast.body));
    if (cur().type != TokenType::kEof) return fail(cur().line, "unexpected '" + describe(cur()) + "'");
    ast.names = std::move(names_);
    return ast;
  }

 private:
  // ---- Token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool isOp(std::string_view op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool isName(std::string_view name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skipOp(std::string_view op) {
    if (!isOp(op)) return false;
    next();
    return true;
  }
  bool skipName(std::string_view name) {
    if (!isName(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kData: return "template data";
      case TokenType::kString: return "string";
      default: return t.value;
    }
  }

  static Status fail(int line, const std::string& message) {
    return invalidArgument("template syntax error at line " + std::to_string(line) + ": " + message);
  }
  static Status unsupported(int line, const std::string& what) {
    return unimplemented(what + " is not supported by the chat template engine (line " + std::to_string(line) + ")");
  }

  Status expectOp(std::string_view op) {
    if (!skipOp(op)) return fail(cur().line, "expected '" + std::string(op) + "', got '" + describe(cur()) + "'");
    return Status::ok();
  }
  Result<std::string> expectName() {
    if (cur().type != TokenType::kName) return fail(cur().line, "expected a name, got '" + describe(cur()) + "'");
    std::string v = cur().value;
    next();
    return v;
  }
  Status expect(TokenType type, const char* what) {
    if (cur().type != type) return fail(cur().line, std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
    return Status::ok();
  }

  int slotOf(const std::string& name) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) return static_cast<int>(i);
    }
    names_.push_back(name);
    return static_cast<int>(names_.size() - 1);
  }

  static ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Attaches a child expression, keeping the tree shallow enough to evaluate
  // (and destroy) recursively: long operator chains build deep trees without
  // deep parser recursion, so depth is checked here.
  static Status adopt(Expr* parent, ExprPtr child) {
    if (child && child->depth + 1 > parent->depth) parent->depth = child->depth + 1;
    parent->args.push_back(std::move(child));
    if (parent->depth > kMaxExprTreeDepth) {
      return invalidArgument("template syntax error at line " + std::to_string(parent->line) +
                             ": expression nested too deeply");
    }
    return Status::ok();
  }

  // ---- Statements ----

  // Parses until one of end_tags starts a block (left unconsumed, positioned
  // at the tag name) or the end of the template.
  Status subparse(std::initializer_list<std::string_view> end_tags, StmtList* body) {
    if (++block_depth_ > kMaxBlockDepth) return fail(cur().line, "blocks nested too deeply");
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) break;
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->text = t.value;
        body->push_back(std::move(s));
        next();
        continue;
      }
      if (t.type == TokenType::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        LG_ASSIGN_OR_RETURN(s->expr, parseTuple(true, {}, false));
        LG_RETURN_IF_ERROR(expect(TokenType::kVariableEnd, "'}}'"));
        body->push_back(std::move(s));
        continue;
      }
      if (t.type == TokenType::kBlockBegin) {
        next();
        for (std::string_view end : end_tags) {
          if (isName(end)) {
            --block_depth_;
            return Status::ok();
          }
        }
        LG_RETURN_IF_ERROR(parseStatement(body));
        LG_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
        continue;
      }
      return fail(t.line, "unexpected '" + describe(t) + "'");
    }
    if (end_tags.size() > 0) {
      std::string names;
      for (std::string_view e : end_tags) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
      return fail(cur().line, "unexpected end of template, expected " + names);
    }
    --block_depth_;
    return Status::ok();
  }

  // The body of a block statement, after its header: `%}` ... up to an end tag.
  Status parseBody(std::initializer_list<std::string_view> end_tags, StmtList* body) {
    skipOp(":");
    LG_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
    return subparse(end_tags, body);
  }

  Status parseStatement(StmtList* body) {
    const Token& t = cur();
    if (t.type != TokenType::kName) return fail(t.line, "tag name expected");
    const std::string tag = t.value;
    const int line = t.line;
    if (tag == "if") return parseIf(body);
    if (tag == "for") return parseFor(body);
    if (tag == "set") return parseSet(body);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(line, "'" + tag + "' outside of a loop");
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->line = line;
      body->push_back(std::move(s));
      return Status::ok();
    }
    for (std::string_view u : kUnsupportedTags) {
      if (u == tag) return unsupported(line, "the '" + tag + "' statement");
    }
    return fail(line, "encountered unknown tag '" + tag + "'");
  }

  Status parseIf(StmtList* body) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->line = cur().line;
    next();  // if
    while (true) {
      IfBranch branch;
      LG_ASSIGN_OR_RETURN(branch.test, parseTuple(false, {}, false));
      LG_RETURN_IF_ERROR(parseBody({"elif", "else", "endif"}, &branch.body));
      s->branches.push_back(std::move(branch));
      const std::string tag = cur().value;
      next();
      if (tag == "elif") continue;
      if (tag == "else") {
        LG_RETURN_IF_ERROR(parseBody({"endif"}, &s->else_body));
        next();
      }
      break;
    }
    body->push_back(std::move(s));
    return Status::ok();
  }

  // Assignment targets: a name or a tuple of names (`a, b` or `(a, b)`).
  Status parseTargets(Stmt* s, std::initializer_list<std::string_view> end_names) {
    const bool parens = skipOp("(");
    while (true) {
      const int line = cur().line;
      LG_ASSIGN_OR_RETURN(std::string name, expectName());
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
          name == "None") {
        return fail(line, "can't assign to '" + name + "'");
      }
      s->targets.push_back(slotOf(name));
      if (!skipOp(",")) break;
      s->unpack = true;
      bool end = parens ? isOp(")") : false;
      for (std::string_view n : end_names) end = end || isName(n);
      if (end) break;
    }
    if (parens) {
      s->unpack = true;
      LG_RETURN_IF_ERROR(expectOp(")"));
    }
    return Status::ok();
  }

  Status parseFor(StmtList* body) {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->line = cur().line;
    next();  // for
    LG_RETURN_IF_ERROR(parseTargets(s.get(), {"in"}));
    if (!skipName("in")) return fail(cur().line, "expected 'in', got '" + describe(cur()) + "'");
    LG_ASSIGN_OR_RETURN(s->expr, parseTuple(false, {"recursive"}, false));
    if (skipName("if")) {
      LG_ASSIGN_OR_RETURN(s->filter, parseExpression(true));
    }
    if (isName("recursive")) return unsupported(cur().line, "recursive for loops");
    ++loop_depth_;
    LG_RETURN_IF_ERROR(parseBody({"endfor", "else"}, &s->body));
    --loop_depth_;
    const std::string tag = cur().value;
    next();
    if (tag == "else") {
      LG_RETURN_IF_ERROR(parseBody({"endfor"}, &s->else_body));
      next();
    }
    body->push_back(std::move(s));
    return Status::ok();
  }

  Status parseSet(StmtList* body) {
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    next();  // set
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == ".") {
      s->kind = StmtKind::kSetAttr;
      s->targets.push_back(slotOf(cur().value));
      next();
      next();
      LG_ASSIGN_OR_RETURN(s->text, expectName());
      LG_RETURN_IF_ERROR(expectOp("="));
      LG_ASSIGN_OR_RETURN(s->expr, parseTuple(true, {}, false));
      body->push_back(std::move(s));
      return Status::ok();
    }
    LG_RETURN_IF_ERROR(parseTargets(s.get(), {}));
    if (skipOp("=")) {
      s->kind = StmtKind::kSet;
      LG_ASSIGN_OR_RETURN(s->expr, parseTuple(true, {}, false));
      body->push_back(std::move(s));
      return Status::ok();
    }
    if (isOp("|")) return unsupported(cur().line, "a filter on a block set");
    if (s->unpack) return fail(s->line, "a block set needs a single name");
    s->kind = StmtKind::kSetBlock;
    LG_RETURN_IF_ERROR(parseBody({"endset"}, &s->body));
    next();
    body->push_back(std::move(s));
    return Status::ok();
  }

  // ---- Expressions (Jinja2 precedence, lowest first) ----

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) { ++p->expr_depth_; }
    ~DepthGuard() { --p->expr_depth_; }
  };

  bool isTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const TokenType t = cur().type;
    if (t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || isOp(")")) return true;
    for (std::string_view e : extra_end) {
      if (isName(e)) return true;
    }
    return false;
  }

  Result<ExprPtr> parseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                             bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) LG_RETURN_IF_ERROR(expectOp(","));
      if (isTupleEnd(extra_end)) break;
      LG_ASSIGN_OR_RETURN(ExprPtr e, parseExpression(with_condexpr));
      items.push_back(std::move(e));
      if (isOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parens) return fail(line, "expected an expression, got '" + describe(cur()) + "'");
    }
    ExprPtr t = make(ExprKind::kTuple, line);
    for (ExprPtr& item : items) LG_RETURN_IF_ERROR(adopt(t.get(), std::move(item)));
    return t;
  }

  Result<ExprPtr> parseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    if (expr_depth_ > kMaxExprDepth) return fail(cur().line, "expression nested too deeply");
    if (!with_condexpr) return parseOr();
    LG_ASSIGN_OR_RETURN(ExprPtr expr, parseOr());
    while (isName("if")) {
      const int line = cur().line;
      next();
      ExprPtr cond = make(ExprKind::kCondExpr, line);
      LG_ASSIGN_OR_RETURN(ExprPtr test, parseOr());
      ExprPtr otherwise;
      if (skipName("else")) {
        LG_ASSIGN_OR_RETURN(otherwise, parseExpression(true));
      }
      LG_RETURN_IF_ERROR(adopt(cond.get(), std::move(test)));
      LG_RETURN_IF_ERROR(adopt(cond.get(), std::move(expr)));
      LG_RETURN_IF_ERROR(adopt(cond.get(), std::move(otherwise)));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> parseOr() {
    LG_ASSIGN_OR_RETURN(ExprPtr left, parseAnd());
    while (isName("or")) {
      ExprPtr node = make(ExprKind::kOr, cur().line);
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr right, parseAnd());
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(left)));
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(right)));
      left = std::move(node);
    }
    return left;
  }

  Result<ExprPtr> parseAnd() {
    LG_ASSIGN_OR_RETURN(ExprPtr left, parseNot());
    while (isName("and")) {
      ExprPtr node = make(ExprKind::kAnd, cur().line);
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr right, parseNot());
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(left)));
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(right)));
      left = std::move(node);
    }
    return left;
  }

  Result<ExprPtr> parseNot() {
    if (isName("not")) {
      DepthGuard guard(this);
      if (expr_depth_ > kMaxExprDepth) return fail(cur().line, "expression nested too deeply");
      ExprPtr node = make(ExprKind::kNot, cur().line);
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr operand, parseNot());
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(operand)));
      return node;
    }
    return parseCompare();
  }

  Result<ExprPtr> parseCompare() {
    const int line = cur().line;
    LG_ASSIGN_OR_RETURN(ExprPtr expr, parseMath1());
    ExprPtr cmp;
    while (true) {
      CompareOp op;
      if (cur().type == TokenType::kOperator && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                                  cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        const std::string& v = cur().value;
        op = v == "==" ? CompareOp::kEq
             : v == "!=" ? CompareOp::kNe
             : v == "<"  ? CompareOp::kLt
             : v == "<=" ? CompareOp::kLe
             : v == ">"  ? CompareOp::kGt
                         : CompareOp::kGe;
        next();
      } else if (isName("in")) {
        op = CompareOp::kIn;
        next();
      } else if (isName("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = CompareOp::kNotIn;
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        LG_RETURN_IF_ERROR(adopt(cmp.get(), std::move(expr)));
      }
      LG_ASSIGN_OR_RETURN(ExprPtr rhs, parseMath1());
      cmp->compare_ops.push_back(op);
      LG_RETURN_IF_ERROR(adopt(cmp.get(), std::move(rhs)));
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  Result<ExprPtr> binary(BinaryOp op, int line, ExprPtr left, ExprPtr right) {
    ExprPtr node = make(ExprKind::kBinary, line);
    node->op = static_cast<int>(op);
    LG_RETURN_IF_ERROR(adopt(node.get(), std::move(left)));
    LG_RETURN_IF_ERROR(adopt(node.get(), std::move(right)));
    return node;
  }

  Result<ExprPtr> parseMath1() {
    LG_ASSIGN_OR_RETURN(ExprPtr left, parseConcat());
    while (isOp("+") || isOp("-")) {
      const BinaryOp op = isOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      const int line = cur().line;
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr right, parseConcat());
      LG_ASSIGN_OR_RETURN(left, binary(op, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parseConcat() {
    const int line = cur().line;
    LG_ASSIGN_OR_RETURN(ExprPtr first, parseMath2());
    if (!isOp("~")) return first;
    ExprPtr node = make(ExprKind::kConcat, line);
    LG_RETURN_IF_ERROR(adopt(node.get(), std::move(first)));
    while (skipOp("~")) {
      LG_ASSIGN_OR_RETURN(ExprPtr e, parseMath2());
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(e)));
    }
    return node;
  }

  Result<ExprPtr> parseMath2() {
    LG_ASSIGN_OR_RETURN(ExprPtr left, parsePow());
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      const BinaryOp op = isOp("*") ? BinaryOp::kMul
                          : isOp("/") ? BinaryOp::kDiv
                          : isOp("//") ? BinaryOp::kFloorDiv
                                       : BinaryOp::kMod;
      const int line = cur().line;
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr right, parsePow());
      LG_ASSIGN_OR_RETURN(left, binary(op, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parsePow() {
    LG_ASSIGN_OR_RETURN(ExprPtr left, parseUnary(true));
    while (isOp("**")) {
      const int line = cur().line;
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr right, parseUnary(true));
      LG_ASSIGN_OR_RETURN(left, binary(BinaryOp::kPow, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parseUnary(bool with_filter) {
    DepthGuard guard(this);
    if (expr_depth_ > kMaxExprDepth) return fail(cur().line, "expression nested too deeply");
    ExprPtr node;
    if (isOp("-") || isOp("+")) {
      node = make(isOp("-") ? ExprKind::kNeg : ExprKind::kPos, cur().line);
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr operand, parseUnary(false));
      LG_RETURN_IF_ERROR(adopt(node.get(), std::move(operand)));
    } else {
      LG_ASSIGN_OR_RETURN(node, parsePrimary());
    }
    LG_ASSIGN_OR_RETURN(node, parsePostfix(std::move(node)));
    if (with_filter) {
      LG_ASSIGN_OR_RETURN(node, parseFilterExpr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parsePrimary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == TokenType::kName) {
      ExprPtr node;
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        node = make(ExprKind::kConst, line);
        node->value = Value::boolean(t.value == "true" || t.value == "True", true);
      } else if (t.value == "none" || t.value == "None") {
        node = make(ExprKind::kConst, line);
        node->value = Value::none(true);
      } else {
        node = make(ExprKind::kName, line);
        node->name = t.value;
        node->slot = slotOf(t.value);
      }
      next();
      return node;
    }
    if (t.type == TokenType::kString) {
      std::string text;
      while (cur().type == TokenType::kString) {
        text += cur().value;
        next();
      }
      ExprPtr node = make(ExprKind::kConst, line);
      node->value = Value::string(std::move(text), true);
      return node;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      ExprPtr node = make(ExprKind::kConst, line);
      node->value = t.type == TokenType::kInteger ? Value::integer(t.int_value, true)
                                                  : Value::floating(t.float_value, true);
      next();
      return node;
    }
    if (isOp("(")) {
      next();
      LG_ASSIGN_OR_RETURN(ExprPtr node, parseTuple(true, {}, true));
      LG_RETURN_IF_ERROR(expectOp(")"));
      return node;
    }
    if (isOp("[")) {
      next();
      ExprPtr node = make(ExprKind::kList, line);
      while (!isOp("]")) {
        if (!node->args.empty()) LG_RETURN_IF_ERROR(expectOp(","));
        if (isOp("]")) break;
        LG_ASSIGN_OR_RETURN(ExprPtr item, parseExpression(true));
        LG_RETURN_IF_ERROR(adopt(node.get(), std::move(item)));
      }
      LG_RETURN_IF_ERROR(expectOp("]"));
      return node;
    }
    if (isOp("{")) {
      next();
      ExprPtr node = make(ExprKind::kDict, line);
      while (!isOp("}")) {
        if (!node->args.empty()) LG_RETURN_IF_ERROR(expectOp(","));
        if (isOp("}")) break;
        LG_ASSIGN_OR_RETURN(ExprPtr key, parseExpression(true));
        LG_RETURN_IF_ERROR(expectOp(":"));
        LG_ASSIGN_OR_RETURN(ExprPtr value, parseExpression(true));
        LG_RETURN_IF_ERROR(adopt(node.get(), std::move(key)));
        LG_RETURN_IF_ERROR(adopt(node.get(), std::move(value)));
      }
      LG_RETURN_IF_ERROR(expectOp("}"));
      return node;
    }
    return fail(line, "unexpected '" + describe(t) + "'");
  }

  Result<ExprPtr> parsePostfix(ExprPtr node) {
    while (true) {
      if (isOp(".")) {
        const int line = cur().line;
        next();
        if (cur().type == TokenType::kName) {
          ExprPtr attr = make(ExprKind::kGetattr, line);
          attr->name = cur().value;
          next();
          LG_RETURN_IF_ERROR(adopt(attr.get(), std::move(node)));
          node = std::move(attr);
        } else if (cur().type == TokenType::kInteger) {
          ExprPtr item = make(ExprKind::kGetitem, line);
          ExprPtr key = make(ExprKind::kConst, line);
          key->value = Value::integer(cur().int_value, true);
          next();
          LG_RETURN_IF_ERROR(adopt(item.get(), std::move(node)));
          LG_RETURN_IF_ERROR(adopt(item.get(), std::move(key)));
          node = std::move(item);
        } else {
          return fail(line, "expected name or number");
        }
      } else if (isOp("[")) {
        LG_ASSIGN_OR_RETURN(node, parseSubscript(std::move(node)));
      } else if (isOp("(")) {
        LG_ASSIGN_OR_RETURN(node, parseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parseSubscript(ExprPtr node) {
    const int line = cur().line;
    next();  // [
    std::vector<ExprPtr> keys;
    while (!isOp("]")) {
      if (!keys.empty()) LG_RETURN_IF_ERROR(expectOp(","));
      LG_ASSIGN_OR_RETURN(ExprPtr key, parseSubscribed());
      keys.push_back(std::move(key));
    }
    LG_RETURN_IF_ERROR(expectOp("]"));
    ExprPtr item = make(ExprKind::kGetitem, line);
    LG_RETURN_IF_ERROR(adopt(item.get(), std::move(node)));
    if (keys.size() == 1) {
      LG_RETURN_IF_ERROR(adopt(item.get(), std::move(keys.front())));
    } else {
      ExprPtr tuple = make(ExprKind::kTuple, line);
      for (ExprPtr& key : keys) LG_RETURN_IF_ERROR(adopt(tuple.get(), std::move(key)));
      LG_RETURN_IF_ERROR(adopt(item.get(), std::move(tuple)));
    }
    return item;
  }

  Result<ExprPtr> parseSubscribed() {
    const int line = cur().line;
    ExprPtr start;
    if (!isOp(":")) {
      LG_ASSIGN_OR_RETURN(start, parseExpression(true));
      if (!isOp(":")) return start;
    }
    next();  // first colon
    ExprPtr slice = make(ExprKind::kSlice, line);
    ExprPtr stop, step;
    if (!isOp(":") && !isOp("]") && !isOp(",")) {
      LG_ASSIGN_OR_RETURN(stop, parseExpression(true));
    }
    if (skipOp(":")) {
      if (!isOp("]") && !isOp(",")) {
        LG_ASSIGN_OR_RETURN(step, parseExpression(true));
      }
    }
    LG_RETURN_IF_ERROR(adopt(slice.get(), std::move(start)));
    LG_RETURN_IF_ERROR(adopt(slice.get(), std::move(stop)));
    LG_RETURN_IF_ERROR(adopt(slice.get(), std::move(step)));
    return slice;
  }

  // Call arguments into node->args (after any existing ones) and kwnames.
  Status parseCallArgs(Expr* node) {
    const int line = cur().line;
    next();  // (
    bool need_comma = false;
    while (!isOp(")")) {
      if (need_comma) {
        LG_RETURN_IF_ERROR(expectOp(","));
        if (isOp(")")) break;
      }
      if (isOp("*") || isOp("**")) return unsupported(line, "*args/**kwargs in calls");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        LG_ASSIGN_OR_RETURN(ExprPtr value, parseExpression(true));
        node->kwnames.push_back(std::move(key));
        LG_RETURN_IF_ERROR(adopt(node, std::move(value)));
      } else {
        if (!node->kwnames.empty()) return fail(line, "invalid syntax for function call expression");
        LG_ASSIGN_OR_RETURN(ExprPtr value, parseExpression(true));
        LG_RETURN_IF_ERROR(adopt(node, std::move(value)));
      }
      need_comma = true;
    }
    return expectOp(")");
  }

  Result<ExprPtr> parseCall(ExprPtr callee) {
    const int line = cur().line;
    // Every callable is known at load time: global functions by name, methods
    // by name, anything else cannot be called in this subset.
    if (callee->kind == ExprKind::kName) {
      if (!lookupGlobalFunction(callee->name)) return unsupported(line, "the function '" + callee->name + "'");
    } else if (callee->kind == ExprKind::kGetattr) {
      if (!isSupportedMethodName(callee->name)) return unsupported(line, "the method '" + callee->name + "'");
    } else {
      return unsupported(line, "calling this kind of expression");
    }
    ExprPtr call = make(ExprKind::kCall, line);
    call->name = callee->name;
    LG_RETURN_IF_ERROR(adopt(call.get(), std::move(callee)));
    LG_RETURN_IF_ERROR(parseCallArgs(call.get()));
    return call;
  }

  Result<ExprPtr> parseFilterExpr(ExprPtr node) {
    while (true) {
      if (isOp("|")) {
        LG_ASSIGN_OR_RETURN(node, parseFilter(std::move(node)));
      } else if (isName("is")) {
        LG_ASSIGN_OR_RETURN(node, parseTest(std::move(node)));
      } else if (isOp("(")) {
        LG_ASSIGN_OR_RETURN(node, parseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<std::string> dottedName() {
    LG_ASSIGN_OR_RETURN(std::string name, expectName());
    while (skipOp(".")) {
      LG_ASSIGN_OR_RETURN(std::string part, expectName());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> parseFilter(ExprPtr node) {
    while (skipOp("|")) {
      const int line = cur().line;
      LG_ASSIGN_OR_RETURN(std::string name, dottedName());
      const auto id = lookupFilter(name);
      if (!id) return unsupported(line, "the filter '" + name + "'");
      ExprPtr filter = make(ExprKind::kFilter, line);
      filter->name = name;
      filter->op = static_cast<int>(*id);
      LG_RETURN_IF_ERROR(adopt(filter.get(), std::move(node)));
      if (isOp("(")) LG_RETURN_IF_ERROR(parseCallArgs(filter.get()));
      node = std::move(filter);
    }
    return node;
  }

  Result<ExprPtr> parseTest(ExprPtr node) {
    const int line = cur().line;
    next();  // is
    const bool negated = skipName("not");
    LG_ASSIGN_OR_RETURN(std::string name, dottedName());
    const auto id = lookupTest(name);
    if (!id) return unsupported(line, "the test '" + name + "'");
    ExprPtr test = make(ExprKind::kTest, line);
    test->name = name;
    test->op = static_cast<int>(*id);
    LG_RETURN_IF_ERROR(adopt(test.get(), std::move(node)));
    const TokenType t = cur().type;
    if (isOp("(")) {
      LG_RETURN_IF_ERROR(parseCallArgs(test.get()));
    } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
                t == TokenType::kFloat || isOp("[") || isOp("{")) &&
               !isName("else") && !isName("or") && !isName("and")) {
      if (isName("is")) return fail(cur().line, "You cannot chain multiple tests with is");
      LG_ASSIGN_OR_RETURN(ExprPtr arg, parsePrimary());
      LG_ASSIGN_OR_RETURN(arg, parsePostfix(std::move(arg)));
      LG_RETURN_IF_ERROR(adopt(test.get(), std::move(arg)));
    }
    if (!negated) return test;
    ExprPtr n = make(ExprKind::kNot, line);
    LG_RETURN_IF_ERROR(adopt(n.get(), std::move(test)));
    return n;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::vector<std::string> names_;
  int expr_depth_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<TemplateAst> parseTemplate(std::string_view source) {
  LG_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  Parser parser(std::move(tokens));
  return parser.run();
}

}  // namespace lg::text::jinja

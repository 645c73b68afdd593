//===- ParseStmt.cpp - Parsing blocks and statements ----------------------===//
#include "ParserImpl.h"

#include "qd/ir/Verifier.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace qd {

std::optional<StmtKind> stmtKindForKeyword(std::string_view keyword) {
  if (parseBinaryOp(keyword))
    return StmtKind::Binary;
  if (parseUnaryOp(keyword))
    return StmtKind::Unary;
  if (keyword == "parallel") // `parallel for`
    return StmtKind::For;
  // The first row wins: `load`/`store` give the local kinds, and the access
  // target decides (parseGlobalTarget).
  for (const StmtKindInfo &row : kStmtKindInfos)
    if (!printsOperator(row.kind) && row.mnemonic == keyword)
      return row.kind;
  return std::nullopt;
}

namespace parse {

bool Parser::parseBlock(Block &block) {
  // The parser recurses once per level: stop at the IR's nesting limit
  // (counted as the verifier does: the kernel's body is level 0).
  if (blockDepth_ > kMaxBlockNesting)
    return failHere(fmt::format("blocks nest more than {} deep (the limit of qd's IR, "
                                "kMaxBlockNesting); flatten the nesting or split the kernel",
                                kMaxBlockNesting));
  struct Nest {
    unsigned &depth;
    explicit Nest(unsigned &d) : depth(++d) {}
    ~Nest() { --depth; }
  } nest(blockDepth_);
  if (!expect(Tok::LBrace, "'{' to open a block"))
    return false;
  while (tok_.kind != Tok::RBrace) {
    if (tok_.kind == Tok::Eof)
      return failHere("expected '}' to close the block, found end of input");
    Location stmtLoc = here();
    std::unique_ptr<Stmt> s = parseStmt();
    if (!s)
      return false;
    if (!s->loc().isKnown())
      s->setLoc(stmtLoc);
    Stmt *raw = block.push_back(std::move(s));
    if (pendingBodies_)
      if (!parseBodies(*raw))
        return false;
  }
  consume();
  return true;
}

bool Parser::parseBodies(Stmt &s) {
  pendingBodies_ = false;
  if (auto *i = dyn_cast<IfStmt>(&s)) {
    if (!parseBlock(i->thenBlock()))
      return false;
    if (isKeyword("else")) {
      consume();
      return parseBlock(i->elseBlock());
    }
    return true;
  }
  return parseBlock(s.block(0));
}

std::unique_ptr<Stmt> Parser::parseStmt() {
  if (tok_.kind == Tok::Local) {
    Token nameTok = tok_;
    consume();
    if (!expect(Tok::Equal, "'=' after the result name"))
      return nullptr;
    if (tok_.kind != Tok::Ident) {
      failHere(fmt::format("expected an operation after '=', found {}", found()));
      return nullptr;
    }
    Token opTok = tok_;
    std::optional<StmtKind> kind = stmtKindForKeyword(opTok.text);
    if (!kind) {
      fail(opTok, fmt::format("unknown operation '{}'", opTok.text));
      return nullptr;
    }
    if (!printsResult(*kind)) {
      fail(opTok,
           fmt::format("'{}' does not produce a value; remove '%{} ='", opTok.text, nameTok.text));
      return nullptr;
    }
    consume();
    std::unique_ptr<Stmt> s = parseOperation(*kind, opTok.text);
    if (!s || !define(nameTok, s.get()))
      return nullptr;
    s->setLoc(loc(nameTok));
    return s;
  }
  if (tok_.kind != Tok::Ident) {
    failHere(fmt::format("expected a statement, found {}", found()));
    return nullptr;
  }
  Token kwTok = tok_;
  std::optional<StmtKind> kind = stmtKindForKeyword(kwTok.text);
  if (!kind) {
    fail(kwTok, fmt::format("unknown statement '{}'", kwTok.text));
    return nullptr;
  }
  if (printsResult(*kind)) {
    fail(kwTok,
         fmt::format("'{}' produces a value; write '%name = {} ...'", kwTok.text, kwTok.text));
    return nullptr;
  }
  consume();
  return parseOperation(*kind, kwTok.text);
}

std::unique_ptr<Stmt> Parser::parseOperation(StmtKind kind, std::string_view kw) {
  // No default: a kind added to StmtKinds.def must be parsed here (-Wswitch).
  switch (kind) {
  case StmtKind::Const:
    return parseConst();
  case StmtKind::Binary: {
    std::vector<Value *> ops;
    ScalarType t;
    if (!parseOperands(ops, 2) || !parseTypeSuffix(t))
      return nullptr;
    return std::make_unique<BinaryStmt>(*parseBinaryOp(kw), ops[0], ops[1], Type::scalar(t));
  }
  case StmtKind::Unary: {
    std::vector<Value *> ops;
    ScalarType t;
    if (!parseOperands(ops, 1) || !parseTypeSuffix(t))
      return nullptr;
    return std::make_unique<UnaryStmt>(*parseUnaryOp(kw), ops[0], Type::scalar(t));
  }
  case StmtKind::Cmp:
    return parseCmp();
  case StmtKind::Select: {
    std::vector<Value *> ops;
    ScalarType t;
    if (!parseOperands(ops, 3) || !parseTypeSuffix(t))
      return nullptr;
    return std::make_unique<SelectStmt>(ops[0], ops[1], ops[2], Type::scalar(t));
  }
  case StmtKind::Cast: {
    std::vector<Value *> ops;
    ScalarType from, to;
    if (!parseOperands(ops, 1) || !parseTypeSuffix(from) || !expectKeyword("to") ||
        !parseScalarTypeTok(to))
      return nullptr;
    return std::make_unique<CastStmt>(ops[0], from, to);
  }
  case StmtKind::Alloca: {
    ScalarType t;
    if (!parseScalarTypeTok(t))
      return nullptr;
    return std::make_unique<AllocaStmt>(t);
  }
  case StmtKind::LocalLoad:
  case StmtKind::GlobalLoad:
    return parseLoad();
  case StmtKind::LocalStore:
  case StmtKind::GlobalStore:
    return parseStore();
  case StmtKind::AtomicAdd:
  case StmtKind::AtomicMax:
    return parseAtomicRmw(kind);
  case StmtKind::Shape:
    return parseShape();
  case StmtKind::TaskIndex:
    return parseTaskIndex();
  case StmtKind::For:
    if (kw == "parallel" && !expectKeyword("for"))
      return nullptr;
    return parseFor(kw == "parallel");
  case StmtKind::Serial:
    pendingBodies_ = true;
    return std::make_unique<SerialStmt>();
  case StmtKind::While:
    pendingBodies_ = true;
    return std::make_unique<WhileStmt>();
  case StmtKind::If: {
    Value *cond;
    if (!parseValue(cond, "a condition '%name'"))
      return nullptr;
    pendingBodies_ = true;
    return std::make_unique<IfStmt>(cond);
  }
  case StmtKind::Break:
    return std::make_unique<BreakStmt>();
  case StmtKind::Continue:
    return std::make_unique<ContinueStmt>();
  case StmtKind::AdStackAlloca:
    return parseAdStackAlloca();
  case StmtKind::AdStackPush:
  case StmtKind::AdStackAccAdjoint: {
    std::vector<Value *> ops;
    if (!parseOperands(ops, 2))
      return nullptr;
    if (kind == StmtKind::AdStackPush)
      return std::make_unique<AdStackPushStmt>(ops[0], ops[1]);
    return std::make_unique<AdStackAccAdjointStmt>(ops[0], ops[1]);
  }
  case StmtKind::AdStackPop: {
    Value *s;
    if (!parseValue(s, "an adstack '%name'"))
      return nullptr;
    return std::make_unique<AdStackPopStmt>(s);
  }
  case StmtKind::AdStackLoadTop:
  case StmtKind::AdStackLoadTopAdj: {
    Value *s;
    ScalarType t;
    if (!parseValue(s, "an adstack '%name'") || !parseTypeSuffix(t))
      return nullptr;
    if (kind == StmtKind::AdStackLoadTop)
      return std::make_unique<AdStackLoadTopStmt>(s, Type::scalar(t));
    return std::make_unique<AdStackLoadTopAdjStmt>(s, Type::scalar(t));
  }
  }
  failHere(fmt::format("unknown statement '{}'", kw));
  return nullptr;
}

std::unique_ptr<Stmt> Parser::parseCmp() {
  std::optional<CmpPredicate> pred;
  if (tok_.kind == Tok::Ident)
    pred = parseCmpPredicate(tok_.text);
  if (!pred) {
    failHere(
        fmt::format("expected a comparison predicate (eq, ne, lt, le, gt, ge), found {}", found()));
    return nullptr;
  }
  consume();
  std::vector<Value *> ops;
  ScalarType t;
  if (!parseOperands(ops, 2) || !parseTypeSuffix(t))
    return nullptr;
  return std::make_unique<CmpStmt>(*pred, ops[0], ops[1], t);
}

std::unique_ptr<Stmt> Parser::parseShape() {
  Value *arr;
  int64_t axis;
  ScalarType t;
  if (!parseValue(arr, "an ndarray argument '%name'") || !expect(Tok::Comma, "',' before the axis"))
    return nullptr;
  Token axisTok = tok_;
  if (!parseInteger(axis, "axis number"))
    return nullptr;
  if (axis < 0 || axis > 7) {
    fail(axisTok, fmt::format("axis must be between 0 and 7, got {}", axis));
    return nullptr;
  }
  if (!parseTypeSuffix(t))
    return nullptr;
  return std::make_unique<ShapeStmt>(arr, static_cast<unsigned>(axis), Type::scalar(t));
}

std::unique_ptr<Stmt> Parser::parseAdStackAlloca() {
  ScalarType t;
  int64_t cap;
  if (!parseScalarTypeTok(t) || !expect(Tok::Comma, "',' after the element type") ||
      !expectKeyword("capacity"))
    return nullptr;
  if (tok_.kind == Tok::Local) {
    Value *arg;
    if (!parseValue(arg, "a capacity argument '%name'"))
      return nullptr;
    return std::make_unique<AdStackAllocaStmt>(t, arg);
  }
  Token capTok = tok_;
  if (!parseInteger(cap, "capacity"))
    return nullptr;
  if (cap < 0) {
    fail(capTok, fmt::format("capacity must be non-negative, got {}", cap));
    return nullptr;
  }
  return std::make_unique<AdStackAllocaStmt>(t, cap);
}

std::unique_ptr<Stmt> Parser::parseConst() {
  Token valueTok = tok_;
  if (tok_.kind != Tok::Number && !isKeyword("true") && !isKeyword("false")) {
    failHere(fmt::format("expected a constant value, found {}", found()));
    return nullptr;
  }
  consume();
  ScalarType t;
  if (!parseTypeSuffix(t))
    return nullptr;
  std::string_view text = valueTok.text;
  if (t == ScalarType::I1) {
    if (text == "true" || text == "1")
      return ConstStmt::getInt(t, 1);
    if (text == "false" || text == "0")
      return ConstStmt::getInt(t, 0);
    fail(valueTok, fmt::format("expected true or false for an i1 constant, found '{}'", text));
    return nullptr;
  }
  if (text == "true" || text == "false") {
    fail(valueTok, fmt::format("'{}' is only valid for i1 constants", text));
    return nullptr;
  }
  if (text.starts_with('+'))
    text.remove_prefix(1);
  if (isInteger(t)) {
    int64_t v;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && ptr == text.data() + text.size()) {
      if (t == ScalarType::I32 &&
          (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())) {
        fail(valueTok, fmt::format("constant {} does not fit in i32", v));
        return nullptr;
      }
      return ConstStmt::getInt(t, v);
    }
    if (ec == std::errc::result_out_of_range)
      fail(valueTok, fmt::format("constant {} does not fit in i64", text));
    else
      fail(valueTok, fmt::format("expected an integer constant for {}, found '{}'", toString(t),
                                 valueTok.text));
    return nullptr;
  }
  // Floats: parse directly in the target precision so f32 literals round
  // once, exactly as the printer's shortest form expects.
  bool negative = text.starts_with('-');
  std::string_view body = negative ? text.substr(1) : text;
  double value;
  if (body == "inf") {
    value = std::numeric_limits<double>::infinity();
  } else if (body == "nan") {
    value = std::numeric_limits<double>::quiet_NaN();
  } else {
    std::from_chars_result r;
    if (t == ScalarType::F32) {
      float f;
      r = std::from_chars(body.data(), body.data() + body.size(), f);
      value = f;
    } else {
      r = std::from_chars(body.data(), body.data() + body.size(), value);
    }
    if (r.ec == std::errc::result_out_of_range) {
      fail(valueTok, fmt::format("constant {} is out of range for {}", text, toString(t)));
      return nullptr;
    }
    if (r.ec != std::errc() || r.ptr != body.data() + body.size()) {
      fail(valueTok, fmt::format("expected a floating-point constant, found '{}'", text));
      return nullptr;
    }
  }
  return ConstStmt::getFloat(t, negative ? -value : value);
}

bool Parser::parseGlobalTarget(GlobalRef &ref, std::vector<Value *> &indices, bool &isLocal,
                               Value *&local) {
  isLocal = false;
  Token target = tok_;
  if (tok_.kind == Tok::Global) {
    auto [name, comp] = splitComponent(tok_.text);
    Field *f = module_->findField(name);
    if (!f)
      return failHere(fmt::format("unknown field '@{}'", name));
    ref = GlobalRef::ofField(f, comp);
    consume();
  } else if (tok_.kind == Tok::Local) {
    consume();
    if (tok_.kind != Tok::LBracket) {
      isLocal = true;
      local = lookup(target);
      return true;
    }
    Component comp = Component::Primal;
    std::string_view name = target.text;
    auto known = values_.find(std::string(name));
    if (known == values_.end() || !known->second.value->type().isNdarray()) {
      auto [base, c] = splitComponent(name);
      if (c != Component::Primal && values_.count(std::string(base))) {
        name = base;
        comp = c;
      }
    }
    Token nameTok = target;
    nameTok.text = name;
    ref = GlobalRef::ofNdarray(lookup(nameTok), comp);
  } else {
    return failHere(fmt::format("expected a field '@name' or value '%name', found {}", found()));
  }
  if (!expect(Tok::LBracket, "'[' to start the index list"))
    return false;
  if (tok_.kind != Tok::RBracket) {
    do {
      Value *v;
      if (!parseValue(v, "an index '%name'"))
        return false;
      indices.push_back(v);
      if (tok_.kind != Tok::Comma)
        break;
      consume();
    } while (true);
  }
  return expect(Tok::RBracket, "']' or ',' in the index list");
}

std::pair<std::string_view, Component> Parser::splitComponent(std::string_view name) {
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) {
    std::string_view suffix = name.substr(dot + 1);
    if (suffix == "grad")
      return {name.substr(0, dot), Component::Grad};
    if (suffix == "dual")
      return {name.substr(0, dot), Component::Dual};
  }
  return {name, Component::Primal};
}

std::unique_ptr<Stmt> Parser::parseLoad() {
  GlobalRef ref;
  std::vector<Value *> indices;
  bool isLocal;
  Value *local = nullptr;
  ScalarType t;
  if (!parseGlobalTarget(ref, indices, isLocal, local) || !parseTypeSuffix(t))
    return nullptr;
  if (isLocal)
    return std::make_unique<LocalLoadStmt>(local, Type::scalar(t));
  return std::make_unique<GlobalLoadStmt>(ref, indices, Type::scalar(t));
}

std::unique_ptr<Stmt> Parser::parseStore() {
  GlobalRef ref;
  std::vector<Value *> indices;
  bool isLocal;
  Value *local = nullptr, *value;
  if (!parseGlobalTarget(ref, indices, isLocal, local) ||
      !expect(Tok::Comma, "',' before the stored value") ||
      !parseValue(value, "the stored value '%name'"))
    return nullptr;
  if (isLocal)
    return std::make_unique<LocalStoreStmt>(local, value);
  return std::make_unique<GlobalStoreStmt>(ref, indices, value);
}

std::unique_ptr<Stmt> Parser::parseAtomicRmw(StmtKind kind) {
  GlobalRef ref;
  std::vector<Value *> indices;
  bool isLocal;
  Value *local = nullptr, *value;
  Token target = tok_;
  if (!parseGlobalTarget(ref, indices, isLocal, local))
    return nullptr;
  if (isLocal) {
    fail(target, fmt::format("{} needs a field or ndarray element, e.g. '@x[%i]'", mnemonic(kind)));
    return nullptr;
  }
  ScalarType t;
  if (!expect(Tok::Comma, "',' before the added value") ||
      !parseValue(value, "the added value '%name'") || !parseTypeSuffix(t))
    return nullptr;
  if (kind == StmtKind::AtomicMax)
    return std::make_unique<AtomicMaxStmt>(ref, indices, value, t);
  return std::make_unique<AtomicAddStmt>(ref, indices, value, t);
}

bool Parser::parseBound(Bound &b) {
  if (tok_.kind == Tok::Local) {
    b = Bound::of(lookup(tok_));
    consume();
    return true;
  }
  Token at = tok_;
  int64_t c;
  if (!parseInteger(c, "a loop bound (integer or '%name')"))
    return false;
  if (c < std::numeric_limits<int32_t>::min() || c > std::numeric_limits<int32_t>::max())
    return fail(at, fmt::format("loop bound {} does not fit in i32", c));
  b = Bound::of(c);
  return true;
}

std::unique_ptr<Stmt> Parser::parseFor(bool parallel) {
  if (parallel && tok_.kind == Tok::LParen)
    return parseBand();
  Token indexTok = tok_;
  if (!expect(Tok::Local, "loop index '%name'") || !expect(Tok::Equal, "'=' after the loop index"))
    return nullptr;
  Bound begin, end;
  if (!parseBound(begin) || !expectKeyword("to") || !parseBound(end))
    return nullptr;
  auto f = std::make_unique<ForStmt>(begin, end, parallel);
  if (!define(indexTok, f.get()))
    return nullptr;
  pendingBodies_ = true;
  return f;
}

// `parallel for (%i, %j) = (b0, b1) to (e0, e1)`: one index and one pair of
// bounds per dimension.
std::unique_ptr<Stmt> Parser::parseBand() {
  Token open = tok_;
  std::vector<Token> names;
  auto list = [&](auto &&item, std::string_view what) {
    if (!expect(Tok::LParen, fmt::format("'(' to open the {}", what)))
      return false;
    do {
      if (!item())
        return false;
    } while (tok_.kind == Tok::Comma && (consume(), true));
    return expect(Tok::RParen, fmt::format("',' or ')' in the {}", what));
  };
  bool ok = list(
      [&] {
        names.push_back(tok_);
        return expect(Tok::Local, "a loop index '%name'");
      },
      "loop indices");
  if (!ok || !expect(Tok::Equal, "'=' after the loop indices"))
    return nullptr;
  if (names.size() > ForStmt::kMaxDims) {
    fail(open, fmt::format("a parallel for has at most {} dimensions, this one has {}; flatten "
                           "some of them into one index",
                           ForStmt::kMaxDims, names.size()));
    return nullptr;
  }
  std::vector<Bound> begins, ends;
  auto bounds = [&](std::vector<Bound> &out, std::string_view what) {
    Token at = tok_;
    if (!list(
            [&] {
              Bound b;
              if (!parseBound(b))
                return false;
              out.push_back(b);
              return true;
            },
            what))
      return false;
    if (out.size() != names.size())
      return fail(at, fmt::format("{} bounds for {} loop indices; give one per index", out.size(),
                                  names.size()));
    return true;
  };
  if (!bounds(begins, "lower bounds") || !expectKeyword("to") || !bounds(ends, "upper bounds"))
    return nullptr;
  auto f = std::make_unique<ForStmt>(begins, ends);
  if (!define(names[0], f.get()))
    return nullptr;
  for (unsigned d = 1; d < names.size(); ++d) {
    Stmt *index = f->body().push_back(std::make_unique<TaskIndexStmt>(d));
    index->setLoc(loc(names[d]));
    if (!define(names[d], index))
      return nullptr;
  }
  pendingBodies_ = true;
  return f;
}

std::unique_ptr<Stmt> Parser::parseTaskIndex() {
  Token at = tok_;
  int64_t d;
  if (!parseInteger(d, "the task dimension"))
    return nullptr;
  if (d < 0 || d >= int64_t(ForStmt::kMaxDims)) {
    fail(at, fmt::format("task dimension {} is out of range [0, {})", d, ForStmt::kMaxDims));
    return nullptr;
  }
  return std::make_unique<TaskIndexStmt>(static_cast<unsigned>(d));
}

} // namespace parse
} // namespace qd

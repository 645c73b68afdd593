//===- Parser.cpp - Reading the text format -------------------------------===//
//
// A hand-written lexer and recursive-descent parser. Every error is reported
// as `file:line:col: error: expected ...` at the offending token; the first
// error stops parsing. Uses before definitions are allowed (resolved at the
// end of the kernel) so that dominance errors reach the verifier, which words
// them better than a parser could.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Parser.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace qd {
namespace {

enum class Tok : uint8_t {
  Eof,
  Ident,  // keywords and mnemonics: for, add, adstack.push, f32...
  Local,  // %name
  Global, // @name
  Number, // -12, 1.5e3, inf, -nan
  LBrace,
  RBrace,
  LParen,
  RParen,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Equal,
  Less,
  Greater,
  Error,
};

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; // for Local/Global without the sigil
  uint32_t line = 0;
  uint32_t col = 0;
};

bool isIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}
bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view describe(Tok t) {
  switch (t) {
  case Tok::Eof:
    return "end of input";
  case Tok::Ident:
    return "identifier";
  case Tok::Local:
    return "'%' value";
  case Tok::Global:
    return "'@' name";
  case Tok::Number:
    return "number";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::Comma:
    return "','";
  case Tok::Colon:
    return "':'";
  case Tok::Equal:
    return "'='";
  case Tok::Less:
    return "'<'";
  case Tok::Greater:
    return "'>'";
  case Tok::Error:
    return "invalid character";
  }
  return "token";
}

class Lexer {
public:
  Lexer(std::string_view text, unsigned firstLine) : text_(text), line_(firstLine) {}

  Token next() {
    skipSpaceAndComments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= text_.size()) {
      t.kind = Tok::Eof;
      return t;
    }
    char c = text_[pos_];
    size_t start = pos_;
    auto single = [&](Tok k) {
      advance();
      t.kind = k;
      t.text = text_.substr(start, 1);
      return t;
    };
    switch (c) {
    case '{':
      return single(Tok::LBrace);
    case '}':
      return single(Tok::RBrace);
    case '(':
      return single(Tok::LParen);
    case ')':
      return single(Tok::RParen);
    case '[':
      return single(Tok::LBracket);
    case ']':
      return single(Tok::RBracket);
    case ',':
      return single(Tok::Comma);
    case ':':
      return single(Tok::Colon);
    case '=':
      return single(Tok::Equal);
    case '<':
      return single(Tok::Less);
    case '>':
      return single(Tok::Greater);
    case '%':
    case '@': {
      advance();
      size_t nameStart = pos_;
      while (pos_ < text_.size() && isIdentChar(text_[pos_]))
        advance();
      t.kind = c == '%' ? Tok::Local : Tok::Global;
      t.text = text_.substr(nameStart, pos_ - nameStart);
      if (t.text.empty())
        t.kind = Tok::Error, t.text = text_.substr(start, 1);
      return t;
    }
    default:
      break;
    }
    if (isDigit(c) || c == '-' || c == '+') {
      advance();
      // Exponent signs are part of the number: 1e-5.
      while (pos_ < text_.size() &&
             (isIdentChar(text_[pos_]) || ((text_[pos_] == '-' || text_[pos_] == '+') &&
                                           (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E'))))
        advance();
      t.kind = Tok::Number;
      t.text = text_.substr(start, pos_ - start);
      return t;
    }
    if (isIdentChar(c)) {
      while (pos_ < text_.size() && isIdentChar(text_[pos_]))
        advance();
      t.text = text_.substr(start, pos_ - start);
      t.kind = (t.text == "inf" || t.text == "nan") ? Tok::Number : Tok::Ident;
      return t;
    }
    advance();
    t.kind = Tok::Error;
    t.text = text_.substr(start, 1);
    return t;
  }

private:
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n')
          advance();
      } else {
        break;
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  uint32_t line_;
  uint32_t col_ = 1;
};

/// A use of a name not yet defined; replaced when the definition appears.
class ForwardRef : public Value {
public:
  explicit ForwardRef(Location loc) : Value(ValueKind::Placeholder, Type()), loc(std::move(loc)) {}
  Location loc;
};

class ParseError {
public:
  explicit ParseError(std::string message) : message(std::move(message)) {}
  std::string message;
};

class Parser {
public:
  Parser(std::string_view text, const ParseOptions &options)
      : lexer_(text, options.firstLine),
        file_(std::make_shared<const std::string>(options.filename)) {
    tok_ = lexer_.next();
  }

  absl::StatusOr<std::unique_ptr<Module>> run() {
    auto module = std::make_unique<Module>();
    if (!parseModule(*module))
      return absl::InvalidArgumentError(error_);
    return module;
  }

private:
  // --- token helpers -------------------------------------------------------
  Location loc(const Token &t) const { return Location(file_, t.line, t.col); }
  Location here() const { return loc(tok_); }
  void consume() { tok_ = lexer_.next(); }

  bool fail(const Token &at, std::string message) {
    if (error_.empty())
      error_ = fmt::format("{}:{}:{}: error: {}", *file_, at.line, at.col, message);
    return false;
  }
  bool failHere(std::string message) { return fail(tok_, std::move(message)); }
  std::string found() const {
    if (tok_.kind == Tok::Eof)
      return std::string(describe(tok_.kind));
    std::string prefix = tok_.kind == Tok::Local ? "%" : tok_.kind == Tok::Global ? "@" : "";
    return fmt::format("'{}{}'", prefix, tok_.text);
  }
  bool expect(Tok kind, std::string_view what) {
    if (tok_.kind != kind)
      return failHere(fmt::format("expected {}, found {}", what, found()));
    consume();
    return true;
  }
  bool isKeyword(std::string_view kw) const { return tok_.kind == Tok::Ident && tok_.text == kw; }
  bool expectKeyword(std::string_view kw) {
    if (!isKeyword(kw))
      return failHere(fmt::format("expected '{}', found {}", kw, found()));
    consume();
    return true;
  }

  // --- literals and types --------------------------------------------------
  bool parseInteger(int64_t &out, std::string_view what) {
    if (tok_.kind != Tok::Number)
      return failHere(fmt::format("expected {}, found {}", what, found()));
    std::string_view t = tok_.text;
    if (!t.empty() && t[0] == '+')
      t.remove_prefix(1);
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    if (ec == std::errc::result_out_of_range)
      return failHere(fmt::format("integer '{}' does not fit in 64 bits", tok_.text));
    if (ec != std::errc() || ptr != t.data() + t.size())
      return failHere(fmt::format("expected {}, found {}", what, found()));
    consume();
    return true;
  }

  bool parseScalarTypeTok(ScalarType &out) {
    std::optional<ScalarType> t;
    if (tok_.kind == Tok::Ident)
      t = parseScalarType(tok_.text);
    if (!t)
      return failHere(
          fmt::format("expected a scalar type (i1, i32, i64, f32, f64), found {}", found()));
    out = *t;
    consume();
    return true;
  }

  /// Scalar type or `ndarray<T, N>`.
  bool parseArgType(Type &out) {
    if (isKeyword("ndarray")) {
      consume();
      ScalarType elem;
      int64_t ndim;
      if (!expect(Tok::Less, "'<' after 'ndarray'") || !parseScalarTypeTok(elem) ||
          !expect(Tok::Comma, "',' between element type and rank"))
        return false;
      Token at = tok_;
      if (!parseInteger(ndim, "ndarray rank"))
        return false;
      if (ndim < 1 || ndim > 8)
        return fail(at, fmt::format("ndarray rank must be between 1 and 8, got {}", ndim));
      if (!expect(Tok::Greater, "'>' to close the ndarray type"))
        return false;
      out = Type::ndarray(elem, static_cast<unsigned>(ndim));
      return true;
    }
    ScalarType t;
    if (!parseScalarTypeTok(t))
      return false;
    out = Type::scalar(t);
    return true;
  }

  bool parseCompanions(bool &grad, bool &dual) {
    grad = dual = false;
    while (isKeyword("grad") || isKeyword("dual")) {
      bool &flag = tok_.text == "grad" ? grad : dual;
      if (flag)
        return failHere(fmt::format("duplicate '{}' companion", tok_.text));
      flag = true;
      consume();
    }
    return true;
  }

  // --- module level --------------------------------------------------------
  bool parseModule(Module &m) {
    module_ = &m;
    while (tok_.kind != Tok::Eof) {
      if (isKeyword("field")) {
        if (!parseField(m))
          return false;
      } else if (isKeyword("kernel")) {
        if (!parseKernel(m))
          return false;
      } else {
        return failHere(fmt::format("expected 'field' or 'kernel', found {}", found()));
      }
    }
    return true;
  }

  bool parseField(Module &m) {
    Location fieldLoc = here();
    consume();
    Token nameTok = tok_;
    if (!expect(Tok::Global, "field name '@name'"))
      return false;
    if (nameTok.text.find('.') != std::string_view::npos)
      return fail(nameTok, fmt::format("field name '@{}' must not contain '.'", nameTok.text));
    if (Field *prev = m.findField(nameTok.text))
      return fail(nameTok, fmt::format("redefinition of field '@{}' (first defined at {})",
                                       nameTok.text, prev->loc().str()));
    ScalarType elem;
    if (!expect(Tok::Colon, "':' after the field name") || !parseScalarTypeTok(elem))
      return false;
    std::vector<int64_t> shape;
    if (tok_.kind == Tok::LBracket) {
      consume();
      do {
        Token at = tok_;
        int64_t d;
        if (!parseInteger(d, "field extent"))
          return false;
        if (d < 1)
          return fail(at, fmt::format("field extent must be positive, got {}", d));
        shape.push_back(d);
        if (tok_.kind != Tok::Comma)
          break;
        consume();
      } while (true);
      if (!expect(Tok::RBracket, "']' or ',' in the field shape"))
        return false;
    }
    bool grad, dual;
    if (!parseCompanions(grad, dual))
      return false;
    auto f = std::make_unique<Field>(std::string(nameTok.text), elem, std::move(shape), grad, dual);
    f->setLoc(fieldLoc);
    m.addField(std::move(f));
    return true;
  }

  bool parseKernel(Module &m) {
    Location kernelLoc = here();
    consume();
    Token nameTok = tok_;
    if (!expect(Tok::Global, "kernel name '@name'"))
      return false;
    if (Kernel *prev = m.findKernel(nameTok.text))
      return fail(nameTok, fmt::format("redefinition of kernel '@{}' (first defined at {})",
                                       nameTok.text, prev->loc().str()));
    auto owned = std::make_unique<Kernel>(std::string(nameTok.text));
    Kernel *k = owned.get();
    k->setLoc(kernelLoc);
    m.addKernel(std::move(owned));
    values_.clear();
    forwardRefs_.clear();

    if (!expect(Tok::LParen, "'(' to start the argument list"))
      return false;
    if (tok_.kind != Tok::RParen) {
      do {
        Token argTok = tok_;
        if (!expect(Tok::Local, "argument name '%name'"))
          return false;
        Type type;
        bool grad, dual;
        if (!expect(Tok::Colon, "':' after the argument name") || !parseArgType(type) ||
            !parseCompanions(grad, dual))
          return false;
        auto arg = std::make_unique<Argument>(std::string(argTok.text), type, grad, dual);
        arg->setLoc(loc(argTok));
        if (!define(argTok, k->addArgument(std::move(arg))))
          return false;
        if (tok_.kind != Tok::Comma)
          break;
        consume();
      } while (true);
    }
    if (!expect(Tok::RParen, "')' or ',' in the argument list"))
      return false;
    if (!parseBlock(k->body()))
      return false;
    // Report the earliest unresolved use so the message is deterministic.
    const ForwardRef *first = nullptr;
    std::string firstName;
    for (auto &[name, ref] : forwardRefs_)
      if (!first || std::pair(ref->loc.line(), ref->loc.col()) <
                        std::pair(first->loc.line(), first->loc.col())) {
        first = ref.get();
        firstName = name;
      }
    if (first)
      return fail(refToken(*first), fmt::format("use of undefined value '%{}'", firstName));
    return true;
  }

  Token refToken(const ForwardRef &ref) const {
    Token t;
    t.line = ref.loc.line();
    t.col = ref.loc.col();
    return t;
  }

  // --- values --------------------------------------------------------------
  bool define(const Token &nameTok, Value *v) {
    std::string name(nameTok.text);
    auto it = values_.find(name);
    if (it != values_.end())
      return fail(nameTok, fmt::format("redefinition of '%{}' (first defined at {})", name,
                                       Location(file_, it->second.line, it->second.col).str()));
    v->setName(name);
    values_[name] = {v, nameTok.line, nameTok.col};
    auto ref = forwardRefs_.find(name);
    if (ref != forwardRefs_.end()) {
      ref->second->replaceAllUsesWith(v);
      forwardRefs_.erase(ref);
    }
    return true;
  }

  /// Resolves `%name`, creating a forward reference for names not seen yet.
  bool parseValue(Value *&out, std::string_view what) {
    if (tok_.kind != Tok::Local)
      return failHere(fmt::format("expected {}, found {}", what, found()));
    out = lookup(tok_);
    consume();
    return true;
  }

  Value *lookup(const Token &t) {
    std::string name(t.text);
    auto it = values_.find(name);
    if (it != values_.end())
      return it->second.value;
    auto &ref = forwardRefs_[name];
    if (!ref)
      ref = std::make_unique<ForwardRef>(loc(t));
    return ref.get();
  }

  bool parseOperands(std::vector<Value *> &out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (i && !expect(Tok::Comma, "',' between operands"))
        return false;
      Value *v;
      if (!parseValue(v, "an operand '%name'"))
        return false;
      out.push_back(v);
    }
    return true;
  }

  bool parseTypeSuffix(ScalarType &t) {
    return expect(Tok::Colon, "':' before the type") && parseScalarTypeTok(t);
  }

  // --- blocks and statements ----------------------------------------------
  bool parseBlock(Block &block) {
    if (!expect(Tok::LBrace, "'{' to open a block"))
      return false;
    while (tok_.kind != Tok::RBrace) {
      if (tok_.kind == Tok::Eof)
        return failHere("expected '}' to close the block, found end of input");
      Location stmtLoc = here();
      std::unique_ptr<Stmt> s = parseStmt(block);
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

  /// Parses the nested blocks of a container statement after it has been
  /// inserted (so the loop index is defined inside its own body).
  bool parseBodies(Stmt &s) {
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

  std::unique_ptr<Stmt> parseStmt(Block &block) {
    if (tok_.kind == Tok::Local) {
      Token nameTok = tok_;
      consume();
      if (!expect(Tok::Equal, "'=' after the result name"))
        return nullptr;
      std::unique_ptr<Stmt> s = parseValueStmt(nameTok);
      if (!s || !define(nameTok, s.get()))
        return nullptr;
      s->setLoc(loc(nameTok));
      return s;
    }
    if (tok_.kind != Tok::Ident) {
      failHere(fmt::format("expected a statement, found {}", found()));
      return nullptr;
    }
    std::string_view kw = tok_.text;
    Token kwTok = tok_;
    consume();
    if (kw == "store")
      return parseStore();
    if (kw == "atomic_add")
      return parseAtomicAdd();
    if (kw == "parallel") {
      if (!expectKeyword("for"))
        return nullptr;
      return parseFor(true);
    }
    if (kw == "for")
      return parseFor(false);
    if (kw == "serial") {
      pendingBodies_ = true;
      return std::make_unique<SerialStmt>();
    }
    if (kw == "while") {
      pendingBodies_ = true;
      return std::make_unique<WhileStmt>();
    }
    if (kw == "if") {
      Value *cond;
      if (!parseValue(cond, "a condition '%name'"))
        return nullptr;
      pendingBodies_ = true;
      return std::make_unique<IfStmt>(cond);
    }
    if (kw == "break")
      return std::make_unique<BreakStmt>();
    if (kw == "continue")
      return std::make_unique<ContinueStmt>();
    if (kw == "adstack.push" || kw == "adstack.acc_adjoint") {
      std::vector<Value *> ops;
      if (!parseOperands(ops, 2))
        return nullptr;
      if (kw == "adstack.push")
        return std::make_unique<AdStackPushStmt>(ops[0], ops[1]);
      return std::make_unique<AdStackAccAdjointStmt>(ops[0], ops[1]);
    }
    if (kw == "adstack.pop") {
      Value *s;
      if (!parseValue(s, "an adstack '%name'"))
        return nullptr;
      return std::make_unique<AdStackPopStmt>(s);
    }
    bool producesValue = kw == "const" || kw == "load" || kw == "alloca" || kw == "cmp" ||
                         kw == "select" || kw == "cast" || kw == "shape" || parseBinaryOp(kw) ||
                         parseUnaryOp(kw) || kw == "adstack.alloca" || kw == "adstack.load_top" ||
                         kw == "adstack.load_top_adj";
    if (producesValue)
      fail(kwTok, fmt::format("'{}' produces a value; write '%name = {} ...'", kw, kw));
    else
      fail(kwTok, fmt::format("unknown statement '{}'", kw));
    (void)block;
    return nullptr;
  }

  /// Statements that never produce a value (`%x = store ...` is an error).
  static bool isVoidStatement(std::string_view kw) {
    return kw == "store" || kw == "atomic_add" || kw == "parallel" || kw == "for" ||
           kw == "serial" || kw == "while" || kw == "if" || kw == "break" || kw == "continue" ||
           kw == "adstack.push" || kw == "adstack.pop" || kw == "adstack.acc_adjoint";
  }

  std::unique_ptr<Stmt> parseValueStmt(const Token &nameTok) {
    if (tok_.kind != Tok::Ident) {
      failHere(fmt::format("expected an operation after '=', found {}", found()));
      return nullptr;
    }
    std::string_view op = tok_.text;
    Token opTok = tok_;
    consume();
    if (op == "const")
      return parseConst();
    if (auto bop = parseBinaryOp(op)) {
      std::vector<Value *> ops;
      ScalarType t;
      if (!parseOperands(ops, 2) || !parseTypeSuffix(t))
        return nullptr;
      return std::make_unique<BinaryStmt>(*bop, ops[0], ops[1], Type::scalar(t));
    }
    if (auto uop = parseUnaryOp(op)) {
      std::vector<Value *> ops;
      ScalarType t;
      if (!parseOperands(ops, 1) || !parseTypeSuffix(t))
        return nullptr;
      return std::make_unique<UnaryStmt>(*uop, ops[0], Type::scalar(t));
    }
    if (op == "cmp") {
      std::optional<CmpPredicate> pred;
      if (tok_.kind == Tok::Ident)
        pred = parseCmpPredicate(tok_.text);
      if (!pred) {
        failHere(fmt::format("expected a comparison predicate (eq, ne, lt, le, gt, ge), found {}",
                             found()));
        return nullptr;
      }
      consume();
      std::vector<Value *> ops;
      ScalarType t;
      if (!parseOperands(ops, 2) || !parseTypeSuffix(t))
        return nullptr;
      return std::make_unique<CmpStmt>(*pred, ops[0], ops[1], t);
    }
    if (op == "select") {
      std::vector<Value *> ops;
      ScalarType t;
      if (!parseOperands(ops, 3) || !parseTypeSuffix(t))
        return nullptr;
      return std::make_unique<SelectStmt>(ops[0], ops[1], ops[2], Type::scalar(t));
    }
    if (op == "cast") {
      std::vector<Value *> ops;
      ScalarType from, to;
      if (!parseOperands(ops, 1) || !parseTypeSuffix(from) || !expectKeyword("to") ||
          !parseScalarTypeTok(to))
        return nullptr;
      return std::make_unique<CastStmt>(ops[0], from, to);
    }
    if (op == "alloca") {
      ScalarType t;
      if (!parseScalarTypeTok(t))
        return nullptr;
      return std::make_unique<AllocaStmt>(t);
    }
    if (op == "load")
      return parseLoad();
    if (op == "shape") {
      Value *arr;
      int64_t axis;
      ScalarType t;
      if (!parseValue(arr, "an ndarray argument '%name'") ||
          !expect(Tok::Comma, "',' before the axis"))
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
    if (op == "adstack.alloca") {
      ScalarType t;
      int64_t cap;
      if (!parseScalarTypeTok(t) || !expect(Tok::Comma, "',' after the element type") ||
          !expectKeyword("capacity"))
        return nullptr;
      Token capTok = tok_;
      if (!parseInteger(cap, "capacity"))
        return nullptr;
      if (cap < 0) {
        fail(capTok, fmt::format("capacity must be non-negative, got {}", cap));
        return nullptr;
      }
      return std::make_unique<AdStackAllocaStmt>(t, cap);
    }
    if (op == "adstack.load_top" || op == "adstack.load_top_adj") {
      Value *s;
      ScalarType t;
      if (!parseValue(s, "an adstack '%name'") || !parseTypeSuffix(t))
        return nullptr;
      if (op == "adstack.load_top")
        return std::make_unique<AdStackLoadTopStmt>(s, Type::scalar(t));
      return std::make_unique<AdStackLoadTopAdjStmt>(s, Type::scalar(t));
    }
    if (isVoidStatement(op))
      fail(opTok, fmt::format("'{}' does not produce a value; remove '%{} ='", op, nameTok.text));
    else
      fail(opTok, fmt::format("unknown operation '{}'", op));
    return nullptr;
  }

  std::unique_ptr<Stmt> parseConst() {
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

  /// After `load`, `store` or `atomic_add`: a global access target
  /// `@field[.grad|.dual][indices]` or `%ndarray[.grad|.dual][indices]`.
  /// For `load`, a plain `%local` (no brackets) is a local load instead.
  bool parseGlobalTarget(GlobalRef &ref, std::vector<Value *> &indices, bool &isLocal,
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

  static std::pair<std::string_view, Component> splitComponent(std::string_view name) {
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

  std::unique_ptr<Stmt> parseLoad() {
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

  std::unique_ptr<Stmt> parseStore() {
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

  std::unique_ptr<Stmt> parseAtomicAdd() {
    GlobalRef ref;
    std::vector<Value *> indices;
    bool isLocal;
    Value *local = nullptr, *value;
    Token target = tok_;
    if (!parseGlobalTarget(ref, indices, isLocal, local))
      return nullptr;
    if (isLocal) {
      fail(target, "atomic_add needs a field or ndarray element, e.g. '@x[%i]'");
      return nullptr;
    }
    ScalarType t;
    if (!expect(Tok::Comma, "',' before the added value") ||
        !parseValue(value, "the added value '%name'") || !parseTypeSuffix(t))
      return nullptr;
    return std::make_unique<AtomicAddStmt>(ref, indices, value, t);
  }

  bool parseBound(Bound &b) {
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

  std::unique_ptr<Stmt> parseFor(bool parallel) {
    Token indexTok = tok_;
    if (!expect(Tok::Local, "loop index '%name'") ||
        !expect(Tok::Equal, "'=' after the loop index"))
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

  struct Def {
    Value *value;
    uint32_t line, col;
  };

  Lexer lexer_;
  std::shared_ptr<const std::string> file_;
  Token tok_;
  Module *module_ = nullptr;
  std::unordered_map<std::string, Def> values_;
  std::unordered_map<std::string, std::unique_ptr<ForwardRef>> forwardRefs_;
  bool pendingBodies_ = false;
  std::string error_;
};

} // namespace

std::vector<SourceChunk> splitSourceChunks(std::string_view text) {
  std::vector<SourceChunk> chunks(1);
  unsigned lineNo = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++lineNo;
    if (line.starts_with("// -----")) {
      chunks.push_back({"", lineNo + 1});
      continue;
    }
    chunks.back().text.append(line).push_back('\n');
  }
  return chunks;
}

absl::StatusOr<std::unique_ptr<Module>> parseModule(std::string_view text,
                                                    const ParseOptions &options) {
  Parser p(text, options);
  return p.run();
}

} // namespace qd

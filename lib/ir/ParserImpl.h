//===- ParserImpl.h - The recursive-descent parser --------------*- C++ -*-===//
//
// Private to lib/ir. The parser is one class whose members are defined by
// concern: module level, types, literals and values in Parser.cpp; blocks and
// statements in ParseStmt.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Lexer.h"

#include "qd/ir/Parser.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qd::parse {

/// A use of a name not yet defined; replaced when the definition appears.
class ForwardRef : public Value {
public:
  explicit ForwardRef(Location loc) : Value(ValueKind::Placeholder, Type()), loc(std::move(loc)) {}
  Location loc;
};

class Parser {
public:
  Parser(std::string_view text, const ParseOptions &options)
      : lexer_(text, options.firstLine),
        file_(std::make_shared<const std::string>(options.filename)) {
    tok_ = lexer_.next();
  }

  absl::StatusOr<std::unique_ptr<Module>> run();

private:
  // --- token helpers -------------------------------------------------------
  Location loc(const Token &t) const { return Location(file_, t.line, t.col); }
  Location here() const { return loc(tok_); }
  void consume() { tok_ = lexer_.next(); }

  bool fail(const Token &at, std::string message);
  bool failHere(std::string message) { return fail(tok_, std::move(message)); }
  std::string found() const;
  bool expect(Tok kind, std::string_view what);
  bool isKeyword(std::string_view kw) const { return tok_.kind == Tok::Ident && tok_.text == kw; }
  bool expectKeyword(std::string_view kw);

  // --- literals and types --------------------------------------------------
  bool parseInteger(int64_t &out, std::string_view what);

  bool parseScalarTypeTok(ScalarType &out);

  /// Scalar type or `ndarray<T, N>`.
  bool parseArgType(Type &out);

  bool parseCompanions(bool &grad, bool &dual);

  // --- module level --------------------------------------------------------
  bool parseModule(Module &m);

  bool parseField(Module &m);

  bool parseKernel(Module &m);

  Token refToken(const ForwardRef &ref) const;

  // --- values --------------------------------------------------------------
  bool define(const Token &nameTok, Value *v);

  /// Resolves `%name`, creating a forward reference for names not seen yet.
  bool parseValue(Value *&out, std::string_view what);

  Value *lookup(const Token &t);

  bool parseOperands(std::vector<Value *> &out, size_t n);

  bool parseTypeSuffix(ScalarType &t) {
    return expect(Tok::Colon, "':' before the type") && parseScalarTypeTok(t);
  }

  // --- blocks and statements ----------------------------------------------
  bool parseBlock(Block &block);
  /// Blocks being parsed (parseBlock's recursion depth).
  unsigned blockDepth_ = 0;

  /// Parses the nested blocks of a container statement after it has been
  /// inserted (so the loop index is defined inside its own body).
  bool parseBodies(Stmt &s);

  /// A statement: `%name = <operation>` or a keyword statement.
  std::unique_ptr<Stmt> parseStmt();
  /// What follows the keyword `kw` of a statement of `kind`.
  std::unique_ptr<Stmt> parseOperation(StmtKind kind, std::string_view kw);
  std::unique_ptr<Stmt> parseCmp();
  std::unique_ptr<Stmt> parseShape();
  std::unique_ptr<Stmt> parseAdStackAlloca();
  std::unique_ptr<Stmt> parseConst();

  /// After `load`, `store`, `atomic_add` or `atomic_max`: a global access target
  /// `@field[.grad|.dual][indices]` or `%ndarray[.grad|.dual][indices]`.
  /// For `load`, a plain `%local` (no brackets) is a local load instead.
  bool parseGlobalTarget(GlobalRef &ref, std::vector<Value *> &indices, bool &isLocal,
                         Value *&local);

  static std::pair<std::string_view, Component> splitComponent(std::string_view name);

  std::unique_ptr<Stmt> parseLoad();

  std::unique_ptr<Stmt> parseStore();

  std::unique_ptr<Stmt> parseAtomicRmw(StmtKind kind);

  bool parseBound(Bound &b);

  std::unique_ptr<Stmt> parseFor(bool parallel);
  std::unique_ptr<Stmt> parseBand();
  std::unique_ptr<Stmt> parseTaskIndex();

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

} // namespace qd::parse

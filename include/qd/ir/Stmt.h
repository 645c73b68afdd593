//===- qd/ir/Stmt.h - Statements and blocks ---------------------*- C++ -*-===//
//
// The statement hierarchy of the qd IR. Structured control flow: loops and ifs
// own nested blocks; there are no branches between blocks. A statement is an
// SSA value (possibly of void type) whose operands are tracked through use
// lists. See docs/ir.md for the text form of each statement.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Casting.h"
#include "qd/ir/Location.h"
#include "qd/ir/Ops.h"
#include "qd/ir/Scalar.h"
#include "qd/ir/Value.h"

#include <array>
#include <cstdint>
#include <iterator>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace qd {

class Block;
class Field;
class Kernel;
class Stmt;

/// The nearest loop (`for`, including a parallel task, or `while`) that
/// contains `s`, looking through `if` arms; null outside every loop. For a
/// `break` or `continue` this is the loop it leaves or continues: the one
/// query every pass and backend uses for that.
Stmt *enclosingLoop(const Stmt &s);
/// `enclosingLoop(jump)` for a `break`/`continue` (the loop it targets).
inline Stmt *jumpTarget(const Stmt &jump) {
  return enclosingLoop(jump);
}

/// Every statement kind, in the order of qd/ir/StmtKinds.def.
enum class StmtKind : uint8_t {
#define QD_STMT(KIND, ...) KIND,
#include "qd/ir/StmtKinds.def"
};

inline constexpr unsigned kNumStmtKinds = 0
#define QD_STMT(...) +1
#include "qd/ir/StmtKinds.def"
    ;

/// The trait names of StmtKinds.def (see there for their meaning).
namespace stmt_traits {
enum : uint8_t {
  None = 0,
  SideEffects = 1 << 0,
  Recomputable = 1 << 1,
  Foldable = 1 << 2,
  Result = 1 << 3,
  OpName = 1 << 4,
};
} // namespace stmt_traits

/// One row of StmtKinds.def.
struct StmtKindInfo {
  StmtKind kind;
  std::string_view mnemonic;
  uint8_t traits;
  uint8_t numBlocks;
};

namespace detail {
consteval std::array<StmtKindInfo, kNumStmtKinds> makeStmtKindInfos() {
  using namespace stmt_traits;
  return {{
#define QD_STMT(KIND, CLASS, BASE, MNEMONIC, TRAITS, BLOCKS)                                       \
  {StmtKind::KIND, MNEMONIC, static_cast<uint8_t>(TRAITS), BLOCKS},
#include "qd/ir/StmtKinds.def"
  }};
}
} // namespace detail

/// The rows of StmtKinds.def, indexed by StmtKind.
inline constexpr std::array<StmtKindInfo, kNumStmtKinds> kStmtKindInfos =
    detail::makeStmtKindInfos();

static_assert(kNumStmtKinds <= 256, "StmtKind is stored in a uint8_t");
static_assert(
    [] {
      for (unsigned i = 0; i < kNumStmtKinds; ++i)
        if (static_cast<unsigned>(kStmtKindInfos[i].kind) != i)
          return false;
      return true;
    }(),
    "kStmtKindInfos must be in StmtKind order");

constexpr const StmtKindInfo &stmtKindInfo(StmtKind kind) {
  return kStmtKindInfos[static_cast<size_t>(kind)];
}
constexpr bool hasStmtTrait(StmtKind kind, uint8_t trait) {
  return (stmtKindInfo(kind).traits & trait) != 0;
}

/// The mnemonic used in the text format (`const`, `load`, `adstack.push`...).
/// Binary and unary statements print their operator instead (`add`, `sin`).
constexpr std::string_view mnemonic(StmtKind kind) {
  return stmtKindInfo(kind).mnemonic;
}
/// True for kinds that removing (even when unused) can change behaviour:
/// stores, atomics, control flow, adstack pushes/pops/accumulations.
constexpr bool hasSideEffects(StmtKind kind) {
  return hasStmtTrait(kind, stmt_traits::SideEffects);
}
/// See isRecomputable(const Stmt &).
constexpr bool isRecomputable(StmtKind kind) {
  return hasStmtTrait(kind, stmt_traits::Recomputable);
}
/// True for kinds constant folding may evaluate from constant operands
/// (const, binary, unary, cmp, select, cast); whether one such statement
/// folds also depends on its operation and values (qd/analysis/ConstantFolding.h).
constexpr bool isFoldable(StmtKind kind) {
  return hasStmtTrait(kind, stmt_traits::Foldable);
}
/// True for kinds whose text form is `%name = ...`.
constexpr bool printsResult(StmtKind kind) {
  return hasStmtTrait(kind, stmt_traits::Result);
}
/// True for kinds whose text form starts with their operator (binary, unary).
constexpr bool printsOperator(StmtKind kind) {
  return hasStmtTrait(kind, stmt_traits::OpName);
}
/// How many nested blocks a statement of this kind owns.
constexpr unsigned numNestedBlocks(StmtKind kind) {
  return stmtKindInfo(kind).numBlocks;
}

/// True for statements whose value depends only on their operands and on
/// memory they read (const, binary, unary, cmp, select, cast, global load,
/// shape): they may run at launch time, and recomputing one where its
/// operands are available gives the same value while memory is unchanged.
inline bool isRecomputable(const Stmt &s);

class Stmt : public Value {
public:
  ~Stmt() override;

  StmtKind kind() const { return kind_; }
  const Location &loc() const { return loc_; }
  void setLoc(Location loc) { loc_ = std::move(loc); }

  /// The block that holds this statement (null while detached).
  Block *parent() const { return parent_; }
  /// The statement owning `parent()`, or null at the kernel's top level.
  Stmt *parentStmt() const;
  Kernel *kernel() const;
  /// True for statements that own nested blocks (loops, if, serial).
  bool isContainer() const { return !blocks_.empty(); }
  /// True for statements that are kernel-level tasks (parallel for, serial).
  bool isTask() const;

  unsigned numOperands() const { return numOperands_; }
  Value *operand(unsigned i) const { return operands_[i].get(); }
  void setOperand(unsigned i, Value *v) { operands_[i].set(v); }
  std::span<Use> operandUses() { return {operands_.get(), numOperands_}; }

  unsigned numBlocks() const { return static_cast<unsigned>(blocks_.size()); }
  Block &block(unsigned i) const { return *blocks_[i]; }

  /// True when removing the statement, even if its value is unused, could
  /// change behaviour (stores, control flow...); false when an unused one
  /// can be deleted. A per-kind trait (StmtKinds.def).
  bool hasSideEffects() const { return qd::hasSideEffects(kind_); }

  /// Unlinks this statement from its block and destroys it. The statement
  /// (and every statement nested inside it) must have no remaining uses
  /// outside itself.
  void erase();
  /// Points every use of this statement at `replacement`, then erases it.
  void replaceAndErase(Value *replacement) {
    replaceAllUsesWith(replacement);
    erase();
  }
  /// Detaches the statement from its block and hands ownership back.
  std::unique_ptr<Stmt> remove();
  /// Drops every operand reference of this statement and of all statements
  /// nested in it, so a subtree can be deleted regardless of internal uses.
  void dropAllReferences();

  static bool classof(const Value *v) { return v->valueKind() == ValueKind::Stmt; }

protected:
  /// Creates the kind's nested blocks (numNestedBlocks(kind)).
  Stmt(StmtKind kind, Type type, unsigned numOperands);
  void initOperands(std::initializer_list<Value *> ops);
  void initOperands(std::span<Value *const> ops, unsigned first = 0);

private:
  friend class Block;
  StmtKind kind_;
  Location loc_;
  Block *parent_ = nullptr;
  // Neighbours in parent_, which owns the statement: an intrusive list, so a
  // walk reads each statement once rather than a list node and then it.
  Stmt *prev_ = nullptr;
  Stmt *next_ = nullptr;
  unsigned numOperands_;
  std::unique_ptr<Use[]> operands_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

inline bool isRecomputable(const Stmt &s) {
  return isRecomputable(s.kind());
}

/// An ordered list of statements. Owned by a container statement or, for the
/// kernel's top level, by the kernel.
class Block {
public:
  class iterator {
  public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Stmt;
    using difference_type = std::ptrdiff_t;
    using pointer = Stmt *;
    using reference = Stmt &;
    iterator() = default;
    iterator(const Block *block, Stmt *at) : block_(block), at_(at) {}
    Stmt &operator*() const { return *at_; }
    Stmt *operator->() const { return at_; }
    iterator &operator++() {
      at_ = at_->next_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++*this;
      return old;
    }
    iterator &operator--() { // from end(): the last statement
      at_ = at_ ? at_->prev_ : block_->tail_;
      return *this;
    }
    iterator operator--(int) {
      iterator old = *this;
      --*this;
      return old;
    }
    friend bool operator==(iterator a, iterator b) { return a.at_ == b.at_; }
    /// The statement, or null at end().
    Stmt *get() const { return at_; }

  private:
    const Block *block_ = nullptr;
    Stmt *at_ = nullptr;
  };

  explicit Block(Stmt *owner, Kernel *kernel) : owner_(owner), kernel_(kernel) {}
  Block(const Block &) = delete;
  Block &operator=(const Block &) = delete;
  ~Block();

  Stmt *owner() const { return owner_; }
  Kernel *kernel() const;

  iterator begin() { return iterator(this, head_); }
  iterator end() { return iterator(this, nullptr); }
  bool empty() const { return !head_; }
  size_t size() const { return size_; }
  Stmt &front() { return *head_; }
  Stmt &back() { return *tail_; }
  static iterator iteratorTo(Stmt *s) { return iterator(s->parent_, s); }

  /// Inserts `stmt` before `pos` and returns the raw pointer.
  Stmt *insert(iterator pos, std::unique_ptr<Stmt> stmt);
  Stmt *push_back(std::unique_ptr<Stmt> stmt) { return insert(end(), std::move(stmt)); }
  template <typename T> T *push_back(std::unique_ptr<T> stmt) {
    return static_cast<T *>(insert(end(), std::unique_ptr<Stmt>(std::move(stmt))));
  }
  /// Moves every statement of `other` before `pos`, leaving `other` empty.
  void splice(iterator pos, Block &other);
  /// Erases all statements (dropping internal references first).
  void clear();

  /// True if this block is `ancestor` or nested (transitively) inside it.
  bool isNestedIn(const Block *ancestor) const;

private:
  friend class Stmt;
  friend class Kernel;
  /// Unlinks `s` (one of this block's statements) and hands it back.
  std::unique_ptr<Stmt> unlink(Stmt *s);

  Stmt *owner_;
  Kernel *kernel_;
  Stmt *head_ = nullptr; // owned, with every statement after it
  Stmt *tail_ = nullptr;
  size_t size_ = 0;
};

//===----------------------------------------------------------------------===//
// Scalar statements
//===----------------------------------------------------------------------===//

/// `%c = const 1.5 : f32`. Integers are stored sign-extended in an int64,
/// floats as a double (an f32 constant is always exactly representable; a
/// NaN is always the quiet NaN, keeping only its sign).
class ConstStmt : public Stmt {
public:
  static std::unique_ptr<ConstStmt> getInt(ScalarType type, int64_t value);
  static std::unique_ptr<ConstStmt> getFloat(ScalarType type, double value);

  ScalarType scalarType() const { return type().element(); }
  int64_t intValue() const { return int_; }
  double floatValue() const { return float_; }
  /// Equality of the stored bit patterns (so -0.0 != 0.0 and NaN == NaN).
  bool sameValue(const ConstStmt &other) const;
  /// The constant as a typed scalar.
  Scalar value() const;
  bool isZero() const;
  bool isOne() const;

  static bool classof(const Value *v) { return isKindOf(v, StmtKind::Const); }
  static bool isKindOf(const Value *v, StmtKind k) {
    return Stmt::classof(v) && static_cast<const Stmt *>(v)->kind() == k;
  }

private:
  explicit ConstStmt(ScalarType type) : Stmt(StmtKind::Const, Type::scalar(type), 0) {}
  int64_t int_ = 0;
  double float_ = 0;
};

/// `%r = add %a, %b : f32`; both operands have the result type.
class BinaryStmt : public Stmt {
public:
  BinaryStmt(BinaryOp op, Value *lhs, Value *rhs, Type type);
  BinaryOp op() const { return op_; }
  Value *lhs() const { return operand(0); }
  Value *rhs() const { return operand(1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Binary); }

private:
  BinaryOp op_;
};

/// `%r = sin %a : f32`; the operand has the result type.
class UnaryStmt : public Stmt {
public:
  UnaryStmt(UnaryOp op, Value *operand, Type type);
  UnaryOp op() const { return op_; }
  Value *input() const { return operand(0); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Unary); }

private:
  UnaryOp op_;
};

/// `%c = cmp lt %a, %b : f32`; the type is the operand type, the result i1.
/// Float comparisons are ordered (false on NaN) except `ne` (true on NaN).
class CmpStmt : public Stmt {
public:
  CmpStmt(CmpPredicate pred, Value *lhs, Value *rhs, ScalarType operandType);
  CmpPredicate predicate() const { return pred_; }
  ScalarType operandType() const { return operandType_; }
  Value *lhs() const { return operand(0); }
  Value *rhs() const { return operand(1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Cmp); }

private:
  CmpPredicate pred_;
  ScalarType operandType_;
};

/// `%r = select %c, %a, %b : f32`.
class SelectStmt : public Stmt {
public:
  SelectStmt(Value *cond, Value *trueValue, Value *falseValue, Type type);
  Value *cond() const { return operand(0); }
  Value *trueValue() const { return operand(1); }
  Value *falseValue() const { return operand(2); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Select); }
};

/// `%r = cast %a : f32 to i32`.
class CastStmt : public Stmt {
public:
  CastStmt(Value *input, ScalarType from, ScalarType to);
  Value *input() const { return operand(0); }
  ScalarType from() const { return from_; }
  ScalarType to() const { return type().element(); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Cast); }

private:
  ScalarType from_;
};

//===----------------------------------------------------------------------===//
// Locals
//===----------------------------------------------------------------------===//

/// `%v = alloca f32`: a mutable per-thread local, zero-initialised.
class AllocaStmt : public Stmt {
public:
  explicit AllocaStmt(ScalarType elem) : Stmt(StmtKind::Alloca, Type::local(elem), 0) {}
  ScalarType elementType() const { return type().element(); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Alloca); }
};

/// `%a = load %v : f32`.
class LocalLoadStmt : public Stmt {
public:
  LocalLoadStmt(Value *local, Type type);
  Value *local() const { return operand(0); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::LocalLoad); }
};

/// `store %v, %x`.
class LocalStoreStmt : public Stmt {
public:
  LocalStoreStmt(Value *local, Value *value);
  Value *local() const { return operand(0); }
  Value *value() const { return operand(1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::LocalStore); }
};

//===----------------------------------------------------------------------===//
// Global memory: fields and ndarray arguments
//===----------------------------------------------------------------------===//

/// Which buffer of a field or ndarray an access touches.
enum class Component : uint8_t { Primal, Grad, Dual };
std::string_view toString(Component c);

/// Names the global a load/store/atomic refers to: either a module field or
/// an ndarray kernel argument, plus the component (primal, grad or dual).
struct GlobalRef {
  Field *field = nullptr;   // set for fields
  Value *ndarray = nullptr; // set for ndarray arguments
  Component component = Component::Primal;

  static GlobalRef ofField(Field *f, Component c = Component::Primal) { return {f, nullptr, c}; }
  static GlobalRef ofNdarray(Value *a, Component c = Component::Primal) { return {nullptr, a, c}; }
};

/// Shared layout of global accesses: operands are [ndarray?, indices..., value?].
class GlobalAccessStmt : public Stmt {
public:
  bool isField() const { return field_ != nullptr; }
  Field *field() const { return field_; }
  Value *ndarray() const { return field_ ? nullptr : operand(0); }
  Component component() const { return component_; }
  GlobalRef ref() const { return {field_, ndarray(), component_}; }
  unsigned numIndices() const { return numIndices_; }
  Value *index(unsigned i) const { return operand(firstIndex() + i); }
  std::vector<Value *> indices() const;
  /// The element type of the accessed global.
  ScalarType elementType() const;

  static bool classof(const Value *v);

protected:
  GlobalAccessStmt(StmtKind kind, Type type, const GlobalRef &ref, std::span<Value *const> indices,
                   Value *value);
  unsigned firstIndex() const { return field_ ? 0 : 1; }

private:
  Field *field_;
  Component component_;
  unsigned numIndices_;
};

/// `%x = load @x[%i] : f32`, `%x = load %a.grad[%i, %j] : f32`.
class GlobalLoadStmt : public GlobalAccessStmt {
public:
  GlobalLoadStmt(const GlobalRef &ref, std::span<Value *const> indices, Type type)
      : GlobalAccessStmt(StmtKind::GlobalLoad, type, ref, indices, nullptr) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::GlobalLoad); }
};

/// `store @x[%i], %v`.
class GlobalStoreStmt : public GlobalAccessStmt {
public:
  GlobalStoreStmt(const GlobalRef &ref, std::span<Value *const> indices, Value *value)
      : GlobalAccessStmt(StmtKind::GlobalStore, Type(), ref, indices, value) {}
  Value *value() const { return operand(numOperands() - 1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::GlobalStore); }
};

/// The statement kind of `op` (its spelling: mnemonic(kindOf(op))).
StmtKind kindOf(AtomicOp op);

/// An atomic read-modify-write of one element, one per QD_ATOMIC_OP row:
/// `atomic_add` or `atomic_max`.
class AtomicRmwStmt : public GlobalAccessStmt {
public:
  AtomicOp op() const;
  Value *value() const { return operand(numOperands() - 1); }
  /// The type written after the colon in the text form.
  ScalarType valueType() const { return valueType_; }
  static bool classof(const Value *v);

protected:
  AtomicRmwStmt(StmtKind kind, const GlobalRef &ref, std::span<Value *const> indices, Value *value,
                ScalarType valueType)
      : GlobalAccessStmt(kind, Type(), ref, indices, value), valueType_(valueType) {}

private:
  ScalarType valueType_;
};

/// `atomic_add @y[], %v : f32`: adds `%v` atomically to the element.
class AtomicAddStmt : public AtomicRmwStmt {
public:
  AtomicAddStmt(const GlobalRef &ref, std::span<Value *const> indices, Value *value,
                ScalarType valueType)
      : AtomicRmwStmt(StmtKind::AtomicAdd, ref, indices, value, valueType) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AtomicAdd); }
};

/// `atomic_max @m[%i], %v : i64`: raises the element to `%v` atomically when
/// `%v` is larger (signed; i32 and i64 elements only).
class AtomicMaxStmt : public AtomicRmwStmt {
public:
  AtomicMaxStmt(const GlobalRef &ref, std::span<Value *const> indices, Value *value,
                ScalarType valueType)
      : AtomicRmwStmt(StmtKind::AtomicMax, ref, indices, value, valueType) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AtomicMax); }
};

/// `%n = shape %a, 0 : i32`: the extent of an ndarray argument along an axis.
class ShapeStmt : public Stmt {
public:
  ShapeStmt(Value *ndarray, unsigned axis, Type type);
  Value *ndarray() const { return operand(0); }
  unsigned axis() const { return axis_; }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Shape); }

private:
  unsigned axis_;
};

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

/// A loop bound: an i32 SSA value or an integer literal.
struct Bound {
  Value *value = nullptr;
  int64_t constant = 0;

  Bound() = default;
  Bound(Value *v) : value(v) {}
  Bound(int c) : constant(c) {}
  Bound(int64_t c) : constant(c) {}
  static Bound of(Value *v) { return Bound(v); }
  static Bound of(int64_t c) { return Bound(c); }
  bool isConstant() const { return value == nullptr; }
};

/// `for %i = 0 to %n { ... }` iterates %i over [begin, end) in order;
/// `parallel for` is a kernel-level task whose iterations may run
/// concurrently. The statement's value is the loop index (i32).
///
/// A parallel task may have several dimensions (a band):
/// `parallel for (%i, %j) = (0, 0) to (%n, %m)` runs one iteration per
/// point of [b0, e0) x [b1, e1), in any order. The statement's value is the
/// index of dimension 0; the other indices are TaskIndexStmts in the body.
class ForStmt : public Stmt {
public:
  /// Most dimensions a parallel band may have.
  static constexpr unsigned kMaxDims = 4;

  ForStmt(Bound begin, Bound end, bool parallel);
  /// A parallel task over begins.size() dimensions (1 to kMaxDims).
  ForStmt(std::span<const Bound> begins, std::span<const Bound> ends);
  bool isParallel() const { return parallel_; }
  /// 1 for every serial loop.
  unsigned numDims() const { return numOperands() / 2; }
  Block &body() const { return block(0); }
  /// Null when the bound is a literal.
  Value *beginValue(unsigned dim = 0) const { return operand(2 * dim); }
  Value *endValue(unsigned dim = 0) const { return operand(2 * dim + 1); }
  int64_t beginConstant(unsigned dim = 0) const { return consts_[2 * dim]; }
  int64_t endConstant(unsigned dim = 0) const { return consts_[2 * dim + 1]; }
  Bound begin(unsigned dim = 0) const {
    return beginValue(dim) ? Bound(beginValue(dim)) : Bound(beginConstant(dim));
  }
  Bound end(unsigned dim = 0) const {
    return endValue(dim) ? Bound(endValue(dim)) : Bound(endConstant(dim));
  }
  void setBegin(Bound b, unsigned dim = 0);
  void setEnd(Bound b, unsigned dim = 0);
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::For); }

private:
  bool parallel_;
  std::vector<int64_t> consts_; // begin, end per dimension (literal bounds)
};

/// `%j = task_index 1 : i32`: the index of dimension `dim` of the enclosing
/// parallel task (see ForStmt). Index 0 is the task's own value. The parser
/// creates one per extra dimension named in a band's header, at the top of
/// its body.
class TaskIndexStmt : public Stmt {
public:
  explicit TaskIndexStmt(unsigned dim) : Stmt(StmtKind::TaskIndex, Type::i32(), 0), dim_(dim) {}
  unsigned dim() const { return dim_; }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::TaskIndex); }

private:
  unsigned dim_;
};

/// The parallel task `s` runs in (the top-level parallel for around it), or
/// null.
const ForStmt *enclosingParallelTask(const Stmt &s);
/// The dimension of `task` whose index `v` is (the task itself: 0; a
/// TaskIndexStmt inside it: its dim), or -1.
int taskDimOf(const Value *v, const ForStmt &task);

/// `serial { ... }`: a kernel-level task run by a single thread.
class SerialStmt : public Stmt {
public:
  SerialStmt() : Stmt(StmtKind::Serial, Type(), 0) {}
  Block &body() const { return block(0); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Serial); }
};

/// `while { ... }`: repeats its body until a `break` runs.
class WhileStmt : public Stmt {
public:
  WhileStmt() : Stmt(StmtKind::While, Type(), 0) {}
  Block &body() const { return block(0); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::While); }
};

/// `break`: leaves the innermost enclosing `for` or `while`.
class BreakStmt : public Stmt {
public:
  BreakStmt() : Stmt(StmtKind::Break, Type(), 0) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Break); }
};

/// `continue`: skips to the next iteration of the innermost loop.
class ContinueStmt : public Stmt {
public:
  ContinueStmt() : Stmt(StmtKind::Continue, Type(), 0) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::Continue); }
};

/// `if %c { ... } else { ... }`; the else block may be empty.
class IfStmt : public Stmt {
public:
  explicit IfStmt(Value *cond);
  Value *cond() const { return operand(0); }
  Block &thenBlock() const { return block(0); }
  Block &elseBlock() const { return block(1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::If); }
};

//===----------------------------------------------------------------------===//
// Adstacks
//===----------------------------------------------------------------------===//

/// `%s = adstack.alloca f32, capacity 0`: a per-thread stack of (primal,
/// adjoint) pairs. Capacity 0 means "to be sized by the sizing passes".
class AdStackAllocaStmt : public Stmt {
public:
  AdStackAllocaStmt(ScalarType elem, int64_t capacity)
      : Stmt(StmtKind::AdStackAlloca, Type::adstack(elem), 0), capacity_(capacity) {}
  /// `adstack.alloca f32, capacity %n`: the capacity is the value of the
  /// integer scalar argument %n at each launch (at least 1); the static
  /// capacity is 0.
  AdStackAllocaStmt(ScalarType elem, Value *capacityArgument);
  ScalarType elementType() const { return type().element(); }
  /// The capacity written in the IR; 0: sized at launch (by the capacity
  /// argument, when there is one).
  int64_t capacity() const { return capacity_; }
  void setCapacity(int64_t c) { capacity_ = c; }
  /// The argument whose value is the capacity, or null.
  Value *capacityArgument() const { return numOperands() ? operand(0) : nullptr; }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AdStackAlloca); }

private:
  int64_t capacity_;
};

/// Base of the statements operating on an adstack (operand 0).
class AdStackOpStmt : public Stmt {
public:
  Value *stack() const { return operand(0); }
  static bool classof(const Value *v);

protected:
  AdStackOpStmt(StmtKind kind, Type type, Value *stack, Value *value);
};

/// `adstack.push %s, %v`: pushes (%v, adjoint 0).
class AdStackPushStmt : public AdStackOpStmt {
public:
  AdStackPushStmt(Value *stack, Value *value)
      : AdStackOpStmt(StmtKind::AdStackPush, Type(), stack, value) {}
  Value *value() const { return operand(1); }
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AdStackPush); }
};

/// `adstack.pop %s`.
class AdStackPopStmt : public AdStackOpStmt {
public:
  explicit AdStackPopStmt(Value *stack)
      : AdStackOpStmt(StmtKind::AdStackPop, Type(), stack, nullptr) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AdStackPop); }
};

/// `%t = adstack.load_top %s : f32`: the primal on top.
class AdStackLoadTopStmt : public AdStackOpStmt {
public:
  AdStackLoadTopStmt(Value *stack, Type type)
      : AdStackOpStmt(StmtKind::AdStackLoadTop, type, stack, nullptr) {}
  static bool classof(const Value *v) { return ConstStmt::isKindOf(v, StmtKind::AdStackLoadTop); }
};

/// `%g = adstack.load_top_adj %s : f32`: the adjoint on top.
class AdStackLoadTopAdjStmt : public AdStackOpStmt {
public:
  AdStackLoadTopAdjStmt(Value *stack, Type type)
      : AdStackOpStmt(StmtKind::AdStackLoadTopAdj, type, stack, nullptr) {}
  static bool classof(const Value *v) {
    return ConstStmt::isKindOf(v, StmtKind::AdStackLoadTopAdj);
  }
};

/// `adstack.acc_adjoint %s, %v`: adds %v to the adjoint on top.
class AdStackAccAdjointStmt : public AdStackOpStmt {
public:
  AdStackAccAdjointStmt(Value *stack, Value *value)
      : AdStackOpStmt(StmtKind::AdStackAccAdjoint, Type(), stack, value) {}
  Value *value() const { return operand(1); }
  static bool classof(const Value *v) {
    return ConstStmt::isKindOf(v, StmtKind::AdStackAccAdjoint);
  }
};

} // namespace qd

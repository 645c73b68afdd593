//===- qd/ir/IRBuilder.h - Building IR from C++ -----------------*- C++ -*-===//
//
// IRBuilder inserts statements at an insertion point and infers result types
// from operand types. Nested blocks are entered through scope guards that
// restore the insertion point when they go out of scope:
//
//   IRBuilder b(kernel);
//   auto task = b.parallelFor(0, 16);          // inside the task body now
//   Value *x = b.load(GlobalRef::ofField(fx), {task.index()});
//   { auto loop = b.forRange(0, n); ... }      // back in the task body here
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <initializer_list>
#include <span>
#include <vector>

namespace qd {

class IRBuilder {
public:
  /// Inserts at the end of the kernel's top-level block.
  explicit IRBuilder(Kernel &kernel) : block_(&kernel.body()), pos_(kernel.body().end()) {}
  /// Inserts at the end of `block`.
  explicit IRBuilder(Block &block) : block_(&block), pos_(block.end()) {}
  /// Inserts before `stmt`.
  static IRBuilder before(Stmt &stmt);
  /// Inserts after `stmt`.
  static IRBuilder after(Stmt &stmt);

  Block &block() const { return *block_; }
  Block::iterator insertionPoint() const { return pos_; }
  void setInsertionPoint(Block &block, Block::iterator pos) {
    block_ = &block;
    pos_ = pos;
  }
  void setInsertionPointToEnd(Block &block) { setInsertionPoint(block, block.end()); }

  /// Location given to every statement created from now on.
  void setLocation(Location loc) { loc_ = std::move(loc); }
  const Location &location() const { return loc_; }

  /// Inserts an already constructed statement.
  template <typename T> T *insert(std::unique_ptr<T> stmt) {
    T *raw = stmt.get();
    if (!raw->loc().isKnown())
      raw->setLoc(loc_);
    block_->insert(pos_, std::unique_ptr<Stmt>(std::move(stmt)));
    return raw;
  }

  // --- constants -----------------------------------------------------------
  ConstStmt *constInt(ScalarType type, int64_t value);
  ConstStmt *constFloat(ScalarType type, double value);
  ConstStmt *i1(bool v) { return constInt(ScalarType::I1, v); }
  ConstStmt *i32(int32_t v) { return constInt(ScalarType::I32, v); }
  ConstStmt *i64(int64_t v) { return constInt(ScalarType::I64, v); }
  ConstStmt *f32(float v) { return constFloat(ScalarType::F32, v); }
  ConstStmt *f64(double v) { return constFloat(ScalarType::F64, v); }

  // --- arithmetic ----------------------------------------------------------
  // One shorthand per operator of qd/ir/Ops.def (its BUILDER column):
  // b.add(x, y) ... b.atan2(y, x), b.bitAnd(m, k); b.neg(x) ... b.bitNot(m);
  // b.eq(x, y) ... b.ge(x, y).
  BinaryStmt *binary(BinaryOp op, Value *lhs, Value *rhs);
  UnaryStmt *unary(UnaryOp op, Value *v);
#define QD_BINARY_OP(NAME, SPELLING, DOMAIN, BUILDER, ...)                                         \
  BinaryStmt *BUILDER(Value *lhs, Value *rhs) {                                                    \
    return binary(BinaryOp::NAME, lhs, rhs);                                                       \
  }
#define QD_UNARY_OP(NAME, SPELLING, DOMAIN, BUILDER, ...)                                          \
  UnaryStmt *BUILDER(Value *v) {                                                                   \
    return unary(UnaryOp::NAME, v);                                                                \
  }
#define QD_CMP_PREDICATE(NAME, SPELLING, BUILDER)                                                  \
  CmpStmt *BUILDER(Value *lhs, Value *rhs) {                                                       \
    return cmp(CmpPredicate::NAME, lhs, rhs);                                                      \
  }
#include "qd/ir/Ops.def"
  CmpStmt *cmp(CmpPredicate pred, Value *lhs, Value *rhs);
  SelectStmt *select(Value *cond, Value *t, Value *f);
  CastStmt *cast(Value *v, ScalarType to);

  // --- locals --------------------------------------------------------------
  AllocaStmt *alloca(ScalarType elem);
  LocalLoadStmt *load(Value *local);
  LocalStoreStmt *store(Value *local, Value *value);

  // --- globals -------------------------------------------------------------
  GlobalLoadStmt *load(const GlobalRef &ref, std::initializer_list<Value *> indices);
  GlobalLoadStmt *load(const GlobalRef &ref, std::span<Value *const> indices);
  GlobalStoreStmt *store(const GlobalRef &ref, std::initializer_list<Value *> indices,
                         Value *value);
  GlobalStoreStmt *store(const GlobalRef &ref, std::span<Value *const> indices, Value *value);
  AtomicAddStmt *atomicAdd(const GlobalRef &ref, std::initializer_list<Value *> indices,
                           Value *value);
  AtomicAddStmt *atomicAdd(const GlobalRef &ref, std::span<Value *const> indices, Value *value);
  AtomicMaxStmt *atomicMax(const GlobalRef &ref, std::span<Value *const> indices, Value *value);
  /// The atomic statement of `op` (atomicAdd, atomicMax, ...).
  AtomicRmwStmt *atomic(AtomicOp op, const GlobalRef &ref, std::span<Value *const> indices,
                        Value *value);
  ShapeStmt *shape(Value *ndarray, unsigned axis, ScalarType type = ScalarType::I32);

  // --- adstacks ------------------------------------------------------------
  AdStackAllocaStmt *adstackAlloca(ScalarType elem, int64_t capacity = 0);
  AdStackPushStmt *adstackPush(Value *stack, Value *value);
  AdStackPopStmt *adstackPop(Value *stack);
  AdStackLoadTopStmt *adstackLoadTop(Value *stack);
  AdStackLoadTopAdjStmt *adstackLoadTopAdj(Value *stack);
  AdStackAccAdjointStmt *adstackAccAdjoint(Value *stack, Value *value);

  // --- control flow --------------------------------------------------------
  BreakStmt *brk();
  ContinueStmt *cont();

  /// Moves the builder into a nested block and back out on destruction.
  class Scope {
  public:
    Scope(Scope &&other) noexcept;
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;
    ~Scope();
    /// Leaves the scope early (the destructor then does nothing).
    void close();

  protected:
    Scope(IRBuilder &b, Stmt *stmt, Block &inner);
    IRBuilder *builder_;
    Stmt *stmt_;
    Block *savedBlock_;
    Block::iterator savedPos_;
  };

  class LoopScope : public Scope {
  public:
    ForStmt *stmt() const { return qd::cast<ForStmt>(stmt_); }
    /// The loop index (the ForStmt itself); of a parallel band, the index
    /// of dimension `dim` (a task_index statement at the top of its body).
    Value *index(unsigned dim = 0) const;

  private:
    friend class IRBuilder;
    using Scope::Scope;
  };

  class BlockScope : public Scope {
  public:
    Stmt *stmt() const { return stmt_; }

  private:
    friend class IRBuilder;
    using Scope::Scope;
  };

  class IfScope : public Scope {
  public:
    IfStmt *stmt() const { return qd::cast<IfStmt>(stmt_); }
    /// Switches insertion to the else block.
    void otherwise();

  private:
    friend class IRBuilder;
    using Scope::Scope;
  };

  [[nodiscard]] LoopScope parallelFor(Bound begin, Bound end);
  /// `parallel for (%i, %j, ...) = (begins...) to (ends...)`: one task_index
  /// statement per dimension after the first opens its body.
  [[nodiscard]] LoopScope parallelBand(std::span<const Bound> begins, std::span<const Bound> ends);
  [[nodiscard]] LoopScope forRange(Bound begin, Bound end);
  [[nodiscard]] BlockScope serial();
  [[nodiscard]] BlockScope whileLoop();
  [[nodiscard]] IfScope ifThen(Value *cond);

private:
  Block *block_;
  Block::iterator pos_;
  Location loc_;
};

} // namespace qd

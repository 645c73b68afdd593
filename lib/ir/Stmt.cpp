//===- Stmt.cpp - Statements and blocks -----------------------------------===//
#include "qd/ir/Stmt.h"

#include "qd/ir/Module.h"

#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace qd {

namespace {
/// True when kind `k`'s class derives from `Base` (classof of the
/// intermediate classes, kept true to StmtKinds.def).
template <typename Base> bool kindDerivesFrom(StmtKind k) {
  switch (k) {
#define QD_STMT(KIND, CLASS, ...)                                                                  \
  case StmtKind::KIND:                                                                             \
    return std::is_base_of_v<Base, CLASS>;
#include "qd/ir/StmtKinds.def"
  }
  return false;
}
} // namespace

std::string_view toString(Component c) {
  switch (c) {
  case Component::Primal:
    return "";
  case Component::Grad:
    return "grad";
  case Component::Dual:
    return "dual";
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Stmt
//===----------------------------------------------------------------------===//

Stmt::Stmt(StmtKind kind, Type type, unsigned numOperands)
    : Value(ValueKind::Stmt, type), kind_(kind), numOperands_(numOperands),
      operands_(numOperands ? new Use[numOperands] : nullptr) {
  for (unsigned i = 0; i < numOperands; ++i)
    operands_[i].init(this, i);
  for (unsigned i = 0; i < numNestedBlocks(kind); ++i)
    blocks_.push_back(std::make_unique<Block>(this, nullptr));
}

Stmt::~Stmt() {
  // Children go first: they may use values defined by this statement's
  // operands, and the statement itself (e.g. a loop index).
  for (auto &b : blocks_)
    b->clear();
}

void Stmt::initOperands(std::initializer_list<Value *> ops) {
  unsigned i = 0;
  for (Value *v : ops)
    operands_[i++].set(v);
}

void Stmt::initOperands(std::span<Value *const> ops, unsigned first) {
  for (size_t i = 0; i < ops.size(); ++i)
    operands_[first + i].set(ops[i]);
}

Stmt *Stmt::parentStmt() const {
  return parent_ ? parent_->owner() : nullptr;
}

Stmt *enclosingLoop(const Stmt &s) {
  for (Stmt *p = s.parentStmt(); p; p = p->parentStmt())
    if (p->kind() == StmtKind::For || p->kind() == StmtKind::While)
      return p;
  return nullptr;
}

Kernel *Stmt::kernel() const {
  return parent_ ? parent_->kernel() : nullptr;
}

bool Stmt::isTask() const {
  if (kind_ == StmtKind::Serial)
    return true;
  if (auto *f = dyn_cast<ForStmt>(this))
    return f->isParallel();
  return false;
}

void Stmt::dropAllReferences() {
  // Iterative: IR built through the API may nest deeper than the stack
  // allows recursion (the verifier rejects it, and it must still go away).
  std::vector<Stmt *> work{this};
  while (!work.empty()) {
    Stmt *s = work.back();
    work.pop_back();
    for (unsigned i = 0; i < s->numOperands_; ++i)
      s->operands_[i].set(nullptr);
    for (auto &b : s->blocks_)
      for (Stmt &child : *b)
        work.push_back(&child);
  }
}

std::unique_ptr<Stmt> Stmt::remove() {
  assert(parent_ && "removing a detached statement");
  return parent_->unlink(this);
}

void Stmt::erase() {
  dropAllReferences();
  assert(!hasUses() && "erasing a statement that still has uses");
  remove();
}

//===----------------------------------------------------------------------===//
// Block
//===----------------------------------------------------------------------===//

Block::~Block() {
  clear();
}

Kernel *Block::kernel() const {
  if (kernel_)
    return kernel_;
  return owner_ ? owner_->kernel() : nullptr;
}

Stmt *Block::insert(iterator pos, std::unique_ptr<Stmt> stmt) {
  assert(stmt && !stmt->parent_ && "inserting a statement that already has a block");
  Stmt *raw = stmt.release();
  Stmt *next = pos.get();
  Stmt *prev = next ? next->prev_ : tail_;
  raw->prev_ = prev;
  raw->next_ = next;
  (prev ? prev->next_ : head_) = raw;
  (next ? next->prev_ : tail_) = raw;
  raw->parent_ = this;
  ++size_;
  return raw;
}

std::unique_ptr<Stmt> Block::unlink(Stmt *s) {
  assert(s->parent_ == this);
  (s->prev_ ? s->prev_->next_ : head_) = s->next_;
  (s->next_ ? s->next_->prev_ : tail_) = s->prev_;
  s->prev_ = s->next_ = nullptr;
  s->parent_ = nullptr;
  --size_;
  return std::unique_ptr<Stmt>(s);
}

void Block::splice(iterator pos, Block &other) {
  if (other.empty())
    return;
  for (Stmt *s = other.head_; s; s = s->next_)
    s->parent_ = this;
  Stmt *next = pos.get();
  Stmt *prev = next ? next->prev_ : tail_;
  other.head_->prev_ = prev;
  other.tail_->next_ = next;
  (prev ? prev->next_ : head_) = other.head_;
  (next ? next->prev_ : tail_) = other.tail_;
  size_ += other.size_;
  other.head_ = other.tail_ = nullptr;
  other.size_ = 0;
}

void Block::clear() {
  for (Stmt &s : *this)
    s.dropAllReferences();
  // With every reference inside the subtree dropped, the order no longer
  // matters for uses; destroy without recursion by moving each statement's
  // nested statements out before it goes, so ~Stmt only sees empty blocks.
  // Back to front, so later statements (the users) go first.
  std::vector<std::unique_ptr<Stmt>> doomed;
  auto take = [&doomed](Block &b) {
    while (b.head_)
      doomed.push_back(b.unlink(b.head_));
  };
  take(*this);
  while (!doomed.empty()) {
    std::unique_ptr<Stmt> s = std::move(doomed.back());
    doomed.pop_back();
    for (auto &b : s->blocks_)
      take(*b);
  }
}

bool Block::isNestedIn(const Block *ancestor) const {
  for (const Block *b = this; b; b = b->owner_ ? b->owner_->parent() : nullptr)
    if (b == ancestor)
      return true;
  return false;
}

//===----------------------------------------------------------------------===//
// Concrete statements
//===----------------------------------------------------------------------===//

std::unique_ptr<ConstStmt> ConstStmt::getInt(ScalarType type, int64_t value) {
  assert(isInteger(type));
  std::unique_ptr<ConstStmt> c(new ConstStmt(type));
  c->int_ = value;
  return c;
}

std::unique_ptr<ConstStmt> ConstStmt::getFloat(ScalarType type, double value) {
  assert(isFloat(type));
  std::unique_ptr<ConstStmt> c(new ConstStmt(type));
  // The text form cannot spell NaN payloads, so NaNs are kept canonical (the
  // quiet NaN with the sign of `value`) to keep print -> parse exact.
  if (std::isnan(value))
    value = std::copysign(std::numeric_limits<double>::quiet_NaN(), value);
  c->float_ = type == ScalarType::F32 ? static_cast<double>(static_cast<float>(value)) : value;
  return c;
}

bool ConstStmt::sameValue(const ConstStmt &other) const {
  if (scalarType() != other.scalarType())
    return false;
  if (isInteger(scalarType()))
    return int_ == other.int_;
  return std::bit_cast<uint64_t>(float_) == std::bit_cast<uint64_t>(other.float_);
}

Scalar ConstStmt::value() const {
  return isFloat(scalarType()) ? Scalar::ofFloat(scalarType(), float_)
                               : Scalar::ofInt(scalarType(), int_);
}

bool ConstStmt::isZero() const {
  return isInteger(scalarType()) ? int_ == 0 : float_ == 0.0;
}
bool ConstStmt::isOne() const {
  return isInteger(scalarType()) ? int_ == 1 : float_ == 1.0;
}

BinaryStmt::BinaryStmt(BinaryOp op, Value *lhs, Value *rhs, Type type)
    : Stmt(StmtKind::Binary, type, 2), op_(op) {
  initOperands({lhs, rhs});
}

UnaryStmt::UnaryStmt(UnaryOp op, Value *input, Type type)
    : Stmt(StmtKind::Unary, type, 1), op_(op) {
  initOperands({input});
}

CmpStmt::CmpStmt(CmpPredicate pred, Value *lhs, Value *rhs, ScalarType operandType)
    : Stmt(StmtKind::Cmp, Type::i1(), 2), pred_(pred), operandType_(operandType) {
  initOperands({lhs, rhs});
}

SelectStmt::SelectStmt(Value *cond, Value *t, Value *f, Type type)
    : Stmt(StmtKind::Select, type, 3) {
  initOperands({cond, t, f});
}

CastStmt::CastStmt(Value *input, ScalarType from, ScalarType to)
    : Stmt(StmtKind::Cast, Type::scalar(to), 1), from_(from) {
  initOperands({input});
}

LocalLoadStmt::LocalLoadStmt(Value *local, Type type) : Stmt(StmtKind::LocalLoad, type, 1) {
  initOperands({local});
}

LocalStoreStmt::LocalStoreStmt(Value *local, Value *value) : Stmt(StmtKind::LocalStore, Type(), 2) {
  initOperands({local, value});
}

bool GlobalAccessStmt::classof(const Value *v) {
  if (!Stmt::classof(v))
    return false;
  return kindDerivesFrom<GlobalAccessStmt>(static_cast<const Stmt *>(v)->kind());
}

GlobalAccessStmt::GlobalAccessStmt(StmtKind kind, Type type, const GlobalRef &ref,
                                   std::span<Value *const> indices, Value *value)
    : Stmt(kind, type,
           static_cast<unsigned>((ref.field ? 0 : 1) + indices.size() + (value ? 1 : 0))),
      field_(ref.field), component_(ref.component),
      numIndices_(static_cast<unsigned>(indices.size())) {
  assert((ref.field != nullptr) != (ref.ndarray != nullptr) && "exactly one global target");
  unsigned next = 0;
  if (!field_)
    setOperand(next++, ref.ndarray);
  initOperands(indices, next);
  if (value)
    setOperand(next + numIndices_, value);
}

std::vector<Value *> GlobalAccessStmt::indices() const {
  std::vector<Value *> out;
  for (unsigned i = 0; i < numIndices_; ++i)
    out.push_back(index(i));
  return out;
}

ScalarType GlobalAccessStmt::elementType() const {
  if (field_)
    return field_->elementType();
  Value *a = ndarray();
  return a ? a->type().element() : ScalarType::I32;
}

ShapeStmt::ShapeStmt(Value *ndarray, unsigned axis, Type type)
    : Stmt(StmtKind::Shape, type, 1), axis_(axis) {
  initOperands({ndarray});
}

ForStmt::ForStmt(Bound begin, Bound end, bool parallel)
    : Stmt(StmtKind::For, Type::i32(), 2), parallel_(parallel), consts_(2, 0) {
  setBegin(begin);
  setEnd(end);
}

ForStmt::ForStmt(std::span<const Bound> begins, std::span<const Bound> ends)
    : Stmt(StmtKind::For, Type::i32(), 2 * static_cast<unsigned>(begins.size())), parallel_(true),
      consts_(2 * begins.size(), 0) {
  assert(begins.size() == ends.size() && !begins.empty() && begins.size() <= kMaxDims);
  for (unsigned d = 0; d < begins.size(); ++d) {
    setBegin(begins[d], d);
    setEnd(ends[d], d);
  }
}

void ForStmt::setBegin(Bound b, unsigned dim) {
  setOperand(2 * dim, b.value);
  consts_[2 * dim] = b.value ? 0 : b.constant;
}

void ForStmt::setEnd(Bound b, unsigned dim) {
  setOperand(2 * dim + 1, b.value);
  consts_[2 * dim + 1] = b.value ? 0 : b.constant;
}

const ForStmt *enclosingParallelTask(const Stmt &s) {
  const Stmt *top = &s;
  for (const Stmt *p = s.parentStmt(); p; p = p->parentStmt())
    top = p;
  auto *f = dyn_cast<ForStmt>(top);
  return f && f->isParallel() && top != &s ? f : nullptr;
}

int taskDimOf(const Value *v, const ForStmt &task) {
  if (v == &task)
    return 0;
  auto *ti = dyn_cast<TaskIndexStmt>(v);
  if (!ti || ti->dim() >= task.numDims() || enclosingParallelTask(*ti) != &task)
    return -1;
  return static_cast<int>(ti->dim());
}

IfStmt::IfStmt(Value *cond) : Stmt(StmtKind::If, Type(), 1) {
  initOperands({cond});
}

bool AtomicRmwStmt::classof(const Value *v) {
  if (!Stmt::classof(v))
    return false;
  return kindDerivesFrom<AtomicRmwStmt>(static_cast<const Stmt *>(v)->kind());
}

bool AdStackOpStmt::classof(const Value *v) {
  if (!Stmt::classof(v))
    return false;
  return kindDerivesFrom<AdStackOpStmt>(static_cast<const Stmt *>(v)->kind());
}

AdStackAllocaStmt::AdStackAllocaStmt(ScalarType elem, Value *capacityArgument)
    : Stmt(StmtKind::AdStackAlloca, Type::adstack(elem), 1), capacity_(0) {
  setOperand(0, capacityArgument);
}

AdStackOpStmt::AdStackOpStmt(StmtKind kind, Type type, Value *stack, Value *value)
    : Stmt(kind, type, value ? 2 : 1) {
  setOperand(0, stack);
  if (value)
    setOperand(1, value);
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

int64_t Field::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape_)
    n *= d;
  return n;
}

bool Field::hasComponent(Component c) const {
  return c == Component::Primal || (c == Component::Grad && grad_) ||
         (c == Component::Dual && dual_);
}

Argument::Argument(std::string name, Type type, bool grad, bool dual)
    : Value(ValueKind::Argument, type), grad_(grad), dual_(dual) {
  setName(std::move(name));
}

static uint64_t nextKernelId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool Argument::hasComponent(Component c) const {
  return c == Component::Primal || (c == Component::Grad && grad_) ||
         (c == Component::Dual && dual_);
}

Kernel::Kernel(std::string name)
    : uniqueId_(nextKernelId()), name_(std::move(name)),
      body_(std::make_unique<Block>(nullptr, this)) {}

Kernel::~Kernel() {
  // Statements may use arguments; destroy them first.
  body_->clear();
}

Argument *Kernel::addArgument(std::unique_ptr<Argument> arg) {
  arg->index_ = static_cast<unsigned>(args_.size());
  arg->kernel_ = this;
  args_.push_back(std::move(arg));
  return args_.back().get();
}

Argument *Kernel::findArgument(std::string_view name) const {
  for (auto &a : args_)
    if (a->name() == name)
      return a.get();
  return nullptr;
}

Module::~Module() {
  // Kernels reference fields; drop them first.
  kernels_.clear();
}

Field *Module::addField(std::unique_ptr<Field> field) {
  field->module_ = this;
  fields_.push_back(std::move(field));
  return fields_.back().get();
}

Field *Module::findField(std::string_view name) const {
  for (auto &f : fields_)
    if (f->name() == name)
      return f.get();
  return nullptr;
}

Kernel *Module::addKernel(std::unique_ptr<Kernel> kernel) {
  kernel->module_ = this;
  kernels_.push_back(std::move(kernel));
  return kernels_.back().get();
}

Kernel *Module::findKernel(std::string_view name) const {
  for (auto &k : kernels_)
    if (k->name() == name)
      return k.get();
  return nullptr;
}

void Module::eraseKernel(Kernel *kernel) {
  std::erase_if(kernels_, [&](const std::unique_ptr<Kernel> &k) { return k.get() == kernel; });
}

} // namespace qd

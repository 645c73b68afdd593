//===- IRBuilder.cpp - Building IR from C++ -------------------------------===//
#include "qd/ir/IRBuilder.h"

#include <cassert>

namespace qd {

IRBuilder IRBuilder::before(Stmt &stmt) {
  IRBuilder b(*stmt.parent());
  b.pos_ = Block::iteratorTo(&stmt);
  b.loc_ = stmt.loc();
  return b;
}

IRBuilder IRBuilder::after(Stmt &stmt) {
  IRBuilder b(*stmt.parent());
  b.pos_ = std::next(Block::iteratorTo(&stmt));
  b.loc_ = stmt.loc();
  return b;
}

ConstStmt *IRBuilder::constInt(ScalarType type, int64_t value) {
  return insert(ConstStmt::getInt(type, value));
}
ConstStmt *IRBuilder::constFloat(ScalarType type, double value) {
  return insert(ConstStmt::getFloat(type, value));
}

BinaryStmt *IRBuilder::binary(BinaryOp op, Value *lhs, Value *rhs) {
  return insert(std::make_unique<BinaryStmt>(op, lhs, rhs, lhs->type()));
}
UnaryStmt *IRBuilder::unary(UnaryOp op, Value *v) {
  return insert(std::make_unique<UnaryStmt>(op, v, v->type()));
}
CmpStmt *IRBuilder::cmp(CmpPredicate pred, Value *lhs, Value *rhs) {
  return insert(std::make_unique<CmpStmt>(pred, lhs, rhs, lhs->type().element()));
}
SelectStmt *IRBuilder::select(Value *cond, Value *t, Value *f) {
  return insert(std::make_unique<SelectStmt>(cond, t, f, t->type()));
}
CastStmt *IRBuilder::cast(Value *v, ScalarType to) {
  return insert(std::make_unique<CastStmt>(v, v->type().element(), to));
}

AllocaStmt *IRBuilder::alloca(ScalarType elem) {
  return insert(std::make_unique<AllocaStmt>(elem));
}
LocalLoadStmt *IRBuilder::load(Value *local) {
  return insert(std::make_unique<LocalLoadStmt>(local, Type::scalar(local->type().element())));
}
LocalStoreStmt *IRBuilder::store(Value *local, Value *value) {
  return insert(std::make_unique<LocalStoreStmt>(local, value));
}

namespace {
ScalarType elementOf(const GlobalRef &ref) {
  return ref.field ? ref.field->elementType() : ref.ndarray->type().element();
}
} // namespace

GlobalLoadStmt *IRBuilder::load(const GlobalRef &ref, std::initializer_list<Value *> indices) {
  return load(ref, std::span<Value *const>(indices.begin(), indices.size()));
}
GlobalLoadStmt *IRBuilder::load(const GlobalRef &ref, std::span<Value *const> indices) {
  return insert(std::make_unique<GlobalLoadStmt>(ref, indices, Type::scalar(elementOf(ref))));
}
GlobalStoreStmt *IRBuilder::store(const GlobalRef &ref, std::initializer_list<Value *> indices,
                                  Value *value) {
  return store(ref, std::span<Value *const>(indices.begin(), indices.size()), value);
}
GlobalStoreStmt *IRBuilder::store(const GlobalRef &ref, std::span<Value *const> indices,
                                  Value *value) {
  return insert(std::make_unique<GlobalStoreStmt>(ref, indices, value));
}
AtomicAddStmt *IRBuilder::atomicAdd(const GlobalRef &ref, std::initializer_list<Value *> indices,
                                    Value *value) {
  return atomicAdd(ref, std::span<Value *const>(indices.begin(), indices.size()), value);
}
AtomicAddStmt *IRBuilder::atomicAdd(const GlobalRef &ref, std::span<Value *const> indices,
                                    Value *value) {
  return insert(std::make_unique<AtomicAddStmt>(ref, indices, value, elementOf(ref)));
}
AtomicMaxStmt *IRBuilder::atomicMax(const GlobalRef &ref, std::span<Value *const> indices,
                                    Value *value) {
  return insert(std::make_unique<AtomicMaxStmt>(ref, indices, value, elementOf(ref)));
}
AtomicRmwStmt *IRBuilder::atomic(AtomicOp op, const GlobalRef &ref, std::span<Value *const> indices,
                                 Value *value) {
  switch (op) {
  case AtomicOp::Add:
    return atomicAdd(ref, indices, value);
  case AtomicOp::Max:
    return atomicMax(ref, indices, value);
  }
  return nullptr;
}
ShapeStmt *IRBuilder::shape(Value *ndarray, unsigned axis, ScalarType type) {
  return insert(std::make_unique<ShapeStmt>(ndarray, axis, Type::scalar(type)));
}

AdStackAllocaStmt *IRBuilder::adstackAlloca(ScalarType elem, int64_t capacity) {
  return insert(std::make_unique<AdStackAllocaStmt>(elem, capacity));
}
AdStackPushStmt *IRBuilder::adstackPush(Value *stack, Value *value) {
  return insert(std::make_unique<AdStackPushStmt>(stack, value));
}
AdStackPopStmt *IRBuilder::adstackPop(Value *stack) {
  return insert(std::make_unique<AdStackPopStmt>(stack));
}
AdStackLoadTopStmt *IRBuilder::adstackLoadTop(Value *stack) {
  return insert(std::make_unique<AdStackLoadTopStmt>(stack, Type::scalar(stack->type().element())));
}
AdStackLoadTopAdjStmt *IRBuilder::adstackLoadTopAdj(Value *stack) {
  return insert(
      std::make_unique<AdStackLoadTopAdjStmt>(stack, Type::scalar(stack->type().element())));
}
AdStackAccAdjointStmt *IRBuilder::adstackAccAdjoint(Value *stack, Value *value) {
  return insert(std::make_unique<AdStackAccAdjointStmt>(stack, value));
}

BreakStmt *IRBuilder::brk() {
  return insert(std::make_unique<BreakStmt>());
}
ContinueStmt *IRBuilder::cont() {
  return insert(std::make_unique<ContinueStmt>());
}

//===----------------------------------------------------------------------===//
// Scopes
//===----------------------------------------------------------------------===//

IRBuilder::Scope::Scope(IRBuilder &b, Stmt *stmt, Block &inner)
    : builder_(&b), stmt_(stmt), savedBlock_(b.block_), savedPos_(b.pos_) {
  b.setInsertionPointToEnd(inner);
}

IRBuilder::Scope::Scope(Scope &&other) noexcept
    : builder_(other.builder_), stmt_(other.stmt_), savedBlock_(other.savedBlock_),
      savedPos_(other.savedPos_) {
  other.builder_ = nullptr;
}

IRBuilder::Scope::~Scope() {
  close();
}

void IRBuilder::Scope::close() {
  if (!builder_)
    return;
  builder_->setInsertionPoint(*savedBlock_, savedPos_);
  builder_ = nullptr;
}

void IRBuilder::IfScope::otherwise() {
  assert(builder_ && "otherwise() on a closed if scope");
  builder_->setInsertionPointToEnd(stmt()->elseBlock());
}

IRBuilder::LoopScope IRBuilder::parallelFor(Bound begin, Bound end) {
  ForStmt *f = insert(std::make_unique<ForStmt>(begin, end, /*parallel=*/true));
  return LoopScope(*this, f, f->body());
}
IRBuilder::LoopScope IRBuilder::parallelBand(std::span<const Bound> begins,
                                             std::span<const Bound> ends) {
  ForStmt *f = insert(std::make_unique<ForStmt>(begins, ends));
  for (unsigned d = 1; d < f->numDims(); ++d) {
    Stmt *index = f->body().push_back(std::make_unique<TaskIndexStmt>(d));
    index->setLoc(loc_);
  }
  return LoopScope(*this, f, f->body());
}

Value *IRBuilder::LoopScope::index(unsigned dim) const {
  if (dim == 0)
    return stmt_;
  for (Stmt &s : stmt()->body())
    if (auto *ti = dyn_cast<TaskIndexStmt>(&s); ti && ti->dim() == dim)
      return ti;
  return nullptr;
}

IRBuilder::LoopScope IRBuilder::forRange(Bound begin, Bound end) {
  ForStmt *f = insert(std::make_unique<ForStmt>(begin, end, /*parallel=*/false));
  return LoopScope(*this, f, f->body());
}
IRBuilder::BlockScope IRBuilder::serial() {
  SerialStmt *s = insert(std::make_unique<SerialStmt>());
  return BlockScope(*this, s, s->body());
}
IRBuilder::BlockScope IRBuilder::whileLoop() {
  WhileStmt *s = insert(std::make_unique<WhileStmt>());
  return BlockScope(*this, s, s->body());
}
IRBuilder::IfScope IRBuilder::ifThen(Value *cond) {
  IfStmt *s = insert(std::make_unique<IfStmt>(cond));
  return IfScope(*this, s, s->thenBlock());
}

} // namespace qd

//===- SizingCapture.cpp - Loop bounds as SizeExprs -----------------------===//
//
// Builds the SizeExpr of a loop bound from the SSA values it is computed
// from: scalar arguments, ndarray shapes, field and ndarray reads of data the
// kernel does not write, enclosing loop indices, add/sub/mul/max/min/div/rem
// and integer casts. Anything else is outside the grammar, with the reason recorded.
//
//===----------------------------------------------------------------------===//
#include "SizingStructural.h"

#include "qd/analysis/ConstantFolding.h"

#include <fmt/format.h>

namespace qd::sizing {

E StructuralSizer::bound(Bound b, const ForStmt &loop) {
  if (b.isConstant())
    return cst(b.constant);
  E e = capture(b.value);
  if (!e)
    fail(fmt::format("the loop at {} has a bound outside the SizeExpr grammar: {}",
                     loop.loc().str(), captureErrors_[b.value]));
  return e;
}

E StructuralSizer::capture(const Value *v) {
  if (auto it = cache_.find(v); it != cache_.end())
    return it->second;
  E e = captureUncached(v);
  cache_[v] = e;
  return e;
}

E StructuralSizer::reject(const Value *v, std::string why) {
  captureErrors_[v] = std::move(why);
  return nullptr;
}

E StructuralSizer::captureUncached(const Value *v) {
  if (auto c = evaluateConstantInt(v))
    return cst(*c);
  if (auto *arg = dyn_cast<Argument>(v)) {
    if (arg->isNdarray() || !isInteger(arg->type().element()))
      return reject(v, fmt::format("argument %{} is not an integer scalar", arg->name()));
    return SizeExpr::scalarArg(arg->index());
  }
  const auto *s = dyn_cast<Stmt>(v);
  if (!s)
    return reject(v, "unknown value");
  std::string where = s->loc().str();
  switch (s->kind()) {
  case StmtKind::Shape: {
    auto &sh = cast<ShapeStmt>(*s);
    auto *arg = dyn_cast<Argument>(sh.ndarray());
    if (!arg)
      return reject(v, fmt::format("the shape at {} is not of a kernel argument", where));
    return SizeExpr::ndarrayShape(arg->index(), sh.axis());
  }
  case StmtKind::For:
  case StmtKind::TaskIndex: {
    auto it = facts_.varOf.find(s);
    if (it == facts_.varOf.end())
      return reject(v, fmt::format("the task index at {} is outside a parallel for", where));
    return SizeExpr::boundVar(it->second);
  }
  case StmtKind::GlobalLoad: {
    auto &g = cast<GlobalLoadStmt>(*s);
    std::string name = g.isField() ? "@" + g.field()->name() : "%" + g.ndarray()->name();
    if (g.component() != Component::Primal || !isInteger(g.elementType()))
      return reject(v, fmt::format("the load at {} does not read integer primal data", where));
    bool written = g.isField() ? facts_.writtenFields.count(g.field()) > 0
                               : facts_.writtenNdarrays.count(g.ndarray()) > 0;
    if (written)
      return reject(v, fmt::format("the kernel writes {}, so the value the loop at {} reads may "
                                   "differ from its value at launch",
                                   name, where));
    std::vector<E> idx;
    for (unsigned i = 0; i < g.numIndices(); ++i) {
      E e = capture(g.index(i));
      if (!e)
        return reject(v, captureErrors_[g.index(i)]);
      idx.push_back(e);
    }
    if (g.isField())
      return SizeExpr::fieldLoad(g.field()->name(), std::move(idx));
    auto *arg = dyn_cast<Argument>(g.ndarray());
    if (!arg)
      return reject(v, fmt::format("the load at {} is not from a kernel argument", where));
    return SizeExpr::ndarrayRead(arg->index(), std::move(idx));
  }
  case StmtKind::Binary: {
    auto &b = cast<BinaryStmt>(*s);
    if (!isInteger(b.type().element()) || b.type().element() == ScalarType::I1)
      return reject(v, fmt::format("the operation at {} is not on integers", where));
    E l = capture(b.lhs());
    if (!l)
      return reject(v, captureErrors_[b.lhs()]);
    E r = capture(b.rhs());
    if (!r)
      return reject(v, captureErrors_[b.rhs()]);
    switch (b.op()) {
    case BinaryOp::Add:
      return SizeExpr::add(l, r);
    case BinaryOp::Sub:
      return SizeExpr::sub(l, r);
    case BinaryOp::Mul:
      return SizeExpr::mul(l, r);
    case BinaryOp::Max:
      return SizeExpr::max(l, r);
    case BinaryOp::Min:
      return SizeExpr::min(l, r);
    case BinaryOp::Div:
      return SizeExpr::div(l, r);
    case BinaryOp::Rem:
      return SizeExpr::rem(l, r);
    case BinaryOp::Pow:
    case BinaryOp::Atan2:
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      break;
    }
    return reject(v, fmt::format("'{}' at {} is not one of add, sub, mul, max, min, div, rem",
                                 toString(b.op()), where));
  }
  case StmtKind::Cast: {
    auto &c = cast<CastStmt>(*s);
    if (isInteger(c.from()) && c.from() != ScalarType::I1 && isInteger(c.to()) &&
        c.to() != ScalarType::I1) {
      E in = capture(c.input());
      if (!in)
        return reject(v, captureErrors_[c.input()]);
      // Narrowing keeps the low 32 bits, as the kernel does.
      return bitWidth(c.to()) >= bitWidth(c.from()) ? in : SizeExpr::trunc32(in);
    }
    return reject(v, fmt::format("the cast at {} may change the value", where));
  }
  case StmtKind::LocalLoad:
    return reject(v, fmt::format("the value at {} is loaded from a local variable, so it is only "
                                 "known while the kernel runs",
                                 where));
  default:
    return reject(v, fmt::format("'{}' at {} is not in the grammar", mnemonic(s->kind()), where));
  }
}

} // namespace qd::sizing

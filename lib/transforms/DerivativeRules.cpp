//===- DerivativeRules.cpp - Partial derivatives of each operation --------===//
#include "DerivativeRules.h"

#include <fmt/format.h>

namespace qd::ad {

bool hasDerivativeRule(const Stmt &s) {
  return s.type().isFloatScalar() &&
         (isa<UnaryStmt>(&s) || isa<BinaryStmt>(&s) || isa<SelectStmt>(&s) || isa<CastStmt>(&s));
}

namespace {
bool hasPartials(OpDiff d) {
  switch (d) {
  case OpDiff::Smooth:
  case OpDiff::Piecewise:
    return true;
  case OpDiff::Rejected:
  case OpDiff::Integer:
    return false;
  }
  return false;
}
} // namespace

bool isDifferentiable(const Stmt &s) {
  if (auto *u = dyn_cast<UnaryStmt>(&s))
    return hasPartials(diffOf(u->op()));
  if (auto *b = dyn_cast<BinaryStmt>(&s))
    return hasPartials(diffOf(b->op()));
  return true;
}

std::string notDifferentiableMessage(const Stmt &s, std::string_view derivative) {
  if (auto *u = dyn_cast<UnaryStmt>(&s))
    return fmt::format("'{}' is not differentiable; cast the value to an integer to stop its {} "
                       "explicitly",
                       toString(u->op()), derivative);
  return fmt::format("'{}' is not differentiable; compute it from values without a {}",
                     toString(cast<BinaryStmt>(s).op()), derivative);
}

bool hasDerivativeFactor(const Stmt &s) {
  auto *u = dyn_cast<UnaryStmt>(&s);
  if (!u || !u->type().isFloatScalar())
    return false;
  switch (u->op()) {
  case UnaryOp::Sin:
  case UnaryOp::Cos:
  case UnaryOp::Exp:
  case UnaryOp::Tanh:
    return true;
  case UnaryOp::Neg:
  case UnaryOp::Abs:
  case UnaryOp::Tan:
  case UnaryOp::Log:
  case UnaryOp::Sqrt:
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Not:
    return false;
  }
  return false;
}

Value *derivativeFactor(const Stmt &s, IRBuilder &b, const PrimalFn &p) {
  const auto &u = cast<UnaryStmt>(s);
  const Value *x = u.input();
  switch (u.op()) {
  case UnaryOp::Sin: // cos(x)
    return b.cos(p(x));
  case UnaryOp::Cos: // -sin(x)
    // The sign goes on the factor, never on the product: a negated product
    // in a long adjoint chain makes LLVM's InstCombine push each negation
    // down the whole chain (quadratic: 2000 cos took 1.7 s to combine).
    // The value is the same, bit for bit.
    return b.neg(b.sin(p(x)));
  case UnaryOp::Exp: // exp(x), the result
    return p(&u);
  case UnaryOp::Tanh: { // 1 - tanh(x)^2
    Value *y = p(&u);
    return b.sub(b.constFloat(u.type().element(), 1), b.mul(y, y));
  }
  case UnaryOp::Neg:
  case UnaryOp::Abs:
  case UnaryOp::Tan:
  case UnaryOp::Log:
  case UnaryOp::Sqrt:
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Not: // no factor (hasDerivativeFactor)
    return nullptr;
  }
  return nullptr;
}

namespace {

using Times = std::function<Value *(IRBuilder &, Value *)>;

Partial scaled(unsigned operand, Times times, bool negated = false) {
  Partial p;
  p.operand = operand;
  p.times = std::move(times);
  p.negated = negated;
  return p;
}

Partial selection(unsigned operand, Value *cond, bool whenTrue) {
  Partial p;
  p.operand = operand;
  p.cond = cond;
  p.whenTrue = whenTrue;
  return p;
}

std::vector<Partial> unaryPartials(const UnaryStmt &u, IRBuilder &b, const PrimalFn &p) {
  const Value *x = u.input();
  ScalarType t = u.type().element();
  const Stmt *self = &u;
  if (hasDerivativeFactor(u)) // sin, cos, exp, tanh: seed * factor
    return {
        scaled(0, [=](IRBuilder &b, Value *s) { return b.mul(s, derivativeFactor(*self, b, p)); })};
  switch (u.op()) {
  case UnaryOp::Neg:
    return {scaled(0, nullptr, /*negated=*/true)};
  case UnaryOp::Abs: // sign(x)
    return {scaled(0, [=](IRBuilder &b, Value *s) {
      Value *neg = b.cmp(CmpPredicate::Lt, p(x), b.constFloat(t, 0));
      return b.select(neg, b.neg(s), s);
    })};
  case UnaryOp::Tan: // 1 / cos(x)^2
    return {scaled(0, [=](IRBuilder &b, Value *s) {
      Value *cx = b.cos(p(x));
      return b.div(s, b.mul(cx, cx));
    })};
  case UnaryOp::Log: // 1 / x
    return {scaled(0, [=](IRBuilder &b, Value *s) { return b.div(s, p(x)); })};
  case UnaryOp::Sqrt: // 1 / (2 sqrt(x))
    return {scaled(
        0, [=](IRBuilder &b, Value *s) { return b.div(s, b.mul(b.constFloat(t, 2), p(self))); })};
  case UnaryOp::Sin:
  case UnaryOp::Cos:
  case UnaryOp::Exp:
  case UnaryOp::Tanh: // the factor above
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Not: // no partials: Rejected or Integer in Ops.def
    return {};
  }
  return {};
}

std::vector<Partial> binaryPartials(const BinaryStmt &bin, IRBuilder &b, const PrimalFn &p) {
  const Value *x = bin.lhs(), *y = bin.rhs();
  ScalarType t = bin.type().element();
  switch (bin.op()) {
  case BinaryOp::Add:
    return {scaled(0, nullptr), scaled(1, nullptr)};
  case BinaryOp::Sub:
    return {scaled(0, nullptr), scaled(1, nullptr, /*negated=*/true)};
  case BinaryOp::Mul:
    return {scaled(0, [=](IRBuilder &b, Value *s) { return b.mul(s, p(y)); }),
            scaled(1, [=](IRBuilder &b, Value *s) { return b.mul(s, p(x)); })};
  case BinaryOp::Div: { // 1 / y and -x / y^2
    Value *yv = p(y);
    return {scaled(0, [=](IRBuilder &b, Value *s) { return b.div(s, yv); }),
            scaled(1, [=](IRBuilder &b, Value *s) {
              return b.div(b.mul(s, b.neg(p(x))), b.mul(yv, yv)); // the sign on the factor
            })};
  }
  case BinaryOp::Min:
  case BinaryOp::Max: {
    // The operand the result came from gets the derivative (lhs on ties).
    Value *xv = p(x), *yv = p(y);
    Value *takesX = b.cmp(bin.op() == BinaryOp::Min ? CmpPredicate::Le : CmpPredicate::Ge, xv, yv);
    return {selection(0, takesX, true), selection(1, takesX, false)};
  }
  case BinaryOp::Pow: { // y x^(y-1) and, for x > 0, x^y log(x)
    Value *xv = p(x), *yv = p(y);
    return {scaled(0,
                   [=](IRBuilder &b, Value *s) {
                     Value *xm1 = b.binary(BinaryOp::Pow, xv, b.sub(yv, b.constFloat(t, 1)));
                     return b.mul(s, b.mul(yv, xm1));
                   }),
            scaled(1, [=](IRBuilder &b, Value *s) {
              Value *pos = b.cmp(CmpPredicate::Gt, xv, b.constFloat(t, 0));
              Value *safe = b.select(pos, xv, b.constFloat(t, 1));
              Value *d = b.mul(b.binary(BinaryOp::Pow, safe, yv), b.unary(UnaryOp::Log, safe));
              return b.mul(s, b.select(pos, d, b.constFloat(t, 0)));
            })};
  }
  case BinaryOp::Atan2: { // atan2(x, y): y / r2 and -x / r2
    Value *xv = p(x), *yv = p(y);
    Value *r2 = b.add(b.mul(xv, xv), b.mul(yv, yv));
    return {scaled(0, [=](IRBuilder &b, Value *s) { return b.div(b.mul(s, yv), r2); }),
            scaled(1, [=](IRBuilder &b, Value *s) {
              return b.div(b.mul(s, b.neg(xv)), r2); // the sign on the factor
            })};
  }
  case BinaryOp::Rem:
  case BinaryOp::And:
  case BinaryOp::Or:
  case BinaryOp::Xor:
  case BinaryOp::Shl:
  case BinaryOp::Shr: // no partials: Rejected or Integer in Ops.def
    return {};
  }
  return {};
}

} // namespace

std::vector<Partial> partials(const Stmt &s, IRBuilder &b, const PrimalFn &primal) {
  if (auto *u = dyn_cast<UnaryStmt>(&s))
    return unaryPartials(*u, b, primal);
  if (auto *bin = dyn_cast<BinaryStmt>(&s))
    return binaryPartials(*bin, b, primal);
  if (auto *sel = dyn_cast<SelectStmt>(&s)) {
    Value *cond = primal(sel->cond());
    return {selection(1, cond, true), selection(2, cond, false)};
  }
  if (auto *c = dyn_cast<CastStmt>(&s)) {
    if (!isFloat(c->from()))
      return {}; // int -> float: a constant as far as derivatives go
    ScalarType from = c->from(), to = c->to();
    // The seed changes sides: to `to` going forward, to `from` going back.
    return {scaled(0, [=](IRBuilder &b, Value *seed) {
      return b.cast(seed, seed->type().element() == from ? to : from);
    })};
  }
  return {};
}

void primalReads(const Stmt &s, const std::function<bool(const Value *)> &active,
                 const std::function<void(const Value *)> &need) {
  if (auto *u = dyn_cast<UnaryStmt>(&s)) {
    switch (u->op()) {
    case UnaryOp::Exp:
    case UnaryOp::Sqrt:
    case UnaryOp::Tanh:
      need(u); // the derivative is written with the result
      break;
    case UnaryOp::Neg:
    case UnaryOp::Floor:
    case UnaryOp::Ceil:
    case UnaryOp::Not: // no partials
      break;
    case UnaryOp::Abs:
    case UnaryOp::Sin:
    case UnaryOp::Cos:
    case UnaryOp::Tan:
    case UnaryOp::Log:
      need(u->input());
      break;
    }
  } else if (auto *b = dyn_cast<BinaryStmt>(&s)) {
    switch (b->op()) {
    case BinaryOp::Mul:
      if (active(b->lhs()))
        need(b->rhs());
      if (active(b->rhs()))
        need(b->lhs());
      break;
    case BinaryOp::Div:
      need(b->rhs());
      if (active(b->rhs()))
        need(b->lhs());
      break;
    case BinaryOp::Min:
    case BinaryOp::Max:
    case BinaryOp::Pow:
    case BinaryOp::Atan2:
      need(b->lhs());
      need(b->rhs());
      break;
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Rem:
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
    case BinaryOp::Shl:
    case BinaryOp::Shr: // constant partials, or none
      break;
    }
  } else if (auto *sel = dyn_cast<SelectStmt>(&s)) {
    need(sel->cond());
  }
}

Value *applyPartial(const Partial &p, IRBuilder &b, Value *seed) {
  Value *v;
  if (p.cond) {
    Value *zero = b.constFloat(seed->type().element(), 0);
    v = p.whenTrue ? b.select(p.cond, seed, zero) : b.select(p.cond, zero, seed);
  } else {
    v = p.times ? p.times(b, seed) : seed;
  }
  return p.negated ? b.neg(v) : v;
}

Value *forwardTangent(const Stmt &s, IRBuilder &b,
                      const std::function<Value *(const Value *)> &tangent) {
  bool any = false;
  for (unsigned i = 0; i < s.numOperands(); ++i)
    any |= tangent(s.operand(i)) != nullptr;
  if (!any)
    return nullptr;
  std::vector<Partial> parts =
      partials(s, b, [](const Value *v) { return const_cast<Value *>(v); });
  ScalarType t = s.type().element();
  // Selections of one condition (select's arms, min/max): one select of
  // the two tangents, the missing one 0.
  if (!parts.empty() && parts.front().cond) {
    Value *cond = parts.front().cond;
    Value *onTrue = nullptr, *onFalse = nullptr;
    bool merged = true;
    for (const Partial &p : parts) {
      merged &= p.cond == cond && !p.negated;
      (p.whenTrue ? onTrue : onFalse) = tangent(s.operand(p.operand));
    }
    if (merged)
      return b.select(cond, onTrue ? onTrue : b.constFloat(t, 0),
                      onFalse ? onFalse : b.constFloat(t, 0));
  }
  Value *sum = nullptr;
  for (const Partial &p : parts) {
    Value *dx = tangent(s.operand(p.operand));
    if (!dx)
      continue;
    Partial positive = p;
    positive.negated = false;
    Value *term = applyPartial(positive, b, dx);
    if (p.negated)
      sum = sum ? static_cast<Value *>(b.sub(sum, term)) : b.neg(term);
    else
      sum = sum ? b.add(sum, term) : term;
  }
  return sum;
}

} // namespace qd::ad

//===- DerivativeRules.h - Partial derivatives of each operation ---------===//
//
// The one table of derivative rules of forward and reverse mode. For a
// unary, binary, select or cast statement `s = f(x0, x1, ...)`, the rule of
// each operand xi builds `seed * df/dxi` at a builder's position:
//  - forward mode sums `tangent(xi) * df/dxi` over the operands with a
//    tangent (forwardTangent);
//  - reverse mode accumulates `adjoint(s) * df/dxi` into each active
//    operand's adjoint.
// The product with the seed is built by the rule itself, not as a separate
// partial times the seed, so that every derivative is computed with the
// operations (and roundings) of the textbook formula: `seed / y` for a
// quotient, not `seed * (1 / y)`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/IRBuilder.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace qd::ad {

/// Reads the primal value of a source value (an operand of the statement,
/// or the statement itself) at the builder's position: in forward mode the
/// value itself, in reverse mode the value the reverse frame sees (which
/// may load a backup or recompute it).
using PrimalFn = std::function<Value *(const Value *)>;

/// `seed * df/dx` for one operand x.
struct Partial {
  unsigned operand = 0;
  /// A selection (select arms, min, max): df/dx is 1 where `cond` is
  /// `whenTrue` and 0 elsewhere, so the product is `select(cond, seed, 0)`
  /// (or its mirror). Forward mode merges the selections of one condition
  /// into a single select.
  Value *cond = nullptr;
  bool whenTrue = true;
  /// Otherwise: builds `seed * |df/dx|`; null for 1. The seed has the type
  /// of the side it comes from (the operand in forward mode, the result in
  /// reverse mode); only a cast's product has the other side's type.
  std::function<Value *(IRBuilder &, Value *seed)> times;
  /// df/dx is -1 (neg, the rhs of sub): the product is `-seed` (forward
  /// mode subtracts it). A rule with a factor puts the sign on the factor
  /// instead (`seed * -sin(x)`): a negated product would negate the chain
  /// of adjoints, which LLVM's InstCombine then rewrites in quadratic time.
  bool negated = false;
};

/// Whether `s` is one of the statements the rules cover: unary, binary,
/// select and cast with a float result.
bool hasDerivativeRule(const Stmt &s);

/// Whether derivatives can flow through `s` (a statement with a rule):
/// floor, ceil and rem have none.
bool isDifferentiable(const Stmt &s);

/// The error text for a non-differentiable `s` whose derivative is needed;
/// `derivative` is "gradient" or "tangent".
std::string notDifferentiableMessage(const Stmt &s, std::string_view derivative);

/// The partials of a differentiable `s`, one per operand derivatives flow
/// through. Values the partials share are built at once, at the builder's
/// position; the rest is built by `times` when called. An integer-to-float
/// cast has none.
std::vector<Partial> partials(const Stmt &s, IRBuilder &b, const PrimalFn &primal);

/// Calls `need` for every source value that `partials(s)` and the `times`
/// of the operands `active` accepts read with `primal` (the reverse pass
/// keeps exactly these primal values).
void primalReads(const Stmt &s, const std::function<bool(const Value *)> &active,
                 const std::function<void(const Value *)> &need);

/// Whether the one partial of `s` is `seed * factor` with a factor that
/// reads nothing but `s`'s operand or result (sin, cos, exp, tanh): reverse
/// mode may then compute the factor in the forward sweep and tape it.
bool hasDerivativeFactor(const Stmt &s);

/// That factor (`cos(x)` for sin, `-sin(x)` for cos, the result for exp,
/// `1 - y^2` for tanh), built at `b`: the rule multiplies the seed by
/// exactly this value.
Value *derivativeFactor(const Stmt &s, IRBuilder &b, const PrimalFn &primal);

/// `seed * df/dx` of one partial, as reverse mode accumulates it.
Value *applyPartial(const Partial &p, IRBuilder &b, Value *seed);

/// The tangent of `s`: the sum of `tangent(xi) * df/dxi` over the operands
/// with a tangent (`tangent` returns null for none); null when no operand
/// has one.
Value *forwardTangent(const Stmt &s, IRBuilder &b,
                      const std::function<Value *(const Value *)> &tangent);

} // namespace qd::ad

//===- ConstantFolding.cpp - Exact scalar evaluation ----------------------===//
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/ScalarOps.h"

#include <cmath>
#include <limits>
#include <unordered_map>

namespace qd {

namespace {

int64_t minOf(ScalarType t) {
  return t == ScalarType::I32 ? std::numeric_limits<int32_t>::min()
                              : std::numeric_limits<int64_t>::min();
}

/// Whether folding `op` could disagree with some backend (or the operation
/// is undefined); the runtime semantics themselves come from evalBinary.
bool declineBinary(BinaryOp op, const Scalar &a, const Scalar &b) {
  if (a.isFloat()) {
    if (foldOf(op) == OpFold::Libm) // each backend's math library rounds its own way
      return true;
    switch (op) {
    case BinaryOp::Div:
    case BinaryOp::Rem:
      return b.f == 0;
    case BinaryOp::Min:
    case BinaryOp::Max:
      return std::isnan(a.f) || std::isnan(b.f) ||
             (a.f == 0 && b.f == 0 && std::signbit(a.f) != std::signbit(b.f));
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Pow:
    case BinaryOp::Atan2:
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      return false;
    }
  }
  if (a.type == ScalarType::I1) // only the logical operations are meaningful on i1
    return op != BinaryOp::And && op != BinaryOp::Or && op != BinaryOp::Xor &&
           op != BinaryOp::Min && op != BinaryOp::Max;
  return (op == BinaryOp::Div || op == BinaryOp::Rem) && a.i == minOf(a.type) && b.i == -1;
}

} // namespace

std::optional<ConstantValue> foldBinary(BinaryOp op, const ConstantValue &a,
                                        const ConstantValue &b) {
  if (a.type != b.type || declineBinary(op, a, b))
    return std::nullopt;
  ScalarResult r = evalBinary(op, a, b);
  if (const Scalar *v = std::get_if<Scalar>(&r))
    return *v;
  return std::nullopt; // undefined: division by zero, shift out of range
}

std::optional<ConstantValue> foldUnary(UnaryOp op, const ConstantValue &a) {
  OpDomain domain = domainOf(op);
  if (domain != OpDomain::Any && (domain == OpDomain::Float) != a.isFloat())
    return std::nullopt;                         // outside its domain
  if (a.isFloat() && foldOf(op) == OpFold::Libm) // transcendentals differ between libms
    return std::nullopt;
  if (a.type == ScalarType::I1 && op != UnaryOp::Not) // neg and abs are not defined on i1
    return std::nullopt;
  return evalUnary(op, a);
}

std::optional<ConstantValue> foldCmp(CmpPredicate pred, const ConstantValue &a,
                                     const ConstantValue &b) {
  if (a.type != b.type)
    return std::nullopt;
  return Scalar::ofInt(ScalarType::I1, evalCmp(pred, a, b) ? 1 : 0);
}

std::optional<ConstantValue> foldCast(const ConstantValue &a, ScalarType to) {
  if (a.isFloat() && isInteger(to)) {
    // Float-to-integer casts of NaN or out-of-range values saturate in the
    // interpreter but differ between backends; float-to-i1 likewise.
    if (to == ScalarType::I1 || std::isnan(a.f))
      return std::nullopt;
    double t = std::trunc(a.f), lo = static_cast<double>(minOf(to));
    if (!(t >= lo && t < -lo))
      return std::nullopt;
  }
  return evalCast(a, to);
}

namespace {
/// Evaluates a tree of foldable statements. Results are memoized per value,
/// so shared operands (a DAG such as `%b = add %a, %a; %c = add %b, %b ...`)
/// are evaluated once instead of once per path. Too deep a tree makes the
/// whole evaluation fail, so a memoized result never depends on the depth at
/// which it was first reached.
class Evaluator {
public:
  std::optional<ConstantValue> run(const Value *v) {
    std::optional<ConstantValue> r = evaluate(v, 0);
    return tooDeep_ ? std::nullopt : r;
  }

private:
  std::optional<ConstantValue> evaluate(const Value *v, unsigned depth) {
    if (depth > 64) {
      tooDeep_ = true;
      return std::nullopt;
    }
    if (tooDeep_ || !v || !Stmt::classof(v))
      return std::nullopt;
    auto it = memo_.find(v);
    if (it != memo_.end())
      return it->second;
    std::optional<ConstantValue> r = compute(static_cast<const Stmt *>(v), depth);
    memo_.emplace(v, r);
    return r;
  }

  std::optional<ConstantValue> compute(const Stmt *s, unsigned depth) {
    if (!isFoldable(s->kind())) // the per-kind part, from StmtKinds.def
      return std::nullopt;
    auto operand = [&](unsigned i) { return evaluate(s->operand(i), depth + 1); };
    switch (s->kind()) {
    case StmtKind::Const:
      return cast<ConstStmt>(s)->value();
    case StmtKind::Binary: {
      auto a = operand(0);
      auto b = a ? operand(1) : std::nullopt;
      if (!a || !b)
        return std::nullopt;
      return foldBinary(cast<BinaryStmt>(s)->op(), *a, *b);
    }
    case StmtKind::Unary: {
      auto a = operand(0);
      return a ? foldUnary(cast<UnaryStmt>(s)->op(), *a) : std::nullopt;
    }
    case StmtKind::Cmp: {
      auto a = operand(0);
      auto b = a ? operand(1) : std::nullopt;
      if (!a || !b)
        return std::nullopt;
      return foldCmp(cast<CmpStmt>(s)->predicate(), *a, *b);
    }
    case StmtKind::Select: {
      auto c = operand(0);
      if (!c)
        return std::nullopt;
      return operand(c->i ? 1 : 2);
    }
    case StmtKind::Cast: {
      auto a = operand(0);
      return a ? foldCast(*a, cast<CastStmt>(s)->to()) : std::nullopt;
    }
    default:
      return std::nullopt;
    }
  }

  std::unordered_map<const Value *, std::optional<ConstantValue>> memo_;
  bool tooDeep_ = false;
};

std::optional<int64_t> boundValue(Bound b) {
  if (b.isConstant())
    return b.constant;
  return evaluateConstantInt(b.value);
}
} // namespace

std::optional<ConstantValue> evaluateConstant(const Value *v) {
  return Evaluator().run(v);
}

std::optional<int64_t> evaluateConstantInt(const Value *v) {
  auto c = evaluateConstant(v);
  if (!c || c->isFloat())
    return std::nullopt;
  return c->i;
}

std::optional<int64_t> constantTripCount(const ForStmt &loop) {
  // A band's count is the product of its extents: 0 as soon as one is.
  std::optional<int64_t> count = 1;
  for (unsigned d = 0; d < loop.numDims(); ++d) {
    auto b = boundValue(loop.begin(d)), e = boundValue(loop.end(d));
    if (b && e && *e <= *b)
      return 0;
    if (!b || !e || !count || __builtin_mul_overflow(*count, *e - *b, &*count))
      count = std::nullopt;
  }
  return count;
}

} // namespace qd

//===- ConstantFolding.cpp - Exact scalar evaluation ----------------------===//
#include "qd/analysis/ConstantFolding.h"

#include <cmath>
#include <limits>
#include <unordered_map>

namespace qd {

namespace {

/// Wraps an int64 result to the width of `t` (sign-extending i32).
int64_t wrap(ScalarType t, uint64_t bits) {
  switch (t) {
  case ScalarType::I1:
    return static_cast<int64_t>(bits & 1);
  case ScalarType::I32:
    return static_cast<int32_t>(static_cast<uint32_t>(bits));
  default:
    return static_cast<int64_t>(bits);
  }
}

int64_t minOf(ScalarType t) {
  return t == ScalarType::I32 ? std::numeric_limits<int32_t>::min()
                              : std::numeric_limits<int64_t>::min();
}

std::optional<ConstantValue> foldFloatBinary(BinaryOp op, ScalarType t, double a, double b) {
  // Each f32 operation is computed in float: double rounding through a
  // double intermediate is exact for +,-,*,/ and sqrt of floats, but doing
  // it in float states the intent.
  auto make = [&](double v) { return ConstantValue::ofFloat(t, v); };
  bool f32 = t == ScalarType::F32;
  float fa = static_cast<float>(a), fb = static_cast<float>(b);
  switch (op) {
  case BinaryOp::Add:
    return make(f32 ? static_cast<double>(fa + fb) : a + b);
  case BinaryOp::Sub:
    return make(f32 ? static_cast<double>(fa - fb) : a - b);
  case BinaryOp::Mul:
    return make(f32 ? static_cast<double>(fa * fb) : a * b);
  case BinaryOp::Div:
    if (b == 0)
      return std::nullopt;
    return make(f32 ? static_cast<double>(fa / fb) : a / b);
  case BinaryOp::Rem:
    if (b == 0)
      return std::nullopt;
    return make(f32 ? static_cast<double>(std::fmod(fa, fb)) : std::fmod(a, b));
  case BinaryOp::Min:
  case BinaryOp::Max:
    if (std::isnan(a) || std::isnan(b) || (a == 0 && b == 0 && std::signbit(a) != std::signbit(b)))
      return std::nullopt;
    return make(op == BinaryOp::Min ? (b < a ? b : a) : (b > a ? b : a));
  default:
    return std::nullopt;
  }
}

std::optional<ConstantValue> foldIntBinary(BinaryOp op, ScalarType t, int64_t a, int64_t b) {
  auto make = [&](uint64_t bits) { return ConstantValue::ofInt(t, wrap(t, bits)); };
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  unsigned width = bitWidth(t);
  if (t == ScalarType::I1) {
    // Only the logical operations are meaningful on i1.
    switch (op) {
    case BinaryOp::And:
    case BinaryOp::Min:
      return make(ua & ub);
    case BinaryOp::Or:
    case BinaryOp::Max:
      return make(ua | ub);
    case BinaryOp::Xor:
      return make(ua ^ ub);
    default:
      return std::nullopt;
    }
  }
  switch (op) {
  case BinaryOp::Add:
    return make(ua + ub);
  case BinaryOp::Sub:
    return make(ua - ub);
  case BinaryOp::Mul:
    return make(ua * ub);
  case BinaryOp::Div:
  case BinaryOp::Rem:
    if (b == 0 || (a == minOf(t) && b == -1))
      return std::nullopt;
    return make(static_cast<uint64_t>(op == BinaryOp::Div ? a / b : a % b));
  case BinaryOp::Min:
    return make(static_cast<uint64_t>(std::min(a, b)));
  case BinaryOp::Max:
    return make(static_cast<uint64_t>(std::max(a, b)));
  case BinaryOp::And:
    return make(ua & ub);
  case BinaryOp::Or:
    return make(ua | ub);
  case BinaryOp::Xor:
    return make(ua ^ ub);
  case BinaryOp::Shl:
    if (b < 0 || b >= static_cast<int64_t>(width))
      return std::nullopt;
    return make(ua << b);
  case BinaryOp::Shr:
    if (b < 0 || b >= static_cast<int64_t>(width))
      return std::nullopt;
    return make(static_cast<uint64_t>(a >> b)); // arithmetic shift
  default:
    return std::nullopt;
  }
}

} // namespace

Scalar constantOf(const ConstStmt &s) {
  return qd::isFloat(s.scalarType()) ? Scalar::ofFloat(s.scalarType(), s.floatValue())
                                     : Scalar::ofInt(s.scalarType(), s.intValue());
}

std::optional<ConstantValue> foldBinary(BinaryOp op, const ConstantValue &a,
                                        const ConstantValue &b) {
  if (a.type != b.type)
    return std::nullopt;
  if (a.isFloat())
    return foldFloatBinary(op, a.type, a.f, b.f);
  return foldIntBinary(op, a.type, a.i, b.i);
}

std::optional<ConstantValue> foldUnary(UnaryOp op, const ConstantValue &a) {
  ScalarType t = a.type;
  if (a.isFloat()) {
    bool f32 = t == ScalarType::F32;
    switch (op) {
    case UnaryOp::Neg:
      return ConstantValue::ofFloat(t, -a.f);
    case UnaryOp::Abs:
      return ConstantValue::ofFloat(t, std::fabs(a.f));
    case UnaryOp::Sqrt: // correctly rounded in IEEE 754
      return ConstantValue::ofFloat(t, f32 ? static_cast<double>(std::sqrt(static_cast<float>(a.f)))
                                           : std::sqrt(a.f));
    case UnaryOp::Floor:
      return ConstantValue::ofFloat(t, std::floor(a.f));
    case UnaryOp::Ceil:
      return ConstantValue::ofFloat(t, std::ceil(a.f));
    default:
      return std::nullopt; // transcendental: backend-dependent
    }
  }
  uint64_t ua = static_cast<uint64_t>(a.i);
  switch (op) {
  case UnaryOp::Neg:
    if (t == ScalarType::I1)
      return std::nullopt;
    return ConstantValue::ofInt(t, wrap(t, 0 - ua));
  case UnaryOp::Abs:
    if (t == ScalarType::I1)
      return std::nullopt;
    return ConstantValue::ofInt(t, wrap(t, a.i < 0 ? 0 - ua : ua));
  case UnaryOp::Not:
    return ConstantValue::ofInt(t, wrap(t, ~ua));
  default:
    return std::nullopt;
  }
}

std::optional<ConstantValue> foldCmp(CmpPredicate pred, const ConstantValue &a,
                                     const ConstantValue &b) {
  if (a.type != b.type)
    return std::nullopt;
  bool r;
  if (a.isFloat()) {
    // Ordered comparisons: any NaN makes them false, except `ne`.
    double x = a.f, y = b.f;
    switch (pred) {
    case CmpPredicate::Eq:
      r = x == y;
      break;
    case CmpPredicate::Ne:
      r = x != y;
      break;
    case CmpPredicate::Lt:
      r = x < y;
      break;
    case CmpPredicate::Le:
      r = x <= y;
      break;
    case CmpPredicate::Gt:
      r = x > y;
      break;
    case CmpPredicate::Ge:
      r = x >= y;
      break;
    default:
      return std::nullopt;
    }
  } else {
    int64_t x = a.i, y = b.i;
    switch (pred) {
    case CmpPredicate::Eq:
      r = x == y;
      break;
    case CmpPredicate::Ne:
      r = x != y;
      break;
    case CmpPredicate::Lt:
      r = x < y;
      break;
    case CmpPredicate::Le:
      r = x <= y;
      break;
    case CmpPredicate::Gt:
      r = x > y;
      break;
    case CmpPredicate::Ge:
      r = x >= y;
      break;
    default:
      return std::nullopt;
    }
  }
  return ConstantValue::ofInt(ScalarType::I1, r ? 1 : 0);
}

std::optional<ConstantValue> foldCast(const ConstantValue &a, ScalarType to) {
  if (!a.isFloat()) {
    if (isFloat(to)) // round to nearest, as the hardware conversion does
      return ConstantValue::ofFloat(to, to == ScalarType::F32
                                            ? static_cast<double>(static_cast<float>(a.i))
                                            : static_cast<double>(a.i));
    if (to == ScalarType::I1)
      return ConstantValue::ofInt(to, a.i != 0 ? 1 : 0);
    return ConstantValue::ofInt(to, wrap(to, static_cast<uint64_t>(a.i)));
  }
  if (isFloat(to))
    return ConstantValue::ofFloat(to, a.f);
  if (to == ScalarType::I1 || std::isnan(a.f))
    return std::nullopt;
  // Truncation toward zero; out-of-range conversions are left to the runtime.
  double t = std::trunc(a.f);
  double lo = static_cast<double>(minOf(to));
  double hi = -lo; // 2^31 or 2^63, exclusive
  if (!(t >= lo && t < hi))
    return std::nullopt;
  return ConstantValue::ofInt(to, static_cast<int64_t>(t));
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
    auto operand = [&](unsigned i) { return evaluate(s->operand(i), depth + 1); };
    switch (s->kind()) {
    case StmtKind::Const:
      return constantOf(*cast<ConstStmt>(s));
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
  auto b = boundValue(loop.begin()), e = boundValue(loop.end());
  if (!b || !e)
    return std::nullopt;
  return *e > *b ? *e - *b : 0;
}

} // namespace qd
